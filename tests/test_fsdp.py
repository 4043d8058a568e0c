"""Our FSDP on two Gloo processes on the CPU: training equals one process on the whole batch (torch's
AdamW and the course's), each rank holds half of every Linear and Embedding weight, gathers run
two layers ahead and are freed after use, backward gathers again and reduce-scatters, and
``compute_dtype`` computes and communicates in low precision while master weights stay fp32.
Every rank runs with warnings turned into errors."""

import time
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from cs336report.distributed import fsdp_weight
from cs336report.distributed.fsdp import FSDP, is_sharded_layer
from cs336report.distributed.launch import launch
from cs336report.lm.model import Linear as OurLinear

STEPS, BATCH, VOCAB = 3, 8, 13


class Mixed(nn.Module):
    """Every kind of parameter FSDP meets: an Embedding tied to the output Linear, a torch Linear with
    a bias (replicated) and odd sizes (padded shards), our einsum Linear, a LayerNorm, a frozen Linear."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 6)
        self.up = nn.Linear(6, 7)  # 42 weights: 21 a rank
        self.ln = nn.LayerNorm(7)
        self.mid = OurLinear(7, 5)  # 35 weights: 18 a rank, one of them padding
        self.frozen = nn.Linear(5, 6, bias=False)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(6, VOCAB, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tokens):  # (batch, seq) -> (batch, seq, VOCAB)
        return self.out(self.frozen(torch.relu(self.mid(self.ln(self.up(self.emb(tokens)))))))


def _data(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randint(0, VOCAB, (BATCH, 4), generator=g), torch.randint(0, VOCAB, (BATCH, 4), generator=g)


def _loss(model, x, y, cast=None):
    logits = model(x) if cast is None else torch.func.functional_call(model, cast(model), (x,))
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))


def _train(rank, world_size, device, optimizer_cls, compute_dtype):
    """max |FSDP - reference| over steps, the reference averaging one backward per rank's half."""
    torch.manual_seed(0)
    reference = Mixed().to(device)
    torch.manual_seed(rank)  # other weights on rank 1: the wrapper broadcasts rank 0's
    model = FSDP(Mixed().to(device) if rank else _clone(reference), compute_dtype=compute_dtype)
    opt, ref_opt = optimizer_cls(model.parameters(), lr=1e-2), optimizer_cls(reference.parameters(), lr=1e-2)

    def cast(m):  # the reference computes with its Linear and Embedding parameters in compute_dtype
        layers = [n for n, layer in m.named_modules() if is_sharded_layer(layer)]
        names = {n for n in dict(m.named_parameters()) if n.rpartition(".")[0] in layers}  # tied: one name
        return {n: p.to(compute_dtype) for n, p in m.named_parameters() if n in names}

    error, out_dtype = 0.0, None
    share = BATCH // world_size
    for step in range(STEPS):
        x, y = (t.to(device) for t in _data(step))
        opt.zero_grad(set_to_none=True)
        logits = model(x[rank * share:(rank + 1) * share])
        out_dtype = logits.dtype
        F.cross_entropy(logits.float().reshape(-1, VOCAB), y[rank * share:(rank + 1) * share].reshape(-1)).backward()
        model.finish_gradient_synchronization()
        opt.step()
        ref_opt.zero_grad(set_to_none=True)
        for r in range(world_size):
            half = slice(r * share, (r + 1) * share)
            _loss(reference, x[half], y[half], cast if compute_dtype else None).backward()
        for p in reference.parameters():
            if p.grad is not None:
                p.grad.div_(world_size)
        ref_opt.step()
        full = model.gather_full_params()
        error = max(error, *((full[n] - p).abs().max().item() for n, p in reference.named_parameters()))
    grads = {n: (tuple(p.grad.shape), p.grad.dtype) for n, p in model.module.named_parameters() if p.requires_grad}
    return {"error": error, "out_dtype": out_dtype, "grads": grads, "params": {n: (tuple(p.shape), p.dtype) for n, p in
                                                       model.module.named_parameters()}}


def _clone(model):
    import copy

    return copy.deepcopy(model)


def _correctness_rank(rank, world_size, device):
    warnings.simplefilter("error")
    out = {"adamw": _train(rank, world_size, device, torch.optim.AdamW, None),
           "sgd_bf16": _train(rank, world_size, device, torch.optim.SGD, torch.bfloat16)}
    try:
        from cs336_basics.optimizer import AdamW
    except ImportError:
        return out
    out["course_adamw"] = _train(rank, world_size, device, AdamW, None)
    return out


@pytest.fixture(scope="module")
def correctness():
    return launch(_correctness_rank, 2, backend="gloo", timeout_s=300)


def test_training_equals_one_process_on_the_whole_batch(correctness):
    for rank_out in correctness:
        assert rank_out["adamw"]["error"] <= 1e-6
        # bf16 compute on both sides; the ranks sum their gradients in bf16 (8 bits of mantissa)
        assert rank_out["sgd_bf16"]["error"] <= 1e-4
        assert rank_out["adamw"]["out_dtype"] == torch.float32 and rank_out["sgd_bf16"]["out_dtype"] == torch.bfloat16


def test_the_course_adamw_steps_the_shards(correctness):
    if "course_adamw" not in correctness[0]:
        pytest.skip("cs336_basics is not installed")
    for rank_out in correctness:
        assert rank_out["course_adamw"]["error"] <= 1e-6


def test_every_trainable_parameter_has_an_fp32_gradient_of_its_shard_shape(correctness):
    for rank_out in correctness:
        for case in ("adamw", "sgd_bf16"):
            params, grads = rank_out[case]["params"], rank_out[case]["grads"]
            assert set(grads) == {"emb.weight", "up.weight", "up.bias", "ln.weight", "ln.bias", "mid.weight"}
            for name, (shape, dtype) in grads.items():
                assert (shape, dtype) == params[name] and dtype == torch.float32, name
            assert params["emb.weight"][0] == (VOCAB * 6 // 2,)  # flat halves
            assert params["mid.weight"][0] == (18,)  # 35 weights: 18 a rank, padded
            assert params["up.bias"][0] == (7,)  # replicated


def _layout_rank(rank, world_size, device):
    torch.manual_seed(0)
    model = Mixed()
    full_bytes = {n: p.numel() * p.element_size() for n, p in model.named_parameters()}
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    fsdp = FSDP(model)
    gathered = fsdp.gather_full_params()
    held = {n: p.numel() * p.element_size() for n, p in fsdp.module.named_parameters()}
    return {"full": full_bytes, "held": held, "accounting": fsdp.parameter_bytes(),
            "round_trip": all(torch.equal(gathered[n], initial[n]) for n in initial),
            "tied": fsdp.module.out.weight is fsdp.module.emb.weight,
            "names": sorted(gathered)}


def test_each_rank_holds_half_of_every_sharded_weight():
    ranks = launch(_layout_rank, 2, backend="gloo", timeout_s=120)
    sharded = ("emb.weight", "up.weight", "mid.weight", "frozen.weight")
    for r in ranks:
        for name in sharded:  # measured bytes of the parameter each rank holds
            full = r["full"][name]
            assert full / 2 <= r["held"][name] <= full / 2 + 4, name  # half, plus at most one padding float
        for name in ("up.bias", "ln.weight", "ln.bias"):
            assert r["held"][name] == r["full"][name], name
        total_full, total_held = sum(r["full"].values()), sum(r["held"].values())
        assert total_held < 0.6 * total_full  # nothing sharded would be 1.0
        assert r["accounting"]["total"] == total_held
        assert r["round_trip"] and r["tied"]
        assert r["names"] == sorted([*r["full"], "out.weight"])  # the tied weight under both names


class Chain(nn.Module):
    """Five Linears of distinct sizes, so each all-gather tells which layer it is by its size."""

    SIZES = (4, 5, 6, 7, 8, 9)

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(self.SIZES, self.SIZES[1:]))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _order_rank(rank, world_size, device):
    warnings.simplefilter("error")
    torch.manual_seed(0)
    chain = Chain()
    layer_of = {(layer.weight.numel() + 1) // 2: i for i, layer in enumerate(chain.layers)}  # shard numel -> layer
    log, peak = [], [0]
    model = None

    def alive():
        return sum(w.full_alive() for w in model.weights)

    for i, layer in enumerate(chain.layers):  # registered first: they run before FSDP's hooks
        # the gathered weights alive as the layer starts (the previous layer's, which a Gloo worker thread
        # may hold a moment after its collective, given that moment)
        layer.register_forward_pre_hook(
            lambda m, a, i=i: (log.append(("start", i)), peak.append(_settled(alive, 2))) and None)
        layer.register_forward_hook(lambda m, a, o, i=i: log.append(("end", i)) and None)
    real_gather, real_scatter = fsdp_weight._all_gather, fsdp_weight._reduce_scatter

    def gather(out, source, async_op=False):
        log.append(("gather", layer_of[source.numel()], async_op, source.dtype))
        return real_gather(out, source, async_op=async_op)

    def scatter(out, source, async_op=False):
        log.append(("reduce_scatter", layer_of[out.numel()], async_op, source.dtype))
        return real_scatter(out, source, async_op=async_op)

    fsdp_weight._all_gather, fsdp_weight._reduce_scatter = gather, scatter
    out = {}
    for dtype in (None, torch.float16):
        model = FSDP(_clone(chain), compute_dtype=dtype)
        log.clear()
        peak[:] = [0]
        y = model(torch.randn(3, 4))
        out[(dtype, "forward")] = list(log)
        out[(dtype, "after_forward")] = _settled(alive)
        log.clear()
        y.float().sum().backward()
        model.finish_gradient_synchronization()
        out[(dtype, "backward")] = list(log)
        out[(dtype, "after_backward")] = _settled(alive)
        out[(dtype, "peak")] = max(peak)
    return out


def _settled(count, target: int = 0) -> int:
    """``count()`` once it is at most ``target``, or after a second: a finished collective's worker
    thread may still hold its buffer for a moment, but nothing may hold one lastingly."""
    deadline = time.monotonic() + 1.0
    while count() > target and time.monotonic() < deadline:
        time.sleep(0.01)
    return count()


@pytest.fixture(scope="module")
def order():
    return launch(_order_rank, 2, backend="gloo", timeout_s=120)[0]


@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_each_gather_starts_after_the_layer_two_earlier_finished(order, dtype):
    log = order[(dtype, "forward")]
    gathers = [e for e in log if e[0] == "gather"]
    assert [e[1] for e in gathers] == list(range(5))  # each layer's weight gathered once, in order
    assert all(e[2] for e in gathers)  # asynchronously
    at = {e[:2]: k for k, e in enumerate(log)}
    assert at[("gather", 0)] < at[("gather", 1)] < at[("start", 0)]
    for i in range(2, 5):
        assert at[("end", i - 2)] < at[("gather", i)] < at[("start", i - 1)]  # not earlier, yet ahead


@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_gathered_weights_are_freed_after_use(order, dtype):
    assert order[(dtype, "after_forward")] == 0
    assert order[(dtype, "after_backward")] == 0
    assert order[(dtype, "peak")] <= 2  # when a layer starts: its own weight and the next one's


@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_backward_gathers_again_and_reduce_scatters_every_weight(order, dtype):
    log = order[(dtype, "backward")]
    gathers = [e[1] for e in log if e[0] == "gather"]
    scatters = [e[1] for e in log if e[0] == "reduce_scatter"]
    # gathered again, last first; the first layer's input needs no gradient, so it saved no weight
    assert gathers == [4, 3, 2, 1]
    assert sorted(scatters) == list(range(5))
    assert all(e[2] for e in log)
    comm_dtype = dtype or torch.float32
    assert all(e[3] == comm_dtype for e in log + order[(dtype, "forward")] if e[0] != "start" and e[0] != "end")


def _embedding_rank(rank, world_size, device):
    emb = nn.Embedding(10, 4)
    model = FSDP(emb)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    model.finish_gradient_synchronization()
    return [e[0] for e in model.events]


def test_an_embedding_is_not_gathered_for_its_backward():
    events = launch(_embedding_rank, 2, backend="gloo", timeout_s=60)[0]
    assert events.count("gather_forward") == 1 and "gather_backward" not in events
    assert events.count("reduce_scatter") == 1


def test_which_layers_are_sharded():
    class Linear(nn.Module):  # any Assignment 1 class of this name
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(2, 2))

    assert is_sharded_layer(nn.Linear(2, 2)) and is_sharded_layer(nn.Embedding(3, 2)) and is_sharded_layer(Linear())
    assert not is_sharded_layer(nn.LayerNorm(2)) and not is_sharded_layer(nn.Conv1d(2, 2, 1))


@pytest.mark.gpu
def test_training_equals_one_process_with_nccl():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    for rank_out in launch(_correctness_rank, 2, backend="nccl", timeout_s=300):
        assert rank_out["adamw"]["error"] <= 1e-5
        assert rank_out["sgd_bf16"]["error"] <= 1e-5


def test_the_handout_suite_measures_what_its_cases_do_not_check(tmp_path, monkeypatch):
    """The suite's correctness case passes for ours, exactly against the averaged halves, with half the
    parameters a rank; a DDP wrapper given as the FSDP passes it too, holding every parameter."""
    import types

    from cs336report.distributed.ddp import DDPIndividualParameters
    from cs336report.handout_suite import _fsdp

    for name in ("ours", "ddp"):
        (tmp_path / name).mkdir()
    ours = _fsdp.run_fsdp_ranks(tmp_path / "ours", "correctness", "fp32")
    assert all(r["split"] == 0.0 and r["whole"] <= 1e-6 for r in ours)
    assert all(0.5 <= r["parameter_fraction"] < 0.51 for r in ours)
    replicating = types.SimpleNamespace(  # the ranks fork from here, so they see this adapter
        get_fsdp=lambda module, compute_dtype=None: DDPIndividualParameters(module),
        fsdp_on_after_backward=lambda model, _optimizer: model.finish_gradient_synchronization(),
        fsdp_gather_full_params=lambda model: dict(model.module.named_parameters()))
    monkeypatch.setattr(_fsdp, "fsdp_adapters", lambda: replicating)
    ddp = _fsdp.run_fsdp_ranks(tmp_path / "ddp", "correctness", "fp32")
    assert all(r["split"] == 0.0 and r["parameter_fraction"] == 1.0 for r in ddp)
