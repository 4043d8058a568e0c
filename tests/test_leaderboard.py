"""The leaderboard (2026): its cell needs two GPUs and is recorded as not run on a host of fewer; its
step, run here on two Gloo ranks on the CPU with a tiny model, trains with our FSDP and gives every
rank's times; the answer quotes the fastest step or says what the cell needs."""

import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.distributed.launch import gpus_present
from cs336report.experiments.leaderboard import step
from cs336report.records.store import load
from cs336report.report.render import environments
from cs336report.report.sections import leaderboard as section
from cs336report.run.runner import run_cell

TINY = {"d_model": 64, "d_ff": 256, "num_layers": 2, "num_heads": 4, "vocab_size": 1000, "rope_theta": 10000.0}


def _cells(handout=2026, grid="cpu", device="cpu"):
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    cfg = Config.from_dict({**raw, "handout": handout, "grid": grid, "device": device}, source="t", require_cuda=False)
    return experiments.cells("leaderboard", cfg)


def test_the_2026_cell_is_the_handouts_setting_on_two_nccl_ranks_and_2025_has_none():
    (name, cell), = _cells().items()
    assert cell["backend"] == "nccl" and cell["world_size"] == 2 and cell["compute_dtype"] == "bf16"
    assert (cell["batch_size"], cell["context"], cell["model"]["vocab_size"]) == (2, 32768, 151936)
    assert name == "fsdp-leaderboard-ctx32768-b2-w2"
    assert _cells(handout=2025, grid="gpu", device="cuda") == {}


def test_on_a_host_without_two_gpus_the_record_says_not_run(tmp_path):
    (name, cell), = _cells().items()
    record = run_cell("leaderboard", name, cell, tmp_path / "r.json")
    assert gpus_present() < 2 and record["status"] == "not_run"
    assert load(tmp_path / "r.json")["error"] == f"not run: needs 2 GPUs, {gpus_present()} present"


def test_the_step_trains_on_two_gloo_ranks_and_reports_the_slowest_rank(tmp_path):
    cell = {"device": "cpu", "backend": "gloo", "world_size": 2, "size": "tiny", "model": TINY, "context": 16,
            "batch_size": 4, "implementation": "native", "compute_dtype": "fp32", "warmup_steps": 1,
            "measured_steps": 2, "timeout_s": 300, "seed": 0}
    out = tmp_path / "r.json"
    record = run_cell("leaderboard", "tiny", cell, out)
    assert record["status"] == "ok", record["error"]
    data = load(out)["data"]
    assert len(data["ranks"]) == 2 and all(len(r["step_s"]) == 2 for r in data["ranks"])
    assert data["step_s"] == [max(r["step_s"][i] for r in data["ranks"]) for i in range(2)]
    # each rank holds its shards of the sharded weights, about half of them
    held = data["ranks"][0]["parameter_bytes"]
    assert 0 < held["sharded"] < held["total"]
    ctx = type("Ctx", (), {"records": lambda self, e: [{**record, "_path": str(out)}]})()
    built = section.build(ctx)
    text = environments()["md"].get_template("answers/leaderboard.j2").render(
        fmt_lib="_md.j2", d=built, section={"command": None})
    assert f"on 2 GPUs takes [{built['best']['ms']}]" in text and "fp32 master weights" in text
