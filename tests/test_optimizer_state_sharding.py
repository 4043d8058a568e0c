"""The sharded optimizer, tested as the handout tests it: two processes with Gloo on the CPU, toy
models (one with tied weights), AdamW; after several data-parallel steps every rank's parameters
equal those of plain AdamW over the whole batch in one process, while each rank holds the state of
about half of the parameters. One launch runs every scenario (starting processes is the slow part)."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from cs336report.distributed.launch import launch
from cs336report.distributed.sharded_optimizer import ShardedOptimizer, state_bytes

STEPS = 5
WORLD = 2


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 40)
        self.fc2 = nn.Linear(40, 20)
        self.fc3 = nn.Linear(20, 5)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class TiedToyModel(nn.Module):
    """An embedding and an output layer sharing one weight, as tied language models do."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(16, 12)
        self.hidden = nn.Linear(12, 12)
        self.out = nn.Linear(12, 16, bias=False)
        self.out.weight = self.embedding.weight

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(self.embedding(x))))


def _batch(kind: str, step: int):
    g = torch.Generator().manual_seed(100 + step)
    if kind == "tied":
        x = torch.randint(0, 16, (8, 6), generator=g)
        return x, torch.randint(0, 16, (8, 6), generator=g)
    return torch.randn(8, 10, generator=g), torch.randn(8, 5, generator=g)


def _loss(kind, model, x, y):
    out = model(x)
    if kind == "tied":
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return nn.functional.mse_loss(out, y)


def _groups(model, split: bool):
    params = list(model.parameters())
    if not split:
        return [{"params": params}]
    return [{"params": params[: len(params) // 2]}, {"params": params[len(params) // 2:], "lr": 3e-3}]


def _train(rank, world, kind: str, add_group: bool, lr_change: bool):
    """Sharded data-parallel training and plain AdamW on the whole batch, from the same weights."""
    factory = TiedToyModel if kind == "tied" else ToyModel
    torch.manual_seed(0)
    model = factory()
    torch.manual_seed(0)
    reference = factory()
    kwargs = dict(lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))
    groups, ref_groups = _groups(model, add_group), _groups(reference, add_group)
    sharded = ShardedOptimizer(groups[:1], torch.optim.AdamW, **kwargs)
    for g in groups[1:]:
        sharded.add_param_group(g)
    plain = torch.optim.AdamW(ref_groups, **kwargs)
    for step in range(STEPS):
        if lr_change and step == 2:
            for opt in (sharded, plain):
                opt.param_groups[0]["lr"] = 5e-2
        x, y = _batch(kind, step)
        shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        sharded.zero_grad(set_to_none=True)
        _loss(kind, model, x[shard], y[shard]).backward()
        for p in model.parameters():  # data parallel: average the gradients over the ranks
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world
        sharded.step()
        plain.zero_grad(set_to_none=True)
        _loss(kind, reference, x, y).backward()
        plain.step()
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "reference": [p.detach().clone() for p in reference.parameters()],
        "tied": kind == "tied" and model.out.weight is model.embedding.weight,
        "state_bytes": sharded.local_state_bytes(),
        "full_state_bytes": state_bytes(plain),
        "owned": sharded.owned_elements(),
        "elements_per_rank": list(sharded.elements_per_rank),
        "total_elements": sum(p.numel() for p in model.parameters()),
        "largest": max(p.numel() for p in model.parameters()),
        "broadcast": sharded.broadcast_bytes(),
    }


SCENARIOS = {
    "toy": ("toy", False, False),
    "tied": ("tied", False, False),
    "add_param_group": ("toy", True, False),
    "lr_change": ("toy", False, True),
}


def _rank(rank, world, device):
    return {name: _train(rank, world, *args) for name, args in SCENARIOS.items()}


@pytest.fixture(scope="module")
def runs():
    return launch(_rank, WORLD, backend="gloo", timeout_s=180)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_parameters_match_unsharded_adamw(runs, scenario):
    for rank, out in enumerate(runs):
        r = out[scenario]
        for i, (p, q) in enumerate(zip(r["params"], r["reference"])):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=f"rank {rank}, parameter {i}")
    # and the ranks agree bit for bit: the broadcast made them equal
    for p0, p1 in zip(runs[0][scenario]["params"], runs[1][scenario]["params"]):
        assert torch.equal(p0, p1)


def test_training_moved_the_parameters(runs):
    # guards against a test that passes because nothing was updated
    torch.manual_seed(0)
    initial = list(ToyModel().parameters())
    moved = [not torch.allclose(p, q) for p, q in zip(runs[0]["toy"]["params"], initial)]
    assert all(moved)


def test_tied_weight_stays_tied_and_is_owned_once(runs):
    r = runs[0]["tied"]
    assert r["tied"]
    assert sum(r["elements_per_rank"]) == r["total_elements"]  # the shared weight counted once


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_rank_holds_about_half_the_state(runs, scenario):
    states = [out[scenario]["state_bytes"] for out in runs]
    full = runs[0][scenario]["full_state_bytes"]
    per_element = full / runs[0][scenario]["total_elements"]  # AdamW: two fp32 moments per element
    assert sum(states) == pytest.approx(full, rel=0.01)  # every element's state lives on one rank
    for out, s in zip(runs, states):
        r = out[scenario]
        assert s == pytest.approx(r["owned"] * per_element, rel=0.02)
        # greedy partition: no rank exceeds an equal share by more than the largest parameter
        assert r["owned"] <= r["total_elements"] / WORLD + r["largest"]
        assert s < 0.75 * full


def test_broadcast_accounts_for_every_parameter_once(runs):
    b0, b1 = runs[0]["toy"]["broadcast"], runs[1]["toy"]["broadcast"]
    assert b0["owned"] + b1["owned"] == b0["total"] == 4 * runs[0]["toy"]["total_elements"]
    assert b0["received"] == b1["owned"]


def test_one_process_is_plain_adamw():
    torch.manual_seed(0)
    model = ToyModel()
    torch.manual_seed(0)
    reference = ToyModel()
    sharded = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-2)
    plain = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    for step in range(3):
        x, y = _batch("toy", step)
        for m, opt in ((model, sharded), (reference, plain)):
            opt.zero_grad()
            _loss("toy", m, x, y).backward()
            opt.step()
    assert sharded.world_size == 1 and sharded.local_state_bytes() == state_bytes(plain)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p, q)


def test_partition_is_balanced_by_elements():
    sizes = [1000, 10, 700, 300, 5, 990]
    params = [nn.Parameter(torch.zeros(n)) for n in sizes]
    opt = ShardedOptimizer(params[:1], torch.optim.SGD, lr=0.1)
    opt.world_size, opt.elements_per_rank = 3, [0, 0, 0]  # partition as a 3-rank group would
    owners = opt._assign(params)
    loads = [sum(n for n, o in zip(sizes, owners) if o == r) for r in range(3)]
    # 1000, 990, 700 open the three ranks; 300 joins 700, 10 joins 990, 5 the first of three equal loads
    assert loads == [1005, 1000, 1000]
