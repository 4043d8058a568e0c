"""Records say which code made them, without the machine's paths; publish takes one clean commit."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cs336report.records import provenance, store as results
from cs336report.report.appendix.provenance import unclean_records
from cs336report.steps.publish import publish

REPO = Path(__file__).resolve().parents[1]


def test_records_hold_no_absolute_path(tmp_path):
    from cs336report.run.runner import run_cell
    from helpers import cell

    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    record = run_cell("benchmarking", name, c, tmp_path / "r.json")
    record.pop("_path", None)
    text = json.dumps(record)
    for folder in {str(REPO), os.getcwd(), str(tmp_path)}:
        assert folder not in text
    assert record["data"]["model"]["file"] == "cs336report/lm/model.py"
    assert len(record["provenance"]["code_hash"]) == 16


def test_code_hash_needs_no_git_and_matches_the_commit(tmp_path):
    pkg = tmp_path / "repo" / "cs336report"
    shutil.copytree(provenance.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    assert provenance.code_hash(pkg) == provenance.code_hash()  # a copy without .git hashes the same
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path / "repo")]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    sha = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert provenance.commit_code_hash(sha, tmp_path / "repo") == provenance.code_hash(pkg)
    (pkg / "lm" / "model.py").write_text((pkg / "lm" / "model.py").read_text() + "\n# edited\n")
    assert provenance.commit_code_hash(sha, tmp_path / "repo") != provenance.code_hash(pkg)


def _record(tmp_path, name, **prov):
    rec = {"schema": results.SCHEMA, "experiment": "benchmarking", "cell": name, "status": "ok", "error": None,
           "config": {"device": "cpu"}, "data": {"stats_s": {"mean": 0.1}}, "provenance": {"device": "cpu", **prov}}
    return str(results.save(rec, tmp_path / "results" / "benchmarking" / f"{name}.json"))


def test_publish_refuses_records_that_are_not_from_one_clean_commit(tmp_path, monkeypatch):
    import cs336report.steps.publish as pub

    monkeypatch.setattr(pub, "commit_code_hash", lambda commit: "feedfacefeedface")
    clean = _record(tmp_path, "a", git_commit="1" * 40, git_dirty=False, code_hash="feedfacefeedface")
    none = _record(tmp_path, "b", git_commit=None)
    dirty = _record(tmp_path, "c", git_commit="1" * 40, git_dirty=True)
    differs = _record(tmp_path, "d", git_commit="1" * 40, git_dirty=False, code_hash="0123456789abcdef")
    publish([clean], {"device": "cpu"}, tmp_path / "ok")
    for path, why in ((none, "names no commit"), (dirty, "uncommitted changes"), (differs, "differs from commit")):
        with pytest.raises(ValueError, match=why):
            publish([path], {"device": "cpu"}, tmp_path / "refused")
    manifest = publish([clean, none, dirty, differs], {"device": "cpu"}, tmp_path / "marked", allow_dirty=True)
    records = [results.load(f) for f in json.loads(manifest.read_text())["files"]]
    unclean = unclean_records(records)
    assert (unclean["no_commit"], unclean["dirty"], unclean["code_differs"]) == (1, 1, 1)
    assert "Not from one clean commit" in unclean["text"]
    assert unclean_records([results.load(f) for f in json.loads((tmp_path / "ok/manifest.json").read_text())["files"]]) is None


def test_merge_refuses_a_cpu_record_in_a_gpu_folder(tmp_path):
    from cs336report.run.runner import run_cell
    from helpers import cell

    config = json.loads((REPO / "report/data/config.json").read_text())
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "manifest.json").write_text(json.dumps({"files": []}))
    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    path = tmp_path / "results" / "benchmarking" / f"{name}.json"
    run_cell("benchmarking", name, c, path)
    with pytest.raises(ValueError, match="ran on cpu"):
        publish([str(path)], config, folder, merge=True, allow_dirty=True)
    assert json.loads((folder / "manifest.json").read_text())["files"] == []


def test_a_file_of_another_machine_is_named_by_its_module():
    """A published record holds the path of the machine that made it; the report names the file the
    same way wherever it is rendered (here the path lies under no folder of this machine)."""
    from cs336report.records.store import portable_path

    foreign = "/somewhere/else/checkout/cs336report/lm/model.py"
    assert portable_path(foreign, "cs336report.lm.model") == "cs336report/lm/model.py"
    assert portable_path("/x/y/mypkg/__init__.py", "mypkg") == "mypkg/__init__.py"
    assert portable_path(foreign) == "model.py"  # without its module: only the name is certain
    assert portable_path("cs336report/lm/model.py", "cs336report.lm.model") == "cs336report/lm/model.py"


def test_the_appendix_tells_apart_machines_that_share_a_name():
    """Records of one 4-GPU host and four cells run again on a 1-GPU host, both named "vm": the
    appendix lists each machine by its cores and GPU slots, with its records; one machine, once."""
    from cs336report.report.appendix.provenance import provenance_summary

    def record(cores, of):
        return {"config": {}, "data": {}, "provenance": {"hostname": "vm", "cpu_count": cores, "gpu": "NVIDIA H200",
                                                       **({"placement": {"of": of, "gpus": ["0"]}} if of else {})}}

    grid = [record(64, 4) for _ in range(5)] + [record(64, None)]  # a parse job holds no GPU slot
    assert provenance_summary(grid)["hosts"] == ["vm (64 cores, 4 GPU slots)"]
    merged = provenance_summary(grid + [record(16, 1) for _ in range(4)])["hosts"]
    assert merged == ["vm (64 cores, 4 GPU slots): 6 records", "vm (16 cores, 1 GPU slot): 4 records"]
