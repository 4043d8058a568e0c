"""What the course's staff model does differently from edition to edition, chosen by the edition.

The 2026 staff model (``cs336-basics`` 26.0.0) changed two things beside the 2025 one, neither of
which changes what a model can learn, both of which change its numbers:

- RoPE's output layout. Both rotate the feature pairs (0, 1), (2, 3), ... by the same angles; 2025
  writes each rotated pair back in place (``interleaved``), 2026 writes the rotated first members,
  then the rotated second members (``halves``). Q and K are permuted alike, so Q·K is unchanged,
  but Q and K themselves, and a weight trained against one layout, are not.
- Where AdamW's weight decay falls. 2025 (Assignment 1's algorithm) decays the parameter after the
  Adam update (``after``: θ ← θ - α_t m/(√v + ε), then θ ← θ - αλθ); 2026 decays it before
  (``before``: θ ← θ - αλθ, then the Adam update), as ``torch.optim.AdamW`` does.

    s = semantics(2026)                  # Semantics(rope_layout='halves', weight_decay='before')
    y = rotate(x, cos, sin, s.rope_layout)
    opt = AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, decay=s.weight_decay)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROPE_LAYOUTS = ("interleaved", "halves")
DECAY_ORDERS = ("after", "before")


@dataclass(frozen=True)
class Semantics:
    """The staff model's RoPE output layout and AdamW's weight-decay order in one edition."""

    rope_layout: str
    weight_decay: str


SEMANTICS = {2025: Semantics("interleaved", "after"), 2026: Semantics("halves", "before")}


def semantics(edition: int | str | None) -> Semantics:
    """The staff semantics of ``edition`` (None: 2025, the edition of records that name none)."""
    year = 2025 if edition is None else int(edition)
    if year not in SEMANTICS:
        raise ValueError(f"no staff semantics known for edition {edition!r} (known: {sorted(SEMANTICS)})")
    return SEMANTICS[year]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """RoPE of ``x`` (..., seq, d) with angles ``cos``, ``sin`` (seq, d/2): pair (2i, 2i+1) rotated by
    angle i, written back in place (``interleaved``) or as [all rotated 2i | all rotated 2i+1] (``halves``)."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"RoPE layout must be one of {ROPE_LAYOUTS}, got {layout!r}")
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    first, second = x_even * cos - x_odd * sin, x_even * sin + x_odd * cos
    if layout == "halves":
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


class AdamW(torch.optim.Optimizer):
    """AdamW as the staff's Assignment 1 optimizer writes it, with the weight decay ``after`` the Adam
    update (2025) or ``before`` it (2026); bias-corrected step size α_t = α √(1-β2^t) / (1-β1^t)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, decay: str = "before"):
        if decay not in DECAY_ORDERS:
            raise ValueError(f"decay must be one of {DECAY_ORDERS}, got {decay!r}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.decay = decay

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["step"] += 1
                t, m, v = state["step"], state["m"], state["v"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                step_size = lr * (1 - beta2**t) ** 0.5 / (1 - beta1**t)
                if self.decay == "before":
                    p.mul_(1 - lr * wd)
                p.addcdiv_(m, v.sqrt().add_(eps), value=-step_size)
                if self.decay == "after":
                    p.mul_(1 - lr * wd)
        return loss
