"""data_parallel_calcs (2026 handout §8.2, problem 23): the FFN's backward pass with N_DP-way data parallelism.

Each device holds the whole weights and B/N_DP rows of the batch; its backward runs the six products
of the FFN's backward on those rows, and the partial weight gradients are all-reduced.

    (a) FLOPs per device   12·B·D·D_FF / N_DP
    (b) communication      2·(N_DP - 1)/N_DP · 3·(2·D·D_FF) / W = 12·D·D_FF·(N_DP - 1) / (N_DP·W)
    (c) compute bound while  N_DP <= 1 + B·W/C   (B·W/C for many devices)

    python -c "from cs336report.accounting.parallelism import data_parallel_calcs; print(data_parallel_calcs())"
"""

from __future__ import annotations

from . import ffn
from .records import Derivation, Part, value, with_note
from .setting import D_FF, N_DP, D, Setting
from .steps import bound_steps, collective_steps, compute_time, flop_steps


def _times(setting: Setting) -> tuple:
    program = ffn.data_parallel_backward()
    return ffn.seconds_by_group(program, setting)[N_DP], compute_time(setting, program)


def data_parallel_calcs(setting: Setting = Setting()) -> Derivation:
    program = ffn.data_parallel_backward()
    flops = ffn.flops(program, setting)
    a = Part("a", "FLOPs of the backward pass on each device, with N_DP-way data parallelism",
             tuple(flop_steps(setting, program)
                   + [value(setting, "FLOPs on all devices together", N_DP * flops, "FLOP")]),
             (value(setting, "backward FLOPs per device", flops, "FLOP",
                    "Each device runs the backward's six matrix products (dz, the two terms of dx and the three "
                    "weight gradients) on its B/N_DP rows of the batch, each of D·D_FF multiply-adds a row."),))

    communication, computation = _times(setting)
    b = Part("b", "communication time of the backward pass, with N_DP-way data parallelism",
             tuple([value(setting, "bytes of the three weight gradients", 3 * setting.bytes_per_value * D * D_FF, "B")]
                   + collective_steps(setting, program)),
             (value(setting, "backward communication time", communication, "s",
                    "The three weight gradients, 2·D·D_FF bytes each, are all-reduced over the ring of N_DP "
                    "devices, whatever the batch."),))

    steps, answer = bound_steps(setting, "backward", N_DP, communication, computation, _times)
    c = Part("c", "largest N_DP before the backward pass is communication bound",
             tuple(steps),
             (with_note(answer, "Communication over computation rises with N_DP, so the backward stays compute bound "
                                "up to the N_DP at which the two are equal."),))
    return Derivation("data_parallel_calcs", "8.2", setting.as_dict(), (a, b, c))

