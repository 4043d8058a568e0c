"""Analytic memory and communication counts of the handout's distributed problems.

communication_accounting (problem 19): the XXL model of two linear layers per block, trained
with fp32 master weights, accumulated gradients and AdamW state, bf16 activations and gradient
communication, without activation checkpointing. Each answer is a list of :class:`Step` (a
quantity, its formula, the formula with the numbers put in, and the value), so the report prints
the derivation, not only the result. Part (c) follows the forward-pass model of mixed FSDP and
tensor parallelism in Austin et al., "How to Scale Your Model" (the Scaling Book), Part 5:

    T_math = 2·2·B·D·F / (N·C)          T_FSDP = 2·2·D·F / (Y·W·M_X)        T_TP = 2·2·B·D / (X·W·M_Y)

with B tokens in the global batch, N = X·Y chips; the step is compute bound while
T_math >= T_FSDP + T_TP (communication overlapped with compute, the two axes' traffic added).

optimizer_state_sharding_accounting (problem 21): the bytes each rank holds and moves per step
under data parallelism with and without optimizer-state sharding, and under ZeRO stage 1 as
Rajbhandari et al. (2020) define it, for a model of P fp32 parameters trained with AdamW.

    python -c "from cs336report.accounting.distributed import *; print(communication_accounting(XXL()))"
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

GB = 10**9  # the handout's memory sizes (H100 80 GB, TPU v5p 95 GB) are decimal gigabytes


@dataclass(frozen=True)
class XXL:
    """The handout's XXL setting; ``tokens`` is ours (the handout leaves the batch open)."""

    d_model: int = 16384
    d_ff: int = 53248
    num_blocks: int = 126
    master_bytes: int = 4  # fp32 master weights
    grad_bytes: int = 4  # fp32 accumulated gradients
    optimizer_bytes: int = 8  # AdamW: two fp32 moments per parameter
    activation_bytes: int = 2  # bf16 activations saved for backward
    comm_bytes: int = 2  # bf16 communication (weights gathered, activations exchanged)
    h100_bytes: int = 80 * GB
    tpu_bytes: int = 95 * GB
    w_ici: float = 2 * 9e10  # TPU v5p ICI bandwidth per axis (bytes/s, both directions)
    flops: float = 4.6e14  # TPU v5p bf16 FLOP/s
    m_x: int = 2  # mesh axes of the FSDP dimension
    m_y: int = 1  # mesh axes of the tensor-parallel dimension
    x: int = 16  # FSDP ways
    y: int = 4  # tensor-parallel ways
    # tokens whose activations one device keeps for backward in (a) and (b): batch x sequence.
    # Not given by the handout; 1 sequence of 2,048 tokens by default.
    tokens: int = 2048

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not value > 0:
                raise ValueError(f"{f.name} must be positive, not {value!r}")

    @classmethod
    def from_dict(cls, data: dict) -> "XXL":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown XXL setting(s): {', '.join(unknown)}")
        return cls(**data)


@dataclass(frozen=True)
class Step:
    """One line of a derivation: ``name = formula = substituted = value unit``."""

    name: str
    formula: str
    substituted: str
    value: float | None  # None: an expression (no single value), or no solution
    unit: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _n(x: float) -> str:
    """A number for a derivation: integers with thousands separators, others with 4 significant figures."""
    if float(x).is_integer() and abs(x) < 1e16:
        return f"{int(x):,}"
    return f"{x:.4g}"


def params(c: XXL) -> Step:
    p = c.num_blocks * 2 * c.d_model * c.d_ff
    return Step("P (parameters)", "num_blocks · 2 · d_model · d_ff",
                f"{c.num_blocks} · 2 · {c.d_model} · {c.d_ff}", p)


def part_a(c: XXL) -> list[Step]:
    """Master weights, gradients and optimizer state in fp32; bf16 activations; H100s needed."""
    p = params(c)
    P = p.value
    per_param = c.master_bytes + c.grad_bytes + c.optimizer_bytes
    state = per_param * P
    per_token = c.num_blocks * (c.d_model + c.d_ff) * c.activation_bytes
    acts = c.tokens * per_token
    return [
        p,
        Step("master weights", f"{c.master_bytes} B · P", f"{c.master_bytes} · {_n(P)}", c.master_bytes * P, "B"),
        Step("accumulated gradients", f"{c.grad_bytes} B · P", f"{c.grad_bytes} · {_n(P)}", c.grad_bytes * P, "B"),
        Step("optimizer state (AdamW m, v)", f"{c.optimizer_bytes} B · P", f"{c.optimizer_bytes} · {_n(P)}",
             c.optimizer_bytes * P, "B"),
        Step("weights + gradients + optimizer state", f"{per_param} B · P", f"{per_param} · {_n(P)}", state, "B"),
        Step("H100s for these (80 GB each)", "⌈state / 80 GB⌉", f"⌈{_n(state)} / {_n(c.h100_bytes)}⌉",
             math.ceil(state / c.h100_bytes)),
        # saved for backward: each linear keeps its input (d_model values into the first, d_ff into the second)
        Step("activations saved per token", f"num_blocks · (d_model + d_ff) · {c.activation_bytes} B",
             f"{c.num_blocks} · ({c.d_model} + {c.d_ff}) · {c.activation_bytes}", per_token, "B"),
        Step("activations A (saved for backward)", "tokens · activations per token", f"{c.tokens} · {_n(per_token)}",
             acts, "B"),
        Step("H100s for state + activations", "⌈(state + A) / 80 GB⌉",
             f"⌈({_n(state)} + {_n(acts)}) / {_n(c.h100_bytes)}⌉", math.ceil((state + acts) / c.h100_bytes)),
    ]


def fsdp_bytes_per_device(c: XXL, n: int) -> float:
    """(b): state and half the activations sharded over ``n`` devices, the other half on every device."""
    P = params(c).value
    state = (c.master_bytes + c.grad_bytes + c.optimizer_bytes) * P
    acts = c.tokens * c.num_blocks * (c.d_model + c.d_ff) * c.activation_bytes
    return (state + acts / 2) / n + acts / 2


def part_b(c: XXL) -> list[Step]:
    """Per-device memory with N_FSDP shards, and the smallest N_FSDP below one TPU v5p's memory."""
    a = {s.name: s.value for s in part_a(c)}
    state, acts = a["weights + gradients + optimizer state"], a["activations A (saved for backward)"]
    steps = [Step("memory per device M(N)", "(16 B · P + A/2) / N_FSDP + A/2",
                  f"({_n(state)} + {_n(acts / 2)}) / N_FSDP + {_n(acts / 2)}", None, "B")]
    room = c.tpu_bytes - acts / 2
    if room <= 0:
        steps.append(Step("N_FSDP for M(N) < 95 GB", "A/2 >= 95 GB: no N_FSDP suffices",
                          f"{_n(acts / 2)} >= {_n(c.tpu_bytes)}", None))
        return steps
    bound = (state + acts / 2) / room
    n = math.floor(bound) + 1  # the smallest integer N with M(N) < 95 GB
    steps += [
        Step("bound on N_FSDP", "N_FSDP > (state + A/2) / (95 GB − A/2)",
             f"({_n(state)} + {_n(acts / 2)}) / ({_n(c.tpu_bytes)} − {_n(acts / 2)})", bound),
        Step("smallest N_FSDP", "⌊bound⌋ + 1", f"⌊{bound:.4g}⌋ + 1", n),
        Step("M(N_FSDP) per device", "(state + A/2) / N_FSDP + A/2",
             f"({_n(state)} + {_n(acts / 2)}) / {n} + {_n(acts / 2)}", fsdp_bytes_per_device(c, n), "B"),
        # a strict bound: the largest whole batch below it
        Step("largest batch for any N_FSDP", "A/2 < 95 GB → tokens < 95 GB / (activations per token / 2)",
             f"⌈{_n(c.tpu_bytes)} / {_n(a['activations saved per token'] / 2)}⌉ − 1",
             math.ceil(c.tpu_bytes / (a["activations saved per token"] / 2)) - 1, "tokens"),
    ]
    return steps


def forward_times(c: XXL, batch_tokens: float) -> dict[str, float]:
    """(c): the Scaling Book's forward-pass times of one block (seconds) for a global batch of tokens."""
    D, F, N = c.d_model, c.d_ff, c.x * c.y
    return {
        "math": 2 * 2 * batch_tokens * D * F / (N * c.flops),
        "fsdp": 2 * 2 * D * F / (c.y * c.w_ici * c.m_x),
        "tp": 2 * 2 * batch_tokens * D / (c.x * c.w_ici * c.m_y),
    }


def part_c(c: XXL) -> list[Step]:
    """The per-device and global batch (tokens) above which the forward pass is compute bound."""
    N, alpha = c.x * c.y, c.flops / c.w_ici
    F = c.d_ff
    steps = [
        Step("N (chips)", "X · Y", f"{c.x} · {c.y}", N),
        Step("α", "C / W_ici", f"{c.flops:.4g} / {c.w_ici:.4g}", alpha, "FLOP/B"),
        Step("T_math", "2·2·B·D·F / (N·C)", f"4 · B · {c.d_model} · {F} / ({N} · {c.flops:.4g})",
             forward_times(c, 1)["math"], "s per token of B"),
        Step("T_FSDP", "2·2·D·F / (Y·W_ici·M_X)", f"4 · {c.d_model} · {F} / ({c.y} · {c.w_ici:.4g} · {c.m_x})",
             forward_times(c, 1)["fsdp"], "s"),
        Step("T_TP", "2·2·B·D / (X·W_ici·M_Y)", f"4 · B · {c.d_model} / ({c.x} · {c.w_ici:.4g} · {c.m_y})",
             forward_times(c, 1)["tp"], "s per token of B"),
    ]
    denominator = F * c.m_y - c.y * alpha
    if denominator <= 0:  # the tensor-parallel traffic alone outlasts the math at any batch
        steps.append(Step("compute-bound batch", "F·M_Y <= Y·α: never compute bound",
                          f"{F} · {c.m_y} <= {c.y} · {alpha:.7g}", None, "tokens"))
        return steps
    # T_math = T_FSDP + T_TP, solved for B: B = X·α·F·M_Y / (M_X · (F·M_Y − Y·α))
    b = c.x * alpha * F * c.m_y / (c.m_x * denominator)
    steps += [
        Step("B* (T_math = T_FSDP + T_TP)", "X·α·F·M_Y / (M_X·(F·M_Y − Y·α))",
             f"{c.x} · {alpha:.7g} · {F} · {c.m_y} / ({c.m_x} · ({F} · {c.m_y} − {c.y} · {alpha:.7g}))", b, "tokens"),
        Step("per-device batch B*/N", "B* / N", f"{b:.6g} / {N}", b / N, "tokens"),
        Step("per-device batch, whole tokens", "⌈B*/N⌉", f"⌈{b / N:.6g}⌉", math.ceil(b / N), "tokens"),
        Step("overall batch", "N · ⌈B*/N⌉", f"{N} · {math.ceil(b / N)}", N * math.ceil(b / N), "tokens"),
        # the Scaling Book's floor for the best split of the same N chips into X and Y
        Step("floor over every X·Y split", "B/N > 4·α² / (F·M_X·M_Y)",
             f"4 · {alpha:.7g}² / ({F} · {c.m_x} · {c.m_y})", 4 * alpha**2 / (F * c.m_x * c.m_y), "tokens"),
    ]
    return steps


def part_d(c: XXL) -> list[Step]:
    """The numbers the paragraph of (d) quotes: how each trick moves the per-device batch bound."""
    alpha = c.flops / c.w_ici
    fsdp_only = c.flops / (c.y * c.w_ici * c.m_x)  # B/N >= C / (Y·W·M_X) when T_TP is left out
    return [
        Step("FSDP term alone: B/N >", "C / (Y·W_ici·M_X)", f"{c.flops:.4g} / ({c.y} · {c.w_ici:.4g} · {c.m_x})",
             fsdp_only, "tokens"),
        Step("… with 1-byte (fp8) weight gathers", "(1 / comm bytes) · C / (Y·W_ici·M_X)",
             f"(1 / {c.comm_bytes}) · {fsdp_only:.7g}", fsdp_only / c.comm_bytes, "tokens"),
        Step("… with twice the tensor-parallel ways", "C / (2·Y·W_ici·M_X)",
             f"{c.flops:.4g} / (2 · {c.y} · {c.w_ici:.4g} · {c.m_x})", fsdp_only / 2, "tokens"),
        Step("tensor parallelism stays compute bound while Y <", "F·M_Y / α", f"{c.d_ff} · {c.m_y} / {alpha:.7g}",
             c.d_ff * c.m_y / alpha),
    ]


D_PARAGRAPH_EQUATIONS = (
    "T_FSDP = 2·2·D·F / (Y·W·M_X) does not depend on the batch while T_math = 2·2·B·D·F / (N·C) does",
    "per-device bound of FSDP alone: B/N > (b/2) · C / (Y·W·M_X), b = bytes per gathered weight",
    "pipeline bubble share (p − 1) / (m + p − 1) for p stages and m microbatches",
)


def communication_accounting(c: XXL) -> dict:
    """The four parts of problem 19, each a derivation (list of step dicts)."""
    return {"setting": dataclasses.asdict(c),
            **{name: [s.as_dict() for s in fn(c)] for name, fn in
               (("a", part_a), ("b", part_b), ("c", part_c), ("d", part_d))}}


# --- optimizer_state_sharding_accounting ---------------------------------------------------


def data_parallel_bytes(params: int, world: int, bytes_per_value: int = 4, optimizer_values: int = 2) -> dict:
    """Per rank, per step: memory held and bytes sent by data-parallel AdamW training of ``params``
    fp32 values on ``world`` ranks: plain, with our optimizer-state sharding (all-reduced gradients,
    then each parameter broadcast by its owner), and ZeRO stage 1 (P_os: reduce-scatter of gradients,
    all-gather of updated parameters). Collectives are counted as ring algorithms send: all-reduce
    2·(w−1)/w of the buffer per rank, reduce-scatter and all-gather (w−1)/w each, a broadcast of a
    rank's own shard (w−1)/w of the whole when the shards are equal."""
    w, b = world, bytes_per_value
    weights = grads = params * b
    state = optimizer_values * params * b
    ring = (w - 1) / w
    all_reduce = 2 * ring * grads
    return {
        "unsharded": {"parameters": weights, "gradients": grads, "optimizer_state": state,
                      "sent": all_reduce, "collectives": "all-reduce of gradients"},
        "sharded": {"parameters": weights, "gradients": grads, "optimizer_state": state / w,
                    "sent": all_reduce + ring * weights,
                    "collectives": "all-reduce of gradients, then a broadcast of each parameter from its owner"},
        "zero1": {"parameters": weights, "gradients": grads, "optimizer_state": state / w,
                  "sent": ring * grads + ring * weights,
                  "collectives": "reduce-scatter of gradients, then all-gather of the updated shards"},
    }
