import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cs336report.accounting import transformer as accounting, peak as accounting_peak
from cs336report.lm.model import ModelSpec, TransformerLM, cross_entropy


@pytest.mark.parametrize("context", [16, 48])
def test_forward_flops_match_torch_flop_counter(context):
    # the naive model does every matmul (attention included) as an einsum the counter sees
    spec = ModelSpec(d_model=64, d_ff=160, num_layers=3, num_heads=4, vocab_size=200)
    model = TransformerLM(spec, context, impl="naive")
    tokens = torch.randint(0, 200, (2, context))
    with FlopCounterMode(display=False) as counter:
        model(tokens)
    assert counter.get_total_flops() == accounting.forward_flops(spec, 2, context)


def test_backward_is_twice_the_forward():
    spec = ModelSpec(d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=50)
    model = TransformerLM(spec, 16)
    tokens = torch.randint(0, 50, (2, 16))
    with FlopCounterMode(display=False) as counter:
        cross_entropy(model(tokens), tokens).backward()
    counted = counter.get_total_flops()
    fwd = accounting.forward_flops(spec, 2, 16)
    # the embedding lookup's gradient is a scatter, not a matmul, so the count is exactly 3x
    assert counted == accounting.step_flops(spec, 2, 16, "forward_backward") == 3 * fwd


def test_training_state_is_sixteen_bytes_per_parameter():
    spec = ModelSpec(d_model=2560, d_ff=10240, num_layers=32, num_heads=32)
    state = accounting_peak.training_state_bytes(spec)
    assert state["total"] == 16 * accounting.param_count(spec)
    assert round(state["total"] / 2**30, 1) == 50.8  # the handout's 2.7B figure
    assert accounting.residual_activation_bytes(spec, 4, 128) == 5 * 2**20


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown mode"):
        accounting.step_flops(ModelSpec(8, 8, 1, 2), 1, 4, "sideways")
