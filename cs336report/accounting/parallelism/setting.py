"""The setting of the 2026 handout's §8 (problems 22-26): its symbols, its collectives and its costs.

N devices, every pair linked; each device sends at most W bytes/s (egress). A ring all-gather or
reduce-scatter of a tensor of S bytes over N devices takes (N - 1)/N · S/W seconds, a ring all-reduce
(a reduce-scatter, then an all-gather) twice that. The model is one FFN (x (B, D); W1, W2 (D, D_FF);
W3 (D_FF, D)) in FP16, 2 bytes a value; only matrix products count, 2·A·B·C FLOPs for (A, B)(B, C);
each device computes at C FLOP/s. Communication overlaps computation, so a step is communication
bound where its communication takes longer than its computation.

The symbols stay symbols; a :class:`Setting` may carry numbers for some of them, and each step of a
derivation then also gets its value.

    python -c "from cs336report.accounting.parallelism.setting import *; print(Setting().all_reduce(S, N))"
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import sympy as sp

B, D, D_FF = sp.symbols("B D D_FF", positive=True)  # batch rows, model width, FFN width
C, W, S = sp.symbols("C W S", positive=True)  # FLOP/s per device, egress bytes/s per device, bytes
N, N_DP, N_FSDP, N_TP = sp.symbols("N N_DP N_FSDP N_TP", positive=True)  # devices (in a group)

SYMBOLS = {s.name: s for s in (B, D, D_FF, C, W, S, N, N_DP, N_FSDP, N_TP)}
DEVICE_COUNTS = frozenset({"N", "N_DP", "N_FSDP", "N_TP"})
UNITS = {"B": "rows", "D": "values", "D_FF": "values", "C": "FLOP/s", "W": "B/s", "S": "B",
         "N": "devices", "N_DP": "devices", "N_FSDP": "devices", "N_TP": "devices"}


@dataclass(frozen=True)
class Setting:
    """The §8 setting. ``values`` gives numbers to some symbols (by name), to evaluate each step;
    ``many_devices`` replaces the rings' (N - 1)/N by 1, the form for groups of many devices."""

    bytes_per_value: int = 2  # FP16 weights, activations and gradients
    flops_per_multiply_add: int = 2  # a matrix product (A, B)(B, C) costs 2·A·B·C FLOPs
    values: tuple[tuple[str, float], ...] = ()
    many_devices: bool = False

    def __post_init__(self):
        for name in ("bytes_per_value", "flops_per_multiply_add"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        for name, value in self.values:
            if name not in SYMBOLS:
                raise ValueError(f"values: unknown symbol {name!r} (known: {', '.join(SYMBOLS)})")
            least = 1 if name in DEVICE_COUNTS else 0
            if not math.isfinite(value) or not (value >= least if least else value > 0):
                raise ValueError(f"values: {name} must be {'at least 1' if least else 'positive'}, not {value!r}")
        if len({name for name, _ in self.values}) != len(self.values):
            raise ValueError("values: a symbol is given twice")

    @classmethod
    def with_values(cls, many_devices: bool = False, **values: float) -> "Setting":
        """The setting with numbers for the symbols named: ``Setting.with_values(B=1024, W=4.5e11)``."""
        return cls(values=tuple(sorted(values.items())), many_devices=many_devices)

    @classmethod
    def from_dict(cls, data: dict) -> "Setting":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown setting key(s): {', '.join(unknown)}")
        values = data.get("values") or {}
        return cls(**{**data, "values": tuple(sorted(dict(values).items()))})

    def as_dict(self) -> dict:
        return {"bytes_per_value": self.bytes_per_value, "flops_per_multiply_add": self.flops_per_multiply_add,
                "values": dict(self.values), "many_devices": self.many_devices}

    def substitutions(self) -> dict[sp.Symbol, sp.Expr]:
        return {SYMBOLS[name]: sp.Rational(str(value)) for name, value in self.values}  # exact decimals

    def evaluate(self, expr) -> float | None:
        """``expr``'s number where every symbol in it has one, else None."""
        expr = sp.sympify(expr)
        if not expr.free_symbols <= set(self.substitutions()):
            return None
        return float(expr.subs(self.substitutions()))

    # --- the collectives, ring algorithms over ``group`` devices, ``size`` bytes in all ---------------

    def ring_share(self, group) -> sp.Expr:
        """The part of the tensor each device sends in a ring all-gather or reduce-scatter."""
        return sp.Integer(1) if self.many_devices else (group - 1) / group

    def all_gather(self, size, group) -> sp.Expr:
        return self.ring_share(group) * size / W

    def reduce_scatter(self, size, group) -> sp.Expr:
        return self.ring_share(group) * size / W

    def all_reduce(self, size, group) -> sp.Expr:
        return 2 * self.ring_share(group) * size / W

    def matmul_flops(self, rows, inner, cols) -> sp.Expr:
        return self.flops_per_multiply_add * rows * inner * cols
