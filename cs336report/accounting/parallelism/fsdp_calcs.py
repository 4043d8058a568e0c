"""fsdp_calcs (2026 handout §8.3, problem 24): the FFN's forward and backward passes with N_FSDP-way FSDP.

Each device holds B/N_FSDP rows of the batch and a 1/N_FSDP shard of each weight (split by rows here;
either dimension gives the same sizes). Both passes all-gather the weights first; the backward then
reduce-scatters the weight gradients instead of all-reducing them.

    (a) FLOPs per device   backward 12·B·D·D_FF / N_FSDP,  forward 6·B·D·D_FF / N_FSDP
    (b) communication      backward 12·D·D_FF·(N_FSDP - 1) / (N_FSDP·W),  forward half that
    (c) compute bound while  N_FSDP <= 1 + B·W/C, for both passes (B·W/C for many devices)

    python -c "from cs336report.accounting.parallelism import fsdp_calcs; print(fsdp_calcs())"
"""

from __future__ import annotations

from . import ffn
from .records import Derivation, Part, value, with_note
from .setting import D_FF, N_FSDP, D, Setting
from .steps import bound_steps, collective_steps, compute_time, flop_steps

PASSES = {"backward": ffn.fsdp_backward, "forward": ffn.fsdp_forward}  # the handout's order


def _times(program_of):
    def times(setting: Setting) -> tuple:
        program = program_of()
        return ffn.seconds_by_group(program, setting)[N_FSDP], compute_time(setting, program)
    return times


def fsdp_calcs(setting: Setting = Setting()) -> Derivation:
    programs = {name: build() for name, build in PASSES.items()}
    flops = {name: ffn.flops(p, setting) for name, p in programs.items()}
    reasons = {"backward": "The gathered weights leave each device the data-parallel backward on its B/N_FSDP rows: "
                           "the same six matrix products, and nothing more.",
               "forward": "Each device runs the forward's three matrix products on its B/N_FSDP rows with the "
                          "gathered weights; the gathers add no FLOPs."}
    a = Part("a", "FLOPs of the backward and of the forward pass on each device, with N_FSDP-way FSDP",
             tuple(s for name, p in programs.items() for s in flop_steps(setting, p, name)),
             tuple(value(setting, f"{name} FLOPs per device", flops[name], "FLOP", reasons[name]) for name in PASSES))

    weights = 3 * setting.bytes_per_value * D * D_FF
    times = {name: _times(build)(setting) for name, build in PASSES.items()}
    reasons = {"backward": "The backward gathers the three weights again and reduce-scatters their gradients: "
                           "two ring collectives over all of the weights' bytes, whatever the batch.",
               "forward": "The forward all-gathers the three weights over the ring once, whatever the batch."}
    b = Part("b", "communication time of the backward and of the forward pass, with N_FSDP-way FSDP",
             tuple([value(setting, "bytes of the three weights (and of their gradients)", weights, "B")]
                   + [s for name, p in programs.items() for s in collective_steps(setting, p, name)]),
             tuple(value(setting, f"{name} communication time", times[name][0], "s", reasons[name]) for name in PASSES))

    steps, answers = [], []
    for name, build in PASSES.items():
        found, answer = bound_steps(setting, name, N_FSDP, *times[name], _times(build))
        steps += found
        answers.append(with_note(answer, f"Communication over computation in the {name} rises with N_FSDP, so it "
                                         "stays compute bound up to the N_FSDP at which the two are equal."))
    c = Part("c", "largest N_FSDP before the backward, and before the forward, is communication bound",
             tuple(steps), tuple(answers))
    return Derivation("fsdp_calcs", "8.3", setting.as_dict(), (a, b, c))
