"""tp_calcs (2026 handout §8.4, problem 25): the FFN with N_TP-way tensor parallelism.

W1 and W2 are split by columns (D, D_FF/N_TP) and W3 by rows (D_FF/N_TP, D); every device sees the
whole batch. The forward ends with an all-reduce of the partial outputs y^(i), so every device holds
the whole y and, in the backward, the whole dy; the backward's only collective is the all-reduce
of the partial input gradients.

    (a) dz^(i) = dy W3^(i)ᵀ; dx2^(i) = dz^(i) ∘ f(x1^(i)); dx1^(i) = dz^(i) ∘ f'(x1^(i)) ∘ x2^(i);
        dxbar^(i) = dx1^(i) W1^(i)ᵀ + dx2^(i) W2^(i)ᵀ; dx = all-reduce(dxbar^(i));
        dW3^(i) = z^(i)ᵀ dy; dW2^(i) = xᵀ dx2^(i); dW1^(i) = xᵀ dx1^(i)
    (b) FLOPs per device   forward 6·B·D·D_FF / N_TP,  backward 12·B·D·D_FF / N_TP
    (c) communication      forward and backward 4·B·D·(N_TP - 1) / (N_TP·W) each
    (d) compute bound while  backward N_TP <= 1 + 3·D_FF·W/C,  forward N_TP <= 1 + 3·D_FF·W/(2·C)

    python -c "from cs336report.accounting.parallelism import tp_calcs; print(tp_calcs())"
"""

from __future__ import annotations

from . import ffn
from .records import Derivation, Part, value, with_note
from .setting import N_TP, B, D, Setting
from .steps import bound_steps, collective_steps, compute_time, equation_steps, flop_steps

PROGRAMS = {"forward": ffn.tensor_parallel_forward, "backward": ffn.tensor_parallel_backward}


def _times(name: str):
    def times(setting: Setting) -> tuple:
        program = PROGRAMS[name]()
        return ffn.seconds_by_group(program, setting)[N_TP], compute_time(setting, program)
    return times


def _backward_equations() -> Part:
    forward = equation_steps(ffn.tensor_parallel_forward())
    backward = [with_note(s, f"{s.note}; {_WHY.get(s.what, '')}".rstrip("; ")) for s in
                equation_steps(ffn.tensor_parallel_backward())]
    return Part("a", "the backward pass of this tensor-parallel FFN, equation by equation, from dy (B, D)",
                tuple(forward), tuple(backward))


_WHY = {"gradient of z": "dy is whole on every device, as the forward's all-reduce left y whole",
        "gradient of the input": "each device sums over its own D_FF/N_TP columns only: a partial sum",
        "sum of the partial input gradients": "the one collective of the backward",
        "gradient of W_3": "the rows of W_3 this device holds, from its own z^(i)",
        "gradient of W_2": "the columns of W_2 this device holds; x is whole on every device",
        "gradient of W_1": "the columns of W_1 this device holds"}


def tp_calcs(setting: Setting = Setting()) -> Derivation:
    programs = {name: build() for name, build in PROGRAMS.items()}
    flops = {name: ffn.flops(p, setting) for name, p in programs.items()}
    reasons = {"forward": "Each device runs the forward's three matrix products on the whole batch, each on "
                          "its D_FF/N_TP columns of the hidden layer.",
               "backward": "Each device runs the backward's six matrix products on the whole batch, each on "
                           "its D_FF/N_TP columns of the hidden layer."}
    b = Part("b", "FLOPs of the forward and of the backward pass on each device, with N_TP-way tensor parallelism",
             tuple(s for name, p in programs.items() for s in flop_steps(setting, p, name)),
             tuple(value(setting, f"{name} FLOPs per device", flops[name], "FLOP", reasons[name]) for name in PROGRAMS))

    times = {name: _times(name)(setting) for name in PROGRAMS}
    reasons = {"forward": "The partial outputs y^(i), B·D values of 2 bytes, are all-reduced over the ring of "
                          "N_TP devices; the weights never move.",
               "backward": "The partial input gradients, B·D values of 2 bytes, are all-reduced over the ring; the "
                           "weight gradients stay on the device that holds the weights."}
    c = Part("c", "communication time of the forward and of the backward pass, with N_TP-way tensor parallelism",
             tuple([value(setting, "bytes of one (B, D) activation", setting.bytes_per_value * B * D, "B")]
                   + [s for name, p in programs.items() for s in collective_steps(setting, p, name)]),
             tuple(value(setting, f"{name} communication time", times[name][0], "s", reasons[name])
                   for name in PROGRAMS))

    steps, answers = [], []
    for name in ("backward", "forward"):  # the handout's order in (d)
        found, answer = bound_steps(setting, name, N_TP, *times[name], _times(name))
        steps += found
        answers.append(with_note(answer, f"Communication over computation in the {name} rises with N_TP and no "
                                         "longer depends on the batch, which both sides scale with."))
    d = Part("d", "largest N_TP before the backward, and before the forward, is communication bound",
             tuple(steps), tuple(answers))
    return Derivation("tp_calcs", "8.4", setting.as_dict(), (_backward_equations(), b, c, d))
