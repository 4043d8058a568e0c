"""communication_accounting: the handout's XXL memory and communication arithmetic (problem 19).

Nothing is measured: the one cell computes the derivations of
:func:`cs336report.accounting.distributed.communication_accounting` from the setting the config
gives (the handout's XXL numbers, and the token count the handout leaves open), so the report
reads them from a result file like every other answer.

    python -m cs336report run communication_accounting --cell '{"device": "cpu", "setting": {}}' --out xxl.json
"""

from __future__ import annotations

from ..accounting.distributed import XXL, communication_accounting


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("communication_accounting")
    if grid is None:
        return {}
    return {"xxl": {"device": "cpu", "setting": dict(grid.get("setting") or {})}}


def run(cell: dict) -> dict:
    return communication_accounting(XXL.from_dict(cell["setting"]))


EXPERIMENTS = {"communication_accounting": (cells, run)}
