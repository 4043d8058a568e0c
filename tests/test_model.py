import pytest
import torch

from cs336report.accounting import transformer as accounting
from cs336report.config import Config
from cs336report.lm.model import ModelSpec, TransformerLM, scaled_dot_product_attention

EXPECTED_PARAMS = {
    "small": 128_625_408,
    "medium": 423_183_360,
    "large": 969_411_840,
    "xl": 1_998_235_200,
    "2.7B": 3_406_809_600,
}


@pytest.fixture(scope="module")
def cfg():
    return Config.from_file("workflow/config/default.yaml", cuda_available=False)


@pytest.mark.parametrize("size", list(EXPECTED_PARAMS))
def test_parameter_counts_match_the_handout(cfg, size):
    spec = ModelSpec(**cfg.size(size))
    model = TransformerLM(spec, context_length=128, device="meta")  # shapes only, no memory
    assert sum(p.numel() for p in model.parameters()) == EXPECTED_PARAMS[size]
    assert accounting.param_count(spec) == EXPECTED_PARAMS[size]


def test_naive_and_native_compute_the_same_function():
    spec = ModelSpec(d_model=64, d_ff=128, num_layers=2, num_heads=4, vocab_size=100)
    torch.manual_seed(0)
    naive = TransformerLM(spec, 32, impl="naive")
    native = TransformerLM(spec, 32, impl="native")
    native.load_state_dict(naive.state_dict())
    tokens = torch.randint(0, 100, (2, 32))
    out = naive(tokens)
    assert out.shape == (2, 32, 100)
    torch.testing.assert_close(out, native(tokens), rtol=1e-4, atol=1e-4)


def test_attention_is_causal_and_takes_keywords():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 6, 8) for _ in range(3))
    mask = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    out = scaled_dot_product_attention(Q=q, K=k, V=v, mask=mask)
    # changing the last key/value cannot change any earlier query's output
    k2, v2 = k.clone(), v.clone()
    k2[:, -1] += 5
    v2[:, -1] -= 5
    out2 = scaled_dot_product_attention(Q=q, K=k2, V=v2, mask=mask)
    torch.testing.assert_close(out[:, :-1], out2[:, :-1])
    assert not torch.allclose(out[:, -1], out2[:, -1])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_invalid_spec_names_the_field():
    with pytest.raises(ValueError, match="num_heads"):
        ModelSpec(d_model=10, d_ff=8, num_layers=1, num_heads=3)
    with pytest.raises(ValueError, match="d_ff"):
        ModelSpec(d_model=8, d_ff=0, num_layers=1, num_heads=2)
