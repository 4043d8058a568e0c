"""The 2026 handout's §8 calculation problems (22-26), derived with sympy from the §8 setting.

One module per problem, each with one function of the problem's name that takes a
:class:`~.setting.Setting` and returns a :class:`~.records.Derivation` (JSON through ``as_dict``):
for each sub-question the steps, symbolic and, where the setting gives numbers, numeric, and the
final answers. The FFN's equations under each split live in :mod:`.ffn`; docs/parallelism-calcs.md
describes the derivations.

    python -c "from cs336report.accounting.parallelism import DERIVATIONS; print(DERIVATIONS['tp_calcs']().as_dict())"
"""

from __future__ import annotations

from .alternate_ring_all_reduce import alternate_ring_all_reduce
from .data_parallel_calcs import data_parallel_calcs
from .fsdp_calcs import fsdp_calcs
from .fsdp_tp_calcs import fsdp_tp_calcs
from .records import Derivation, Part, Step
from .setting import Setting
from .tp_calcs import tp_calcs

# the handout's order (problems 22-26)
DERIVATIONS = {f.__name__: f for f in (alternate_ring_all_reduce, data_parallel_calcs, fsdp_calcs, tp_calcs,
                                        fsdp_tp_calcs)}

__all__ = ["DERIVATIONS", "Derivation", "Part", "Setting", "Step", *DERIVATIONS]
