"""fsdp_tp_calcs (2026 handout §8.5, problem 26): the FFN's forward pass on an N_FSDP × N_TP grid of devices.

Device (i, j) holds W1, W2 shards (D/N_FSDP, D_FF/N_TP) and a W3 shard (D_FF/N_TP, D/N_FSDP), and rows
B/N_FSDP of the batch. It all-gathers its tensor-parallel slice of each weight over the FSDP axis (j),
runs the tensor-parallel forward, and all-reduces the partial outputs over the TP axis (i).

    (a) FLOPs per device   6·B·D·D_FF / (N_FSDP·N_TP)
    (b) communication      max(T_FSDP, T_TP): T_FSDP = 6·D·D_FF·(N_FSDP - 1) / (N_FSDP·N_TP·W),
                                              T_TP = 4·B·D·(N_TP - 1) / (N_FSDP·N_TP·W)
    (c) axes overlapped:   each axis bounded alone, N_FSDP <= 1 + B·W/C and N_TP <= 1 + 3·D_FF·W/(2·C),
                           so N <= (1 + B·W/C)·(1 + 3·D_FF·W/(2·C))  (3·B·D_FF·W²/(2·C²) for many devices)
    (d) axes one after the other: compute bound while 3·D_FF·(N_FSDP - 1) + 2·B·(N_TP - 1) <= 3·B·D_FF·W/C;
        the product N is largest at N_FSDP = M/(6·D_FF), N_TP = M/(4·B) with M = 3·B·D_FF·W/C + 3·D_FF + 2·B,
        so N <= M²/(24·B·D_FF)  (3·B·D_FF·W²/(8·C²) for many devices), splits taken as real numbers

    python -c "from cs336report.accounting.parallelism import fsdp_tp_calcs; print(fsdp_tp_calcs())"
"""

from __future__ import annotations

import sympy as sp

from . import ffn
from .records import Derivation, Part, bound, value
from .setting import D_FF, N, N_FSDP, N_TP, B, D, Setting
from .steps import bound_steps, collective_steps, compute_time, flop_steps, largest_group, many_devices

AXES = {"FSDP axis": N_FSDP, "TP axis": N_TP}


def _times(setting: Setting) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(FSDP axis time, TP axis time, computation time) of the forward."""
    program = ffn.fsdp_tp_forward()
    by_group = ffn.seconds_by_group(program, setting)
    return by_group[N_FSDP], by_group[N_TP], compute_time(setting, program)


def _flops(setting: Setting, program) -> Part:
    return Part("a", "FLOPs of the forward pass on each device, with N_FSDP-way FSDP and N_TP-way tensor parallelism",
                tuple(flop_steps(setting, program)),
                (value(setting, "forward FLOPs per device", ffn.flops(program, setting), "FLOP",
                       "Each device runs the forward's three matrix products on its B/N_FSDP rows and its D_FF/N_TP "
                       "columns of the hidden layer."),))


def _communication(setting: Setting, program) -> Part:
    fsdp, tp, _ = _times(setting)
    b = setting.bytes_per_value
    steps = [value(setting, "bytes of one device's gathered weight slices", 3 * b * D * D_FF / N_TP, "B"),
             value(setting, "bytes of one device's partial output", b * B * D / N_FSDP, "B"),
             *collective_steps(setting, program),
             value(setting, "communication time on the FSDP axis", fsdp, "s"),
             value(setting, "communication time on the TP axis", tp, "s")]
    answer = value(setting, "forward communication time, the axes overlapped", sp.Max(fsdp, tp), "s",
                   "The gathers run over the FSDP axis and the all-reduce over the TP axis; overlapped, the "
                   "slower axis sets the time.")
    return Part("b", "communication time of the forward pass when the two axes' collectives overlap",
                tuple(steps), (answer,))


def _overlapped(setting: Setting) -> Part:
    fsdp, tp, compute = _times(setting)
    steps, limits = [], {}
    for (name, group), time in zip(AXES.items(), (fsdp, tp)):
        limit = largest_group(time, compute, group)
        if limit.free_symbols & ({N_FSDP, N_TP} - {group}):
            raise ValueError(f"the {name}'s bound depends on the other axis: {limit}")
        found, answer = bound_steps(setting, name, group, time, compute,
                                    lambda s, k=list(AXES).index(name): (_times(s)[k], _times(s)[2]))
        steps += found + [answer]
        limits[group] = limit
    product = sp.Mul(limits[N_FSDP], limits[N_TP], evaluate=False)
    if not setting.many_devices:
        approx = many_devices(setting)
        f, t, c = _times(approx)
        steps.append(bound(setting, "for many devices, (N - 1)/N taken as 1", N,
                           sp.factor(largest_group(f, c, N_FSDP) * largest_group(t, c, N_TP))))
    answer = bound(setting, "largest N = N_FSDP·N_TP still compute bound, the axes overlapped", N, product,
                   note="Each axis's time over the computation depends on its own count only, so each count "
                        "takes its own largest value and N is their product.")
    return Part("c", "largest N = N_FSDP·N_TP, split at best, before the overlapped forward is communication bound",
                tuple(steps), (answer,))


def _best_split(fsdp, tp, compute) -> dict[str, sp.Expr]:
    """The largest N_FSDP·N_TP on the boundary fsdp + tp = compute, the counts taken as real numbers."""
    roots = sp.solve(sp.Eq(fsdp + tp, compute), N_TP)
    if len(roots) != 1:
        raise ValueError(f"the boundary is not one N_TP for each N_FSDP: {roots}")
    tp_on_boundary = sp.factor(roots[0])
    along = N_FSDP * tp_on_boundary
    stationary = sp.solve(sp.diff(along, N_FSDP), N_FSDP)
    if len(stationary) != 1 or not sp.factor(sp.diff(along, N_FSDP, 2)).is_negative:
        raise ValueError(f"no single maximum of N along the boundary: {stationary}")
    fsdp_best = sp.factor(stationary[0])
    tp_best = sp.factor(tp_on_boundary.subs(N_FSDP, fsdp_best))
    return {"tp_on_boundary": tp_on_boundary, "along": sp.factor(along), "fsdp": fsdp_best, "tp": tp_best,
            "n": sp.factor(fsdp_best * tp_best)}


def _sequential(setting: Setting) -> Part:
    fsdp, tp, compute = _times(setting)
    best = _best_split(fsdp, tp, compute)
    # one axis alone, for settings where the best split would put the other below one device
    fsdp_alone = largest_group(fsdp.subs(N_TP, 1), compute.subs(N_TP, 1), N_FSDP)
    tp_alone = largest_group(tp.subs(N_FSDP, 1), compute.subs(N_FSDP, 1), N_TP)
    every_case = sp.Piecewise((fsdp_alone, best["tp"] < 1), (tp_alone, best["fsdp"] < 1), (best["n"], True))
    steps = [value(setting, "computation time", compute, "s"),
             value(setting, "communication time, the axes one after the other", fsdp + tp, "s"),
             value(setting, "N_TP where communication equals computation, for a given N_FSDP",
                   best["tp_on_boundary"], "devices"),
             value(setting, "N = N_FSDP·N_TP along that boundary", best["along"], "devices"),
             value(setting, "N_FSDP where N along the boundary is largest", best["fsdp"], "devices"),
             value(setting, "N_TP there", best["tp"], "devices"),
             bound(setting, "FSDP alone (N_TP = 1)", N_FSDP, fsdp_alone),
             bound(setting, "tensor parallelism alone (N_FSDP = 1)", N_TP, tp_alone),
             bound(setting, "largest N in every case (one axis alone where the best split puts the other "
                            "below one device)", N, every_case)]
    if not setting.many_devices:
        f, t, c = _times(many_devices(setting))
        steps.append(bound(setting, "for many devices, (N - 1)/N taken as 1", N, _best_split(f, t, c)["n"]))
    answer = bound(setting, "largest N = N_FSDP·N_TP still compute bound, the axes one after the other", N,
                   best["n"], note="The two axes' times add up, so both counts draw on one budget; along the boundary "
                                   "where communication equals computation N is a downward parabola in N_FSDP, "
                                   "largest at its vertex (counts taken as real numbers, each at least one device).")
    return Part("d", "largest N = N_FSDP·N_TP, split at best, when the two axes' collectives cannot overlap",
                tuple(steps), (answer,))


def fsdp_tp_calcs(setting: Setting = Setting()) -> Derivation:
    program = ffn.fsdp_tp_forward()
    return Derivation("fsdp_tp_calcs", "8.5", setting.as_dict(),
                      (_flops(setting, program), _communication(setting, program), _overlapped(setting),
                       _sequential(setting)))
