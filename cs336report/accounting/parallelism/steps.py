"""Derivation steps built from an FFN program (:mod:`.ffn`), and the largest group that stays compute bound.

A program's FLOPs are listed product by product, its communication collective by collective, so
the report shows where each term of a total comes from. :func:`largest_group` solves "communication
time = computation time" for a device count and checks that communication outgrows computation as
the count rises, so that the root is the largest count still compute bound.
"""

from __future__ import annotations

import dataclasses

import sympy as sp

from . import ffn
from .records import Step, bound, equation, value
from .setting import C, Setting


def _prefix(label: str) -> str:
    return f"{label}: " if label else ""


def flop_steps(setting: Setting, program: ffn.Program, label: str = "") -> list[Step]:
    """One step per matrix product: its FLOPs on one device (``label``: which pass)."""
    return [value(setting, f"{_prefix(label)}FLOPs of the {e.role}, {e.text()}", e.flops(setting), "FLOP")
            for e in ffn.matmuls(program)]


def collective_steps(setting: Setting, program: ffn.Program, label: str = "") -> list[Step]:
    """One step per collective: its time on its ring (``label``: which pass)."""
    return [value(setting, f"{_prefix(label)}time of the {e.rhs.kind} ({e.role}), {e.text()}", e.seconds(setting), "s")
            for e in ffn.collectives(program)]


def equation_steps(program: ffn.Program) -> list[Step]:
    """The program's equations, each with the shape of what it computes."""
    return [equation(e.role, e.text(), e.latex(), note=f"shape ({sp.sstr(e.lhs.shape[0])}, {sp.sstr(e.lhs.shape[1])})")
            for e in program]


def compute_time(setting: Setting, program: ffn.Program) -> sp.Expr:
    return sp.factor(ffn.flops(program, setting) / C)


def largest_group(communication, computation, group: sp.Symbol) -> sp.Expr:
    """The device count at which ``communication`` time equals ``computation`` time, where their ratio
    rises with the count (so below it the step is compute bound, above it communication bound)."""
    ratio = sp.factor(communication / computation)
    if sp.factor(sp.diff(ratio, group)).is_positive is not True:
        raise ValueError(f"communication over computation, {ratio}, does not rise with {group}")
    roots = [r for r in sp.solve(sp.Eq(communication, computation), group) if r.is_positive is not False]
    if len(roots) != 1:
        raise ValueError(f"no single positive {group} where {communication} = {computation}: {roots}")
    return sp.expand(roots[0])


def many_devices(setting: Setting) -> Setting:
    """The same setting with the rings' (N - 1)/N taken as 1."""
    return dataclasses.replace(setting, many_devices=True)


def ratio_step(setting: Setting, communication, computation, what: str) -> Step:
    return value(setting, f"communication time over computation time ({what})",
                 sp.factor(communication / computation))


def bound_steps(setting: Setting, what: str, group: sp.Symbol, communication, computation,
                approximate) -> tuple[list[Step], Step]:
    """Steps to the largest ``group`` that stays compute bound, and that bound as the answer.
    ``approximate`` computes (communication, computation) in the many-devices setting."""
    steps = [value(setting, f"computation time ({what})", computation, "s"),
             value(setting, f"communication time ({what})", communication, "s"),
             ratio_step(setting, communication, computation, what)]
    limit = largest_group(communication, computation, group)
    if not setting.many_devices:
        steps.append(bound(setting, f"for many devices, (N - 1)/N taken as 1 ({what})", group,
                           largest_group(*approximate(many_devices(setting)), group)))
    return steps, bound(setting, f"largest {group} still compute bound ({what})", group, limit)
