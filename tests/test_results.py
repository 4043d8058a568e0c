import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cs336report.records import provenance, store as results
from cs336report.run.runner import run_cell
from helpers import cell


def test_round_trip(tmp_path):
    name, c = cell("roofline")
    record = run_cell("roofline", name, c, tmp_path / "r.json")
    loaded = results.load(tmp_path / "r.json")
    assert loaded.pop("_path") == str(tmp_path / "r.json")
    assert loaded == json.loads(json.dumps(record))
    assert loaded["status"] == "ok"
    prov = loaded["provenance"]
    for key in ("torch", "python", "git_commit", "git_dirty", "device", "gpu", "driver", "cuda", "tf32_matmul"):
        assert key in prov
    assert prov["torch"] and prov["device"] == "cpu"


def test_the_cpu_model_comes_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)   Platinum 8480+\n"
                    "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert provenance.cpu_model(info) == "Intel(R) Xeon(R) Platinum 8480+"
    info.write_text("processor\t: 0\nCPU part\t: 0xd0c\n")  # no model name (some ARM hosts)
    assert provenance.cpu_model(info) is None
    assert provenance.cpu_model(tmp_path / "absent") is None
    assert provenance.provenance("cpu")["cpu_model"] == provenance.cpu_model()


def test_the_host_cpu_and_driver_are_read_once_a_process(monkeypatch):
    reads, runs = [], []
    monkeypatch.setattr(provenance, "_read_cpu_model", lambda path: reads.append(path) or "Some CPU")
    real_run = provenance.subprocess.run
    monkeypatch.setattr(provenance.subprocess, "run", lambda args, **kw: (
        runs.append(args[0]) or real_run(["true"], **kw) if args[0] == "nvidia-smi" else real_run(args, **kw)))
    provenance._host_cpu_model.cache_clear()
    provenance._nvidia_driver.cache_clear()
    try:
        for _ in range(3):
            assert provenance.cpu_model() == "Some CPU"
            provenance._nvidia_driver()
        assert reads == ["/proc/cpuinfo"] and runs == ["nvidia-smi"]
    finally:
        provenance._host_cpu_model.cache_clear()
        provenance._nvidia_driver.cache_clear()


def test_named_commit_wins_over_the_checkout_it_runs_in(monkeypatch):
    head = provenance._git("rev-parse", "HEAD")
    if head is None:
        pytest.skip("not a git checkout")
    monkeypatch.delenv("CS336REPORT_GIT_COMMIT", raising=False)
    own = provenance._git_state()
    assert own["git_commit"] == head and own["git_commit_from"] == "git" and isinstance(own["git_dirty"], bool)
    # a tree shipped to another machine names its commit; a stale .git there must not replace it
    monkeypatch.setenv("CS336REPORT_GIT_COMMIT", "f" * 40)
    shipped = provenance._git_state()
    assert shipped == {"git_commit": "f" * 40, "git_commit_from": "CS336REPORT_GIT_COMMIT", "git_dirty": None,
                       "code_hash": provenance.code_hash()}
    monkeypatch.setenv("CS336REPORT_GIT_COMMIT", head)
    assert provenance._git_state()["git_dirty"] == own["git_dirty"]  # .git at the named commit: its status counts


def test_save_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_text('{"old": true}')

    def broken_replace(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        results.save({"a": 1}, target)
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_full_disk_leaves_the_old_file_and_names_the_new_one(tmp_path, monkeypatch):
    target = tmp_path / "figure.png"
    target.write_bytes(b"old")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as err:
        results.write_atomic(target, b"\x89PNG" + b"x" * 1000)
    assert (err.value.errno, err.value.filename) == (28, str(target))
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["figure.png"]


def test_a_render_that_cannot_write_says_which_file_in_one_line(tmp_path, monkeypatch, capsys):
    from conftest import REPO
    from cs336report.cli import main
    from cs336report.report import render

    def full(path, payload):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(render, "write_atomic", full)
    record = REPO / "tests" / "fixtures" / "handout_tests" / "attention.json"
    out = tmp_path / "report"
    assert main(["render", str(record), "--config-json", '{"_device": "cpu"}', "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: writing {out}/") and "failed: No space left on device;" in err
    assert len(err.splitlines()) == 1


def test_killed_experiment_leaves_no_result(tmp_path):
    name, c = cell("benchmarking")
    c["measured_steps"] = 100_000  # runs until killed
    out = tmp_path / "res" / f"{name}.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cs336report", "run", "benchmarking", "--name", name, "--cell", json.dumps(c),
         "--out", str(out)],
        stderr=subprocess.PIPE, text=True,
    )
    assert "started" in proc.stderr.readline()
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


@pytest.mark.parametrize(
    "content, message",
    [("{not json", "not valid JSON"), ('{"schema": 1}', "missing field"), ("[1]", "expected a JSON object")],
)
def test_load_names_the_file_and_problem(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(results.ResultError, match=message) as info:
        results.load(path)
    assert str(path) in str(info.value)


RECORD = {"schema": results.SCHEMA, "experiment": "roofline", "cell": "probe", "status": "ok", "error": None,
          "config": {"size": "small"}, "data": {"copy": {"x": [1.5, float("nan")]}, "matmul": {"name": "ü"}}, "provenance": {"device": "cpu"}}


def _same(a: dict, b: dict) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN != NaN under ==


@pytest.mark.parametrize("name", ["probe.json", "probe.json.gz"])
def test_load_reads_plain_and_gzip_records(tmp_path, name):
    path = results.save(RECORD, tmp_path / name, compact=True)
    raw = path.read_bytes()
    assert raw.startswith(b"\x1f\x8b") == name.endswith(".gz")
    loaded = results.load(path)
    assert loaded.pop("_path") == str(path)
    assert _same(loaded, RECORD)


def test_gzip_record_holds_the_same_json_text_with_stable_bytes(tmp_path):
    plain = results.save(RECORD, tmp_path / "a.json", compact=True).read_bytes()
    first = results.save(RECORD, tmp_path / "a.json.gz", compact=True).read_bytes()
    second = results.save(RECORD, tmp_path / "b" / "other-name.json.gz", compact=True).read_bytes()
    assert gzip.decompress(first) == plain
    assert first == second  # no file name or timestamp in the gzip header
    assert first[4:8] == b"\0\0\0\0"  # MTIME


def test_gzip_content_under_a_plain_name_is_still_read(tmp_path):
    path = tmp_path / "probe.json"
    path.write_bytes(gzip.compress(json.dumps(RECORD).encode()))
    assert results.load(path)["cell"] == "probe"


@pytest.mark.parametrize(
    "damage",
    [lambda gz: b"{not gzip at all", lambda gz: gz[: len(gz) // 2], lambda gz: gz[:12] + b"\xff" * 20 + gz[32:]],
    ids=["not-gzip", "truncated", "corrupt-stream"],
)
def test_corrupt_gzip_record_names_the_file(tmp_path, damage):
    good = results.save(RECORD, tmp_path / "good.json.gz", compact=True).read_bytes()
    path = tmp_path / "bad.json.gz"
    path.write_bytes(damage(good))
    with pytest.raises(results.ResultError, match="not a valid gzip file") as info:
        results.load(path)
    assert str(path) in str(info.value)


def test_missing_gzip_record_names_the_file(tmp_path):
    with pytest.raises(results.ResultError, match="no such result file") as info:
        results.load(tmp_path / "gone.json.gz")
    assert "gone.json.gz" in str(info.value)


def test_result_stem_drops_either_suffix():
    assert results.result_stem("results/benchmarking/small-ctx128.json") == "small-ctx128"
    assert results.result_stem("report/data/benchmarking/small-ctx128.json.gz") == "small-ctx128"
    assert results.result_stem("x/run.log") == "run"
