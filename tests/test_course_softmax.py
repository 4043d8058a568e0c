"""The naive model's softmax has the course reference's semantics: two seq × seq matrices saved per layer."""

import torch

from cs336report.accounting import transformer as accounting
from cs336report.lm.model import ModelSpec, TransformerLM, softmax


def saved_square_matrices(model, T: int) -> int:
    """Distinct floating storages of seq × seq tensors autograd saves in one forward pass."""
    seen = set()

    def pack(t):
        if t.is_floating_point() and t.dim() >= 2 and tuple(t.shape[-2:]) == (T, T):
            seen.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randint(0, model.spec.vocab_size, (2, T)))
    return len(seen)


def test_each_layer_keeps_two_seq_by_seq_matrices():
    T = 24
    torch.manual_seed(0)
    one = TransformerLM(ModelSpec(d_model=32, d_ff=64, num_layers=1, num_heads=2, vocab_size=50), T, impl="naive")
    two = TransformerLM(ModelSpec(d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=50), T, impl="naive")
    assert saved_square_matrices(one, T) == accounting.NAIVE_SAVED_MATRICES == 2
    assert saved_square_matrices(two, T) == 4


def test_softmax_matches_torch_and_its_gradient():
    x = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.allclose(softmax(x, -1), torch.softmax(x, -1))
    assert torch.autograd.gradcheck(lambda t: softmax(t, -1), (x,))
