"""The optimized step's fp32 master weights with bf16 working copies compute the plain autocast AdamW step."""

from __future__ import annotations

import re

import pytest
import torch

from cs336report.lm.master_weights import MasterWeightAdamW, adamw_scalars, adamw_update, autocast_cast_weights
from cs336report.lm.model import ModelSpec, TransformerLM, cross_entropy

SPEC = ModelSpec(vocab_size=61, d_model=32, num_layers=2, num_heads=4, d_ff=48, rope_theta=10_000.0)
LR = 1e-2  # large enough that a weight moves by many bf16 steps in a few updates


def _model(impl: str = "native") -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(SPEC, 16, impl=impl)


def _batches(n: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, SPEC.vocab_size, (2, 16), generator=g),
             torch.randint(0, SPEC.vocab_size, (2, 16), generator=g)) for _ in range(n)]


def _loss(model, tokens, targets):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return cross_entropy(model(tokens), targets)


def _reference(steps: int):
    """The plain step: fp32 weights, bf16 autocast, torch.optim.AdamW; the weights and loss after each step."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    out = []
    for tokens, targets in _batches(steps):
        model.zero_grad(set_to_none=True)
        loss = _loss(model, tokens, targets)
        loss.backward()
        opt.step()
        out.append((loss.item(), {n: p.detach().clone() for n, p in model.named_parameters()}))
    return out


def _masters(opt: MasterWeightAdamW, names: list[str]) -> dict[str, torch.Tensor]:
    return dict(zip(names, (m.clone() for m in opt.masters)))


def test_the_working_copies_are_exactly_the_weights_autocast_converts():
    model = _model()
    tokens = _batches(1)[0][0]
    names = autocast_cast_weights(model, tokens, torch.bfloat16)
    # every Linear of the blocks and the LM head; not the embedding (looked up in fp32) nor the norm gains
    expected = [n for n, p in model.named_parameters() if p.dim() == 2 and "embeddings" not in n]
    assert sorted(names) == sorted(expected) and len(names) == SPEC.num_layers * 7 + 1

    opt = MasterWeightAdamW(model, tokens, torch.bfloat16)
    params = dict(model.named_parameters())
    assert all(params[n].dtype == torch.bfloat16 for n in names)
    assert all(p.dtype == torch.float32 for n, p in params.items() if n not in names)
    assert all(m.dtype == torch.float32 for m in opt.masters) and opt.copies == len(names)
    # under autocast the model with working copies converts no weight: the casts left are activations'
    casts = []

    class Seen(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default and any(args[0] is p for p in params.values()):
                casts.append(func)
            return func(*args, **(kwargs or {}))

    with Seen():
        _loss(model, tokens, _batches(1)[0][1])
    assert casts == []


def test_a_weight_also_used_in_fp32_keeps_no_bf16_copy():
    model = _model()
    model.lm_head.weight = model.token_embeddings.weight  # tied: looked up in fp32, cast for the LM head
    names = autocast_cast_weights(model, _batches(1)[0][0], torch.bfloat16)
    assert "lm_head.weight" not in names and "token_embeddings.weight" not in names
    assert "layers.0.attn.q_proj.weight" in names


def test_the_update_equals_plain_autocast_adamw():
    steps = 3
    ref = _reference(steps)
    model = _model()
    names = [n for n, _ in model.named_parameters()]
    batches = _batches(steps)
    opt = MasterWeightAdamW(model, batches[0][0], torch.bfloat16, lr=LR)
    for (tokens, targets), (ref_loss, ref_weights) in zip(batches, ref):
        model.zero_grad(set_to_none=True)
        loss = _loss(model, tokens, targets)
        loss.backward()
        opt.step()
        # the same loss: the forward ran the same bf16 products on the same bf16 weights
        assert loss.item() == pytest.approx(ref_loss, rel=1e-6, abs=1e-6)
        masters = _masters(opt, names)
        for n in names:
            # fp32 masters track fp32 weights to rounding; bf16 masters would be off by ~1e-3 here
            torch.testing.assert_close(masters[n], ref_weights[n], rtol=0, atol=1e-6)
        # each working copy is its master, rounded: written by this step, not the one before
        for m, w in zip(opt.masters, opt.working):
            if w is not None:
                assert torch.equal(w.detach(), m.to(torch.bfloat16))


def test_a_stale_working_copy_or_bf16_master_would_fail_the_comparison():
    """The comparison above can fail: the same loop with either fault leaves the reference."""
    steps = 3
    ref = _reference(steps)
    for fault in ("stale", "bf16_master"):
        model = _model()
        names = [n for n, _ in model.named_parameters()]
        batches = _batches(steps)
        opt = MasterWeightAdamW(model, batches[0][0], torch.bfloat16, lr=LR)
        if fault == "stale":
            opt.working = [None] * len(opt.working)  # masters updated, copies never rewritten
        else:
            opt.masters = [m.to(torch.bfloat16).float() if w is not None else m for m, w in zip(opt.masters, opt.working)]
            bf16_update = opt._update

            def rounded(params, *args, _u=bf16_update, **kw):
                _u(params, *args, **kw)
                for p, w in zip(params, args[3]):  # args: grads, moments, moments, working, ...
                    if w is not None:
                        p.copy_(p.to(torch.bfloat16))  # the master kept in bf16 precision

            opt._update = rounded
        for tokens, targets in batches:
            model.zero_grad(set_to_none=True)
            _loss(model, tokens, targets).backward()
            opt.step()
        ref_weights = ref[-1][1]
        masters = _masters(opt, names)
        worst = max((masters[n] - ref_weights[n]).abs().max().item() for n in names)
        assert worst > 1e-3, fault  # 0.03 and 0.026 here; the correct step stays within 1e-6


def test_adamw_update_is_torchs_adamw_for_fp32_and_widens_bf16_gradients():
    torch.manual_seed(3)
    p = torch.randn(5, 7)
    grads = [torch.randn(5, 7) for _ in range(4)]
    ref = torch.nn.Parameter(p.clone())
    opt = torch.optim.AdamW([ref], lr=LR, weight_decay=0.1)
    mine, m, v = p.clone(), torch.zeros(5, 7), torch.zeros(5, 7)
    work = torch.empty(5, 7, dtype=torch.bfloat16)
    step = torch.zeros(1, dtype=torch.float64)
    for g in grads:
        ref.grad = g.to(torch.bfloat16).float()  # what autocast's fp32 gradient of a bf16 product holds
        opt.step()
        step_size, bias2_sqrt = adamw_scalars(step, LR, 0.9, 0.999)
        adamw_update([mine], [g.to(torch.bfloat16)], [m], [v], [work], step_size, bias2_sqrt, LR, 0.9, 0.999, 1e-8, 0.1)
    torch.testing.assert_close(mine, ref.detach(), rtol=0, atol=1e-6)
    torch.testing.assert_close(m, opt.state[ref]["exp_avg"], rtol=1e-6, atol=0)
    torch.testing.assert_close(v, opt.state[ref]["exp_avg_sq"], rtol=1e-6, atol=0)
    assert torch.equal(work, mine.to(torch.bfloat16)) and step.item() == len(grads)


def test_the_compiled_update_writes_back_what_the_eager_one_computes_and_reads_as_the_optimizer():
    """Inductor (CPU here) runs the same update in place, and its kernels carry AdamW's lerp in their names."""
    from torch._inductor.utils import run_and_get_code

    from cs336report.parsers.kernels import classify

    shapes = [(48, 32), (32,)]  # a matrix with a bf16 working copy, a gain without one
    grads = [torch.randn(shapes[0]).to(torch.bfloat16), torch.randn(shapes[1])]

    def state():
        params = [torch.randn(s, generator=torch.Generator().manual_seed(i)) for i, s in enumerate(shapes)]
        return {"params": params, "m": [torch.zeros(s) for s in shapes], "v": [torch.zeros(s) for s in shapes],
                "work": [torch.empty(shapes[0], dtype=torch.bfloat16), None], "step": torch.zeros(1, dtype=torch.float64)}

    def run(update, s):
        step_size, bias2_sqrt = adamw_scalars(s["step"], LR, 0.9, 0.999)
        return update(s["params"], grads, s["m"], s["v"], s["work"], step_size, bias2_sqrt, LR, 0.9, 0.999, 1e-8, 0.01)

    eager, compiled = state(), state()
    fn = torch.compile(adamw_update, fullgraph=True)
    _, code = run_and_get_code(run, fn, compiled)
    run(fn, compiled)
    run(adamw_update, eager)
    run(adamw_update, eager)
    for key in ("params", "m", "v"):  # written back into the inputs, two steps
        for a, b in zip(eager[key], compiled[key]):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    assert torch.equal(compiled["work"][0], compiled["params"][0].to(torch.bfloat16))
    names = {n for source in code for n in re.findall(r"\bcpp_fused_\w+", source)}
    assert names and all(classify(n.replace("cpp_", "triton_poi_", 1)) == "optimizer" for n in names), names
