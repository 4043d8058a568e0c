"""The staff model's edition-dependent semantics (cs336report.lm.staff): RoPE's output layout and
AdamW's weight-decay order, each checked on a case small enough to work out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from cs336report.lm import staff
from cs336report.lm.build import build_model
from cs336report.lm.model import RotaryEmbedding, TransformerLM
from cs336report.names.spec import ModelSpec


def test_each_edition_has_its_semantics():
    assert staff.semantics(2025) == staff.Semantics("interleaved", "after")
    assert staff.semantics(2026) == staff.Semantics("halves", "before")
    assert staff.semantics(None) == staff.semantics(2025)
    with pytest.raises(ValueError, match="2024"):
        staff.semantics(2024)


def test_rope_of_four_features_by_hand():
    # pairs (x0, x1) = (1, 2) and (x2, x3) = (3, 4); angles 90 and 0 degrees: (1, 2) -> (-2, 1), (3, 4) stays
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    cos, sin = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    assert staff.rotate(x, cos, sin, "interleaved").tolist() == [[-2.0, 1.0, 3.0, 4.0]]
    assert staff.rotate(x, cos, sin, "halves").tolist() == [[-2.0, 3.0, 1.0, 4.0]]
    with pytest.raises(ValueError, match="layout"):
        staff.rotate(x, cos, sin, "spiral")


def test_rope_layouts_permute_q_and_k_alike_so_scores_agree():
    torch.manual_seed(0)
    q, k = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    positions = torch.arange(5)
    scores = {}
    for layout in staff.ROPE_LAYOUTS:
        rope = RotaryEmbedding(16, 8, layout=layout)
        scores[layout] = rope(q, positions) @ rope(k, positions).transpose(-1, -2)
    torch.testing.assert_close(scores["halves"], scores["interleaved"])
    interleaved = RotaryEmbedding(16, 8)(q, positions)
    halves = RotaryEmbedding(16, 8, layout="halves")(q, positions)
    assert not torch.allclose(interleaved, halves)
    torch.testing.assert_close(halves, torch.cat((interleaved[..., 0::2], interleaved[..., 1::2]), dim=-1))


def test_rope_at_position_one_by_hand():
    # d = 2, theta = 10000: one pair, angle = position * theta**0 = 1 radian at position 1
    rope = RotaryEmbedding(4, 2, layout="halves")
    out = rope(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([0, 1]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0], [math.cos(1.0), math.sin(1.0)]]))


def test_the_built_model_follows_the_cells_edition():
    cell = {"model": {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_heads": 2, "vocab_size": 50},
            "context": 8, "device": "cpu"}
    layouts = {e: build_model({**cell, **({"edition": e} if e else {})})[0].layers[0].attn.rope.layout
               for e in (None, 2025, 2026)}
    assert layouts == {None: "interleaved", 2025: "interleaved", 2026: "halves"}


def test_models_of_the_two_layouts_differ_only_by_the_permutation():
    spec = ModelSpec(d_model=16, d_ff=32, num_layers=2, num_heads=2, vocab_size=50)
    torch.manual_seed(0)
    a = TransformerLM(spec, 8, rope_layout="interleaved")
    b = TransformerLM(spec, 8, rope_layout="halves")
    b.load_state_dict(a.state_dict())
    tokens = torch.randint(0, 50, (2, 8))
    torch.testing.assert_close(a(tokens), b(tokens))  # attention only sees Q·K


def _one_step(decay: str, p0: float, g: float, lr: float, wd: float) -> float:
    p = torch.nn.Parameter(torch.tensor([p0]))
    p.grad = torch.tensor([g])
    staff.AdamW([p], lr=lr, weight_decay=wd, decay=decay).step()
    return float(p.detach())


def test_adamw_decay_order_by_hand():
    # first step: m = 0.1 g, v = 0.001 g^2, alpha_1 = lr sqrt(0.001) / 0.1, so the Adam step is lr * sign(g)
    # (up to eps); p0 = 2, g = 3, lr = 0.1, wd = 0.5
    #   before: 2 * (1 - 0.05) - 0.1       = 1.8
    #   after:  (2 - 0.1) * (1 - 0.05)     = 1.805
    assert _one_step("before", 2.0, 3.0, 0.1, 0.5) == pytest.approx(1.8, abs=1e-6)
    assert _one_step("after", 2.0, 3.0, 0.1, 0.5) == pytest.approx(1.805, abs=1e-6)
    assert _one_step("after", 2.0, 3.0, 0.1, 0.0) == pytest.approx(_one_step("before", 2.0, 3.0, 0.1, 0.0))
    with pytest.raises(ValueError, match="decay"):
        staff.AdamW([torch.nn.Parameter(torch.zeros(1))], decay="during")


def test_decay_before_is_torchs_adamw_over_several_steps():
    torch.manual_seed(0)
    ours, theirs = torch.nn.Parameter(torch.randn(6)), torch.nn.Parameter(torch.empty(6))
    theirs.data.copy_(ours.data)
    opt_ours = staff.AdamW([ours], lr=0.01, weight_decay=0.1, decay="before")
    opt_theirs = torch.optim.AdamW([theirs], lr=0.01, weight_decay=0.1)
    for _ in range(5):
        g = torch.randn(6)
        ours.grad, theirs.grad = g.clone(), g.clone()
        opt_ours.step()
        opt_theirs.step()
    torch.testing.assert_close(ours.data, theirs.data)
