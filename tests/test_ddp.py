"""The DDP wrappers as the handout tests them: two Gloo processes on the CPU train toy models
(one with a tied weight, a frozen layer and a buffer) from different initialisations, and after
several steps every rank's parameters equal those of one process training on the whole batch.
Also: the bucket assignment, and that the overlapped variants start communicating during
backward (the naive ones after it)."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from cs336report.distributed import ddp
from cs336report.distributed.launch import launch

STEPS, BATCH = 4, 8


class ToyModel(nn.Module):
    """The handout's ToyModel (fc1, LayerNorm, fc2, ReLU)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.ln, self.fc2 = nn.Linear(10, 10, bias=False), nn.LayerNorm(10), nn.Linear(10, 5, bias=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.ln(self.fc1(x))))


class TiedModel(nn.Module):
    """Input embedding tied to the output projection, a frozen layer and a buffer."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(12, 6)
        self.fc = nn.Linear(6, 6)
        self.frozen = nn.Linear(6, 6)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(6, 12, bias=False)
        self.out.weight = self.emb.weight
        self.register_buffer("scale", torch.rand(1) + 0.5)

    def forward(self, tokens):
        return self.out(self.frozen(torch.relu(self.fc(self.emb(tokens))))) * self.scale


def _data(kind):
    g = torch.Generator().manual_seed(123)
    if kind == "toy":
        return torch.randn(BATCH, 10, generator=g), torch.randint(0, 5, (BATCH,), generator=g)
    return torch.randint(0, 12, (BATCH,), generator=g), torch.randint(0, 12, (BATCH,), generator=g)


def _train(model, x, y, steps, sync=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        if sync:
            sync()
        opt.step()


def _equality_rank(rank, world_size, device):
    out = {}
    for kind, cls in (("toy", ToyModel), ("tied", TiedModel)):
        x, y = (t.to(device) for t in _data(kind))
        torch.manual_seed(0)
        reference = cls().to(device)
        _train(reference, x, y, STEPS)
        for name, wrapper in ddp.VARIANTS.items():
            torch.manual_seed(rank)  # every rank starts elsewhere; the wrapper broadcasts rank 0's
            local = cls().to(device)
            if rank == 0:
                torch.manual_seed(0)
                local = cls().to(device)
            model = wrapper(local, 0.0005) if name == "bucketed" else wrapper(local)
            shard = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)
            _train(model, x[shard], y[shard], STEPS, sync=model.finish_gradient_synchronization)
            ref = dict(reference.named_parameters())
            out[(kind, name)] = max((p - ref[n]).abs().max().item() for n, p in model.module.named_parameters())
            out[(kind, name, "tied")] = kind != "tied" or local.out.weight is local.emb.weight
    return out


class _Probe(torch.autograd.Function):
    """Identity whose backward records how many all-reduces had started when it ran."""

    calls: list[int] = []
    issued = 0

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        _Probe.calls.append(_Probe.issued)
        return grad


def _overlap_rank(rank, world_size, device):
    real = dist.all_reduce

    def counting(*args, **kwargs):
        _Probe.issued += 1
        return real(*args, **kwargs)

    dist.all_reduce = counting  # ddp calls dist.all_reduce by attribute, so it sees this one
    out = {}
    for name, wrapper in ddp.VARIANTS.items():
        torch.manual_seed(0)
        layers = nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)])
        model = wrapper(layers, (16 * 16 + 16) * 4 / ddp.MIB) if name == "bucketed" else wrapper(layers)  # a layer a bucket
        _Probe.calls, _Probe.issued = [], 0
        x = _Probe.apply(torch.randn(4, 16, requires_grad=True))
        model(x).sum().backward()  # the probe sits before the first layer: its backward runs last
        during = _Probe.calls[-1]
        model.finish_gradient_synchronization()
        out[name] = {"during_backward": during, "total": _Probe.issued}
    dist.all_reduce = real
    return out


@pytest.fixture(scope="module")
def equality():
    return launch(_equality_rank, 2, backend="gloo", timeout_s=120)


@pytest.mark.parametrize("kind", ["toy", "tied"])
@pytest.mark.parametrize("variant", list(ddp.VARIANTS))
def test_ranks_match_single_process_training(equality, kind, variant):
    for rank_out in equality:
        assert rank_out[(kind, variant)] < 1e-5
        assert rank_out[(kind, variant, "tied")]


@pytest.mark.gpu
def test_ranks_match_single_process_training_nccl():
    """The same on two GPUs with NCCL, where the bucketed variant copies each reduced bucket back on
    a side stream while backward goes on."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    for rank_out in launch(_equality_rank, 2, backend="nccl", timeout_s=300):
        for kind in ("toy", "tied"):
            for variant in ddp.VARIANTS:
                assert rank_out[(kind, variant)] < 1e-5, (kind, variant)


def test_bucket_assignment_reverse_order_and_cap():
    # sizes in bytes of parameters 0..5; buckets of at most 100 bytes, filled from the last parameter
    assert ddp.assign_buckets([40, 40, 30, 120, 50, 50], 100) == [[5, 4], [3], [2, 1], [0]]
    assert ddp.assign_buckets([10, 10, 10], 1000) == [[2, 1, 0]]
    assert ddp.assign_buckets([10, 10, 10], 1) == [[2], [1], [0]]


def test_bucketed_buckets_hold_parameters_in_reverse_order():
    out = launch(_buckets_rank, 2, backend="gloo", timeout_s=60)
    assert out[0] == [["2.bias", "2.weight"], ["0.bias", "0.weight"]]


def _buckets_rank(rank, world_size, device):
    layers = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    names = {id(p): n for n, p in layers.named_parameters()}
    model = ddp.DDPBucketed(layers, bucket_size_mb=(8 * 8 + 8) * 4 / ddp.MIB)  # one layer a bucket
    return [[names[id(p)] for p in bucket] for bucket in model.buckets]


def test_overlapped_variants_communicate_during_backward():
    out = launch(_overlap_rank, 2, backend="gloo", timeout_s=60)[0]
    assert out["naive"] == {"during_backward": 0, "total": 8}
    assert out["flat"] == {"during_backward": 0, "total": 1}
    # all but the first layer's gradients (weight, bias) had started reducing before backward ended
    assert out["individual"]["during_backward"] >= 6 and out["individual"]["total"] == 8
    assert out["bucketed"]["during_backward"] >= 3 and out["bucketed"]["total"] == 4
