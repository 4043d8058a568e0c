"""The shape of a model size, without torch: what the model builds from and what accounting and
the report compute with (the report renders without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """Hyper-parameters of one model size."""

    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int = 10_000
    rope_theta: float = 10_000.0

    def __post_init__(self) -> None:
        for field in ("d_model", "d_ff", "num_layers", "num_heads", "vocab_size"):
            if getattr(self, field) <= 0:
                raise ValueError(f"ModelSpec.{field} must be positive, got {getattr(self, field)}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"ModelSpec.d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if (self.d_model // self.num_heads) % 2:
            raise ValueError("ModelSpec: d_model / num_heads must be even for RoPE")

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads
