"""Which of the model's tensor shapes (× dtype) an allocation of a given size is."""

from __future__ import annotations

from ....names.spec import ModelSpec

DTYPES = ((4, "fp32"), (2, "bf16"), (1, "bool"), (8, "int64"))

FLOAT = ("fp32", "bf16")


def named_shapes(spec: ModelSpec, B: int, T: int) -> list[tuple[str, int, tuple[str, ...], str]]:
    """Tensor shapes of this model and batch that explain allocation sizes (name, elements, dtypes, what)."""
    d, f, h, V = spec.d_model, spec.d_ff, spec.num_heads, spec.vocab_size
    return [
        ("B·T·V", B * T * V, FLOAT, "logits, their log-softmax or gradient"),
        ("B·h·T²", B * h * T * T, FLOAT, "attention scores or probabilities"),
        ("B·T·d_ff", B * T * f, FLOAT, "feed-forward hidden activation"),
        ("B·T·d", B * T * d, FLOAT, "residual-stream or projection activation"),
        ("V·d", V * d, FLOAT, "embedding or LM-head weight, its gradient or an AdamW moment"),
        ("d_ff·d", f * d, FLOAT, "feed-forward weight, its gradient or an AdamW moment"),
        ("d·d", d * d, FLOAT, "attention projection weight, its gradient or an AdamW moment"),
        ("B·h·T", B * h * T, FLOAT, "softmax row statistics"),
        ("B·T", B * T, ("fp32", "int64"), "per-token values or token ids"),
        ("T²", T * T, ("bool",), "causal mask"),
    ]


# Shapes an allocation of a category is expected to have, most likely first.
CATEGORY_SHAPES = {
    "AttnScores": ("B·h·T²", "T²", "B·h·T"), "Softmax": ("B·h·T²", "B·h·T"), "AttnOut": ("B·T·d", "B·h·T²"),
    "AttnProj": ("B·T·d",), "Norm": ("B·T·d", "B·T"), "Block": ("B·T·d",), "Embed": ("B·T·d",),
    "FFN": ("B·T·d_ff", "B·T·d"), "LMHead": ("B·T·V",), "Loss": ("B·T·V", "B·T"),
}


def explain_size(size: int, spec: ModelSpec, B: int, T: int, category: str | None = None,
                 precision: str = "bf16") -> str:
    """Which shape × dtype of the model has exactly ``size`` bytes ("–" if none).

    In an fp32 cell only fp32 (and bool / int64) tensors are considered; a size matching a
    shape the allocation's category is expected to have is given alone.
    """
    nbytes_of = {name: n for n, name in DTYPES}
    hits = []
    for name, n, dtypes, what in named_shapes(spec, B, T):
        for dtype in dtypes:
            if precision == "fp32" and dtype == "bf16":
                continue
            if n * nbytes_of[dtype] == size:
                hits.append((name, f"{name} × {dtype}: {what}"))
    preferred = [text for name, text in hits if name in CATEGORY_SHAPES.get(category or "", ())]
    if preferred:
        return preferred[0]
    return "; or ".join(text for _, text in hits) if hits else "–"
