"""optimizer_state_sharding_accounting: its cells, one cell run by two Gloo ranks on the CPU, the
report section on real CPU records (tests/fixtures/sharding, written by the rule on the CPU grid),
and on two GPUs where a host has them."""

import re
from pathlib import Path

import pytest
import torch

from cs336report.experiments import optimizer_state_sharding_accounting as experiment
from cs336report.experiments.optimizer_state_sharding_accounting import training as experiment_training
from cs336report.records.store import load
from cs336report.report.render import RenderContext, environments
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import optimizer_state_sharding_accounting as section
from helpers import tiny_config

FIXTURES = Path(__file__).parent / "fixtures" / "sharding"
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
MICRO = {"d_model": 32, "d_ff": 64, "num_layers": 1, "num_heads": 2, "vocab_size": 100, "rope_theta": 10000.0}


# on a GPU: tensors of whole 512-byte allocator blocks, so the allocator's count equals the tensors' bytes
GPU_MODEL = {"d_model": 256, "d_ff": 1024, "num_layers": 2, "num_heads": 4, "vocab_size": 1024, "rope_theta": 10000.0}


def _cell(optimizer: str, device: str = "cpu", backend: str = "gloo") -> dict:
    return {"device": device, "size": "micro", "model": MICRO if device == "cpu" else GPU_MODEL, "context": 8, "mode": "train_step",
            "precision": "fp32", "implementation": "naive", "batch_size": 2, "warmup_steps": 1,
            "measured_steps": 2, "tf32": False, "seed": 0, "optimizer": optimizer, "world_size": 2,
            "global_batch": 4, "backend": backend}


def test_cells_split_the_global_batch_over_the_ranks():
    cells = experiment.cells(tiny_config())
    assert sorted(c["optimizer"] for c in cells.values()) == ["adamw", "sharded", "zero"]
    for name, c in cells.items():
        assert c["batch_size"] * c["world_size"] == c["global_batch"]
        assert c["backend"] == "gloo" and name.startswith(c["optimizer"] + "-")


def test_a_global_batch_the_ranks_cannot_share_is_refused():
    cfg = tiny_config()
    cfg.data["grids"]["cpu"]["optimizer_state_sharding_accounting"]["global_batch"] = 5
    with pytest.raises(ValueError, match="global_batch 5"):
        experiment.cells(cfg)


def test_sharded_cell_on_two_cpu_ranks():
    d = experiment_training.run(_cell("sharded"))
    ranks = d["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"]  # the broadcast left the ranks equal
    # each element's AdamW state (two fp32 moments) lives on exactly one rank
    assert sum(r["tensors"]["optimizer_state"] for r in ranks) == pytest.approx(8 * d["params"], rel=0.01)
    assert sum(r["owned_params"] for r in ranks) == d["params"]
    assert all(len(r["memory_steps"]) == 3 and len(r["times_s"]["measured_s"]) == 2 for r in ranks)
    # saved activations: the analytic count plus the logits the loss keeps, within 10 %
    expected = d["analytic"]["saved_activations"] + d["analytic"]["logits"]
    assert ranks[0]["tensors"]["saved_activations"] == pytest.approx(expected, rel=0.10)


def _context(tmp_path, pattern="*-tiny-*.json.gz"):
    records = [load(p) for p in sorted(FIXTURES.glob(pattern))]
    return RenderContext(records, RenderSettings.from_config({"_device": "cpu", "_grid": "cpu"}), tmp_path)


def test_section_reads_the_cpu_records(tmp_path):
    data = section.build(_context(tmp_path))
    a = data["analysis"]
    assert data["ok"] and a["same_weights"] and not a["cuda"]
    assert a["sharded"]["goal_met"] and a["zero"]["goal_met"]  # state saving within 5 % of 8·P·(1 − 1/N)
    assert a["sent_ratio"] == "1.50"  # all-reduce + broadcast against reduce-scatter + all-gather
    assert len(data["memory_table"].rows) == 3  # 3 optimizers, each the largest of its 2 ranks
    assert {t["goal"][:9] for t in data["targets"]} == {"optimizer", "time per "}


@pytest.mark.parametrize("mode", ["md", "html"])
@pytest.mark.parametrize("pattern", ["*-tiny-*.json.gz", "sharded-*.json.gz"])
def test_section_templates_render(tmp_path, mode, pattern):
    data = section.build(_context(tmp_path, pattern))
    if pattern.startswith("sharded"):  # one optimizer alone: no comparison, and no template trips on it
        assert data["analysis"]["sharded"] is None and data["analysis"]["vs_zero"] is None
    env = environments()[mode]
    fmt_lib = "_md.j2" if mode == "md" else "_html.j2"
    info = {"id": "optimizer_state_sharding_accounting", "title": "optimizer_state_sharding_accounting", "rules": list(section.EXPERIMENTS)}
    text = env.get_template("sections/optimizer_state_sharding_accounting.j2").render(fmt_lib=fmt_lib, d=data, section=info)
    assert "Time per iteration" in text and ("within the 5 % goal" in text) == (data["analysis"]["sharded"] is not None)
    if "macro sub(" not in (TEMPLATES / fmt_lib).read_text():
        pytest.skip("this checkout's layout macros have no answer layer")
    answer = env.get_template("answers/optimizer_state_sharding_accounting.j2").render(fmt_lib=fmt_lib, d=data, section=info)
    assert "ZeRO stage 1" in answer
    if data["analysis"]["sharded"]:
        assert data["analysis"]["state_full"] in answer


@pytest.mark.gpu
def test_two_gpus_measure_the_state_the_allocator_holds():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    for optimizer in ("sharded", "zero"):
        d = experiment_training.run(_cell(optimizer, device="cuda", backend="nccl"))
        for r in d["ranks"]:
            # the first step allocated the state: the allocator's count and the tensors' bytes agree
            assert r["state_allocated_first_step"] == pytest.approx(r["tensors"]["optimizer_state"], rel=0.05)
            last = r["memory_steps"][-1]
            assert last["after_step"]["peak"] >= r["tensors"]["parameters"] + r["tensors"]["optimizer_state"]
        assert d["nccl_version"]


PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data" / "optimizer_state_sharding_accounting"


@pytest.mark.skipif(not PUBLISHED.exists(), reason="no published records")
def test_published_answer_splits_memory_and_time_from_the_records(tmp_path):
    """The H200 records: the optimizer step's own allocation halves too, the peaks are named by the phase
    they were taken in, and a difference of the steps beyond their spread is given per phase (none within it)."""
    from cs336report.records.store import load
    from cs336report.report.render import RenderContext, environments
    from cs336report.report.sections import optimizer_state_sharding_accounting as section
    from cs336report.report.tables import fmt_bytes

    records = [{**load(p), "_path": str(p)} for p in sorted(PUBLISHED.glob("*.json.gz"))]
    rank0 = {r["config"]["optimizer"]: r["data"]["ranks"][0] for r in records}
    extra = {k: v["memory_steps"][-1]["after_step"]["peak"] - v["memory_steps"][-1]["before_step"]["current"]
             for k, v in rank0.items()}
    fb = {k: v["phase_stats_s"]["forward_backward"]["mean"] for k, v in rank0.items()}
    data = section.build(RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    info = {"id": "optimizer_state_sharding_accounting", "title": "optimizer_state_sharding_accounting", "rules": list(section.EXPERIMENTS)}
    text = environments()["md"].get_template("answers/optimizer_state_sharding_accounting.j2").render(fmt_lib="_md.j2", d=data, section=info)
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
    assert (f"what the optimizer step allocates for its own update, {fmt_bytes(extra['sharded'])} above what is "
            f"live before it instead of {fmt_bytes(extra['adamw'])}") in text
    assert "directly after the optimizer step" not in text and "So the peak allocated in the optimizer step" in text
    versus = data["analysis"]["vs_adamw"]
    if versus["within_spread"]:  # no ordering, so no split of a difference into phases
        assert "less than their combined spread" in text and "is in forward and backward" not in text
    elif versus["slower"]:
        assert f"{(fb['sharded'] - fb['adamw']) * 1e3:+.3g} ms is in forward and backward" in text
    # after initialization a rank holds more than its parameters: the answer gives both, not "only the parameters"
    init = max(r["memory_after_init"]["peak"] for rec in records if rec["config"]["optimizer"] == "sharded"
               for r in rec["data"]["ranks"])
    params = rank0["sharded"]["tensors"]["parameters"]
    assert init > params and "only the parameters are there" not in text
    assert f"a rank holds {fmt_bytes(init)}: the parameters ({fmt_bytes(params)}) and" in text
    # the evidence: the phase columns are means, and the comparison with ZeRO names its direction and ranks
    evidence = environments()["md"].get_template("sections/optimizer_state_sharding_accounting.j2").render(
        fmt_lib="_md.j2", d=data, section={**info, "command": "c"})
    ours, zero = rank0["sharded"]["stats_s"]["mean"], rank0["zero"]["stats_s"]["mean"]
    way = "slower" if ours > zero else "faster"
    assert f"(rank 0's means): {abs(ours / zero - 1) * 100:.3g} % {way}" in re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", evidence)
    assert "forward + backward, mean" in data["time_table"].columns
