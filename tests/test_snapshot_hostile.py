"""Memory snapshots that once ended badly: malformed trace entries, a trace that opens with frees, a
torch.save archive, a model file of another revision (cs336report.parsers.snapshot, parse-snapshot)."""

import gzip
import json
import pickle
from pathlib import Path

import pytest
import torch

from cs336report.cli import main
from cs336report.parsers.snapshot import SnapshotError, load_snapshot, parse_snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"
MiB = 1 << 20
BASE = 0x7F0000000000
MODEL = "/home/student/cs336_basics/model.py"


def entry(action, addr, size, t, frames=()):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": list(frames) or [{"filename": MODEL, "line": 10, "name": "forward"}]}


def snapshot(trace, live=()):
    """A snapshot of one device whose final segment holds the blocks ``live`` ((address, size) pairs)."""
    blocks = [{"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": []}
              for a, s in live]
    segment = {"device": 0, "address": BASE, "total_size": 1 << 30, "stream": 0, "segment_type": "large",
               "blocks": blocks or [{"address": BASE, "size": 1 << 30, "state": "inactive"}]}
    return {"segments": [segment], "device_traces": [trace]}


def two_allocations():
    return [entry("alloc", BASE, 2 * MiB, 1), entry("alloc", BASE + 2 * MiB, MiB, 2),
            entry("free_completed", BASE, 2 * MiB, 3)]


def write(tmp_path, snap, name="bad.pickle"):
    path = tmp_path / name
    path.write_bytes(pickle.dumps(snap, protocol=4))
    return path


@pytest.mark.parametrize("field, value, said", [
    ("addr", None, "'addr' is missing"), ("size", "2097152", "'size' is '2097152'"),
    ("size", 1 << 70, "'size' is 1180591620717411303424"), ("size", -512, "'size' is -512"),
    ("frames", "model.py:10", "'frames' is a str"), ("time_us", "soon", "'time_us' is 'soon'"),
    ("action", 3, "'action' is 3"), ("frames", [{"filename": MODEL, "line": "ten", "name": "f"}], "frame 0: 'line' is 'ten'"),
])
def test_a_malformed_trace_entry_is_refused_by_file_entry_and_field(tmp_path, capsys, field, value, said):
    trace = two_allocations()
    if value is None:
        del trace[1][field]
    else:
        trace[1][field] = value
    path = write(tmp_path, snapshot(trace))
    with pytest.raises(SnapshotError) as info:
        parse_snapshot(path)
    assert str(info.value).startswith(f"{path}: device 0 trace entry 1: {said}")
    out = tmp_path / "parsed.json"
    assert main(["parse-snapshot", str(path), "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["status"] == "error" and said in record["error"]
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("where, value, said", [
    (("blocks", 0, "size"), "big", "segment 0 block 0: 'size' is 'big'"),
    (("total_size",), -1, "segment 0: 'total_size' is -1"),
    (("blocks", 0), "block", "segment 0 block 0 is a str"),
    (("address",), "0x7f", "segment 0: 'address' is '0x7f'"),
])
def test_a_malformed_segment_is_refused_by_file_and_field(tmp_path, where, value, said):
    snap = snapshot(two_allocations(), live=[(BASE + 2 * MiB, MiB)])
    target = snap["segments"][0]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path = write(tmp_path, snap)
    with pytest.raises(SnapshotError, match=f"^{path}: {said}"):
        parse_snapshot(path)


def test_a_trace_that_opens_with_frees_peaks_before_its_first_event():
    # the ring buffer kept only the end: 96 MiB allocated before it are freed, then 16 MiB allocated
    trace = [entry("free_completed", BASE, 64 * MiB, 1), entry("free_completed", BASE + 64 * MiB, 32 * MiB, 2),
             entry("alloc", BASE + 96 * MiB, 16 * MiB, 3)]
    parsed = parse_snapshot(snapshot(trace, live=[(BASE + 96 * MiB, 16 * MiB)]))
    assert parsed["baseline"]["bytes"] == 96 * MiB and parsed["accounting"]["ok"]
    assert parsed["peak"]["bytes"] == 96 * MiB  # live when the window opens, before the first free
    assert parsed["peak"]["index"] is None and parsed["peak"]["live_by_category"] == {"Preexisting": 96 * MiB}
    assert any("before its first event" in w for w in parsed["warnings"])


def test_a_negative_size_in_the_final_segments_is_refused():
    snap = snapshot(two_allocations(), live=[(BASE + 2 * MiB, MiB)])
    snap["segments"][0]["blocks"][0]["requested_size"] = -MiB
    with pytest.raises(SnapshotError, match="'requested_size' is -1048576"):
        parse_snapshot(snap)


def test_a_torch_save_archive_is_named_as_one(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"weight": torch.zeros(2)}, path)
    with pytest.raises(SnapshotError, match=r"model\.pt: a zip archive, as torch\.save writes.*_dump_snapshot"):
        load_snapshot(path)
    legacy = tmp_path / "legacy.pt"
    torch.save({"weight": torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(SnapshotError, match=r"legacy\.pt: a torch\.save file of the legacy format.*_dump_snapshot"):
        load_snapshot(legacy)
    packed = tmp_path / "model.pt.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(SnapshotError, match="a zip archive, as torch.save writes"):
        load_snapshot(packed)


def test_one_stale_frame_makes_its_whole_file_distrusted():
    # model.py of the run is not the local one: silu's line lies in another function there, and the
    # line that computed the logits is, in the local file, a `layer(x)` call of a function of that name
    parsed = parse_snapshot(FIXTURES / "other_revision.pickle.gz", source_roots=[str(FIXTURES / "other_revision")])
    top = {t["size"]: t for t in parsed["top_allocations"]}
    assert top[4 << 20]["category"] == "FFN"  # by silu's name, which needs no source
    assert top[8 << 20]["category"] == "Other"  # not Block: the local line is not the one that ran
    assert top[2 << 20]["category"] == "Other"
    stale = [w for w in parsed["warnings"] if "another revision" in w]
    assert len(stale) == 1 and stale[0].startswith("/home/student/assignment1/cs336_basics/model.py: 2 of 4 frame(s)")
    assert "no frame of this file is read from its source" in stale[0]
