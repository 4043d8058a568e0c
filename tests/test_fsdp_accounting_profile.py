"""fsdp_accounting (b), on the CPU: the profiled cell is recorded not run where GPUs or nsys are missing;
the FSDP steps with their NVTX ranges run on two Gloo ranks; the parse of a synthetic pair of nsys
exports (tests/fixtures/fsdp_forward_synthetic, written by hand in the exports' column layout) gives
the numbers worked out by hand in its README; the answer says in time or not as those numbers do."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config, load_file
from cs336report.parsers.nsys_columns import NsysParseError
from cs336report.records.store import load, save
from cs336report.report.render import render_report
from cs336report.run.profiling import LAUNCH_FILE, RUN_FILE, export_stats, profile_cell
from cs336report.run.runner import run_cell
from cs336report.steps.fsdp_forward import parse_forward
from test_answers import answer_blocks

FIXTURE = Path(__file__).parent / "fixtures" / "fsdp_forward_synthetic"
PROFILE = "fsdp_accounting_profile"


def _config(device: str = "cpu") -> Config:
    return Config.from_dict({**load_file(DEFAULT_CONFIG), "device": device, "handout": 2026, "jobs_elsewhere": True},
                            require_cuda=False)


def test_the_profiled_cell_is_xl_on_two_nccl_ranks_and_not_run_on_the_cpu(tmp_path):
    found = experiments.cells(PROFILE, _config())
    assert list(found) == ["xl-ctx512-b4-w2-bf16"]
    name, cell = next(iter(found.items()))
    assert cell["backend"] == "nccl" and cell["world_size"] == 2 and cell["model"]["d_model"] == 2560  # 2026's xl
    assert cell["profiler"] == "nsys" and cell["capture_range"] is False and cell["profile_steps"] == 2
    assert experiments.cells(PROFILE, Config.from_dict({**load_file(DEFAULT_CONFIG), "device": "cpu"})) == {}  # 2025
    out = tmp_path / "profile"
    launch = profile_cell(PROFILE, name, cell, out)
    run = load(out / RUN_FILE)
    assert run["status"] == "not_run" and run["error"].startswith("not run: needs 2 GPUs")
    assert launch["command"] == ["not profiled: too few GPUs"] and launch["report"] is None
    assert not list(out.glob("profile.*"))  # no profiler started
    export = export_stats(out, tmp_path / "stats")
    assert "not_run" in export["reason"]
    parsed = parse_forward(tmp_path / "stats", out / RUN_FILE, tmp_path / "parse.json")
    assert parsed["status"] == "not_run" and parsed["data"] == {} and "needs 2 GPUs" in parsed["error"]


def test_a_cell_for_nsys_where_there_is_none_is_recorded_not_run(tmp_path):
    cell = {**_tiny_cell(), "profiler": "nsys", "nsys": str(tmp_path / "no-such-nsys")}
    profile_cell(PROFILE, "tiny", cell, tmp_path)
    run = load(tmp_path / RUN_FILE)
    assert run["status"] == "not_run" and "Nsight Systems" in run["error"]
    assert json.loads((tmp_path / LAUNCH_FILE).read_text())["command"] == ["not profiled: no nsys"]


def _tiny_cell() -> dict:
    return {"device": "cpu", "backend": "gloo", "world_size": 2, "size": "tiny",
            "model": {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 2, "vocab_size": 50, "rope_theta": 10000.0},
            "context": 8, "batch_size": 4, "implementation": "naive", "compute_dtype": "bf16", "warmup_steps": 1,
            "profile_steps": 2, "timeout_s": 120, "seed": 0}


def test_the_fsdp_steps_run_in_their_nvtx_ranges_on_two_gloo_ranks():
    from cs336report.experiments.fsdp_accounting.forward import run

    cell = _tiny_cell()
    data = run(cell)
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    for r in data["ranks"]:
        rank = r["rank"]
        # one step range and one forward range per profiled step, none in the warm-up
        assert r["ranges"] == {f"fsdp_step rank {rank}": 2, f"fsdp_forward rank {rank}": 2}
        # the forward gathered every sharded weight: 7 linear layers a block, the embedding and the LM head
        assert r["sharded_weights"] == 2 * 7 + 2 and r["forward_gathers"] == r["sharded_weights"]
        assert r["parameter_bytes"]["sharded"] < r["parameter_bytes"]["total"]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    return parse_forward(FIXTURE, FIXTURE / RUN_FILE, tmp_path_factory.mktemp("parse") / "out.json")


def test_the_parse_keeps_each_ranks_last_forward_and_its_numbers(parsed):
    assert parsed["status"] == "ok" and parsed["experiment"] == PROFILE and parsed["data"]["tool"] == "nsys"
    r0, r1 = parsed["data"]["ranks"]["0"], parsed["data"]["ranks"]["1"]
    # rank 0, by hand (the fixture's README): 360 us of gathers, 240 beside compute, 120 waited for
    assert r0["forward_us"] == pytest.approx(1000) and r0["gather_kernels"] == 4 and len(r0["kernels"]) == 7
    assert r0["gathers"]["comm_us"] == pytest.approx(360) and r0["gathers"]["hidden_us"] == pytest.approx(240)
    assert r0["gathers"]["exposed_us"] == pytest.approx(120)
    assert r0["wait"]["waited_us"] == pytest.approx(120) and r0["wait"]["compute_stream"] == 7
    assert r1["forward_us"] == pytest.approx(800) and r1["wait"]["waited_us"] == pytest.approx(30)
    assert len(r1["kernels"]) == 3 and r1["gathers"]["comm_us"] == pytest.approx(170)
    for r in (r0, r1):  # only the range's kernels, timed from its start
        assert all(0 <= k[1] < r["forward_us"] for k in r["kernels"])
        assert [k[1] for k in r["kernels"]] == sorted(k[1] for k in r["kernels"])


def test_a_profile_without_the_forward_ranges_is_an_error_naming_them(tmp_path):
    for f in FIXTURE.iterdir():
        shutil.copy(f, tmp_path / f.name)
    ranges = pd.read_csv(FIXTURE / "stats_nvtx_gpu_proj_trace.csv")
    ranges[~ranges["Name"].str.contains("fsdp_forward")].to_csv(tmp_path / "stats_nvtx_gpu_proj_trace.csv", index=False)
    with pytest.raises(NsysParseError, match="fsdp_forward rank 0"):
        parse_forward(tmp_path, tmp_path / RUN_FILE, tmp_path / "out.json")


def _answer_b(tmp_path: Path, profile: dict | None) -> str:
    """(b) of fsdp_accounting, rendered from (a)'s record and ``profile`` (a record of the profiled cell)."""
    files = []
    for name, cell in experiments.cells("fsdp_accounting", _config()).items():
        out = tmp_path / "results" / "fsdp_accounting" / f"{name}.json"
        run_cell("fsdp_accounting", name, cell, out)
        files.append(str(out))
    if profile is not None:
        out = tmp_path / "results" / "fsdp_accounting_parse" / f"{profile['cell']}.json"
        save(profile, out)
        files.append(str(out))
    render_report(files, {"_device": "cpu", "_grid": "cpu", "_handout": 2026, "_expected": {}}, tmp_path / "out",
                  draw=False)
    block = answer_blocks((tmp_path / "out" / "answers.md").read_text())["fsdp_accounting"]
    return block.split('<a id="fsdp_accounting-b"></a>')[1]


def test_the_answer_says_not_in_time_where_the_forward_waited_longer(parsed, tmp_path):
    b = _answer_b(tmp_path, parsed)
    # rank 0 waited 120 us of a 1000 us forward: 12 %, above the 5 % counted as in time
    assert "No: the weights' all-gathers do not finish in time" in b and "Yes:" not in b
    assert "0.120 ms" in b and "12.0 %" in b and "1.00 ms" in b and "rank 1: " in b
    assert "results/fsdp_accounting_parse/xl-ctx512-b4-w2-bf16.json" in b  # the numbers link to the record
    assert "global batch 4 at context 512" in b and "bf16 compute" in b
    assert "Not run" not in b


def test_the_answer_says_in_time_where_the_forward_barely_waited(parsed, tmp_path):
    record = json.loads(json.dumps(parsed))
    record["data"]["ranks"]["0"]["wait"]["waited_us"] = 10.0  # 1 % of the forward; rank 1's is 3.75 %
    b = _answer_b(tmp_path, record)
    assert "Yes: the weights' all-gathers finish in time" in b and "No:" not in b
    assert "0.0100 ms" in b and "1.00 %" in b and "3.75 %" in b


def test_the_not_run_answer_names_the_rule_and_what_it_needs(tmp_path):
    b = _answer_b(tmp_path, None)
    assert "Not run: needs 2 GPUs and Nsight Systems" in b and "fsdp_accounting_profile" in b
    assert "does not have" not in b and "this version" not in b


def test_the_parse_commands_name_a_missing_run_file_and_exit_2(tmp_path, capsys):
    """Both trace parses (DDP timeline, FSDP forward) answer a missing run.json with one line naming
    it, not a traceback."""
    from cs336report.cli import main

    for command in ("parse-ddp-timeline", "parse-fsdp-forward"):
        missing = tmp_path / command / "run.json"
        assert main([command, str(tmp_path), "--run", str(missing), "--out", str(tmp_path / "out.json")]) == 2
        assert f"error: {missing}: no such result file" in capsys.readouterr().err
