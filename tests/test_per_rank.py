"""What the handout's tests do not check (cs336report.student.per_rank), on two Gloo processes: our
FSDP and sharded optimizer shard, a fixture's replicating "FSDP" and an unsharded optimizer are
reported as not sharded, and DDP gradients are told averaged, summed or not synchronized."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkout_fixtures import build_2026

from cs336report.student import per_rank



def _copy(tmp_path: Path, replace: dict[str, tuple[str, str]]) -> str:
    root = build_2026(tmp_path / "student_repo_2026")
    for path, (old, new) in replace.items():
        text = (root / path).read_text()
        assert old in text, (path, old)
        (root / path).write_text(text.replace(old, new))
    return str(root)


def test_our_fsdp_shards_and_a_replicating_one_is_reported_not_sharded(tmp_path):
    ours = per_rank.fsdp_sharding()
    assert ours["verdict"] == "sharded", ours
    assert all(0.4 < f <= 0.75 for f in ours["parameter_fractions"])
    assert all(r["optimizer_state_bytes"] < 0.75 * r["unsharded_state_bytes"] for r in ours["ranks"])
    fake = per_rank.fsdp_sharding(str(build_2026(tmp_path / "student_repo_2026")))
    assert fake["verdict"] == "not_sharded" and fake["parameter_fractions"] == [1.0, 1.0]
    assert fake["sentence"].startswith("Nothing is sharded: each of the 2 ranks")
    assert all(r["optimizer_state_bytes"] >= r["unsharded_state_bytes"] for r in fake["ranks"])


def test_our_sharded_optimizer_shards_and_a_plain_adamw_does_not(tmp_path):
    ours = per_rank.optimizer_sharding()
    assert ours["verdict"] == "sharded", ours
    plain = _copy(tmp_path, {"tests/adapters.py": (
        "def get_sharded_optimizer(params, optimizer_cls: type[torch.optim.Optimizer], **kwargs) -> "
        "torch.optim.Optimizer:\n    raise NotImplementedError",
        "def get_sharded_optimizer(params, optimizer_cls, **kwargs):\n    return optimizer_cls(params, **kwargs)")})
    found = per_rank.optimizer_sharding(plain)
    assert found["verdict"] == "not_sharded" and min(found["state_fractions"]) >= 1.0
    assert found["sentence"].startswith("Nothing is sharded")


@pytest.mark.parametrize("change, verdict", [
    (None, "averaged"),
    (("                p.grad /= dist.get_world_size()\n", ""), "summed"),
    (("                dist.all_reduce(p.grad)\n                p.grad /= dist.get_world_size()\n",
      "                pass\n"), "not_synchronized"),
])
def test_ddp_gradients_are_told_averaged_summed_or_not_synchronized(tmp_path, change, verdict):
    checkout = _copy(tmp_path, {"cs336_systems/parallel.py": change} if change else {})
    found = per_rank.ddp_averaging(checkout)
    assert found["verdict"] == verdict, found


def test_our_ddp_averages():
    assert per_rank.ddp_averaging()["verdict"] == "averaged"
