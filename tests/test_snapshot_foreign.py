"""Memory snapshots from other machines and code (cs336report.parsers.snapshot)."""

import json
import time
from pathlib import Path

import pytest

from cs336report.parsers.snapshot import SnapshotError, load_snapshot, parse_snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"


def test_line_of_another_revision_is_not_used_for_the_category():
    # the SiLU's frame names a line that, in the local revision of the file, is the attention's
    # output projection: the frame's function (silu) is not the one there, so its name decides
    parsed = parse_snapshot(FIXTURES / "other_revision.pickle.gz", source_roots=[str(FIXTURES / "other_revision")])
    top = {t["size"]: t for t in parsed["top_allocations"]}
    assert top[4 << 20]["category"] == "FFN"
    assert top[2 << 20]["category"] == "Other"  # a frame of a stale file, though its function is there
    stale = [w for w in parsed["warnings"] if "another revision" in w]
    assert len(stale) == 1 and "/home/student/assignment1/cs336_basics/model.py: 2 of 4 frame(s)" in stale[0]


def test_frees_after_the_last_optimizer_step_start_no_step():
    parsed = parse_snapshot(FIXTURES / "two_steps_trailing_frees.pickle.gz")
    assert parsed["n_steps"] == 2
    assert parsed["accounting"]["ok"]
    forwards = [p for p in parsed["phases"] if p["phase"] == "forward"]
    # each forward's first allocation starts its step; the frees before it end the step before
    assert [p["step"] for p in parsed["phases"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert forwards[-1]["step"] == 1 and forwards[-1]["n_events"] == 2


def test_gzip_bomb_is_refused_early_with_the_file_name():
    path = FIXTURES / "gzip_bomb.pickle.gz"  # 16 KiB of gzip, a 16 MiB pickle
    started = time.perf_counter()
    with pytest.raises(SnapshotError, match=r"gzip_bomb\.pickle\.gz: decompresses to more than 8388608 bytes"):
        load_snapshot(path)
    assert time.perf_counter() - started < 1.0
    with pytest.raises(SnapshotError, match="more than 1000000 bytes"):
        parse_snapshot(path, max_bytes=1_000_000)
    assert len(load_snapshot(path, max_bytes=32 << 20)["padding"]) == 16 << 20  # a larger cap lets it through


def test_real_snapshot_is_under_the_default_cap():
    assert load_snapshot(FIXTURES / "real" / "mini_ctx64_train_step.pickle.gz")["device_traces"]


def test_cap_reaches_the_parse_command(tmp_path):
    from cs336report.cli import main

    out = tmp_path / "parsed.json"
    main(["parse-snapshot", str(FIXTURES / "real" / "mini_ctx64_forward.pickle.gz"), "--out", str(out),
          "--max-snapshot-bytes", "1000"])
    record = json.loads(out.read_text())
    assert record["status"] == "error" and "more than 1000 bytes" in record["error"]
    assert record["data"]["parse"]["options"]["max_bytes"] == 1000
