"""Generated memory snapshots (Hypothesis): the peak and the final bytes of every valid trace, an error naming the
file for every damaged one; parse-snapshot never ends in a traceback."""

import contextlib
import io
import json
import pickle
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cs336report.cli import main
from cs336report.parsers.snapshot import SnapshotError, parse_snapshot

SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
BASE, BLOCK = 0x7F0000000000, 512
MODEL = "/home/student/cs336_basics/model.py"
STACKS = (
    [{"filename": MODEL, "line": 30, "name": "forward"}, {"filename": "/home/student/train.py", "line": 9,
                                                           "name": "train_step"}],
    [{"filename": "??", "line": 0, "name": "torch::autograd::Engine::thread_main(...)"}],
    [{"filename": "/usr/lib/python3/site-packages/torch/optim/adamw.py", "line": 400, "name": "_single_tensor_adamw"}],
    [],
)


@st.composite
def snapshots(draw):
    """(a snapshot, the peak of live bytes, the live bytes at the end): blocks live before the trace
    window, then allocations and frees, each free requested and completed."""
    pre = draw(st.lists(st.integers(1, 64), max_size=4))
    ops = draw(st.lists(st.tuples(st.booleans(), st.integers(1, 64), st.integers(0, 99), st.integers(0, 3)),
                        max_size=40))
    timed = draw(st.booleans())
    live, trace, addr = {}, [], BASE
    for size in pre:
        live[addr], addr = size * BLOCK, addr + size * BLOCK
    start = current = peak = sum(live.values())
    t = 1000
    for alloc, size, pick, stack in ops:
        if alloc or not live:
            live[addr], actions, block = size * BLOCK, ["alloc"], addr
            addr += size * BLOCK
        else:
            block, actions = sorted(live)[pick % len(live)], ["free_requested", "free_completed"]
        for action in actions:
            t += 3
            entry = {"action": action, "addr": block, "size": live[block], "stream": 0, "frames": STACKS[stack]}
            if timed:
                entry["time_us"] = t
            trace.append(entry)
        current += live[block] if alloc or actions == ["alloc"] else -live[block]
        if actions != ["alloc"]:
            del live[block]
        peak = max(peak, current)
    blocks = [{"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": []}
              for a, s in sorted(live.items())]
    segment = {"device": 0, "address": BASE, "total_size": max(addr - BASE, BLOCK), "stream": 0, "blocks": blocks}
    return {"segments": [segment], "device_traces": [trace]}, max(peak, start), current


@SETTINGS
@given(case=snapshots())
def test_a_trace_gives_its_peak_and_its_final_bytes(case):
    snap, peak, final = case
    parsed = parse_snapshot(snap)
    assert parsed["peak"]["bytes"] == peak
    assert parsed["final_bytes"] == final and parsed["accounting"]["ok"]
    assert max(parsed["timeline"]["y"] or [0]) <= peak


weird = st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.integers(-(2**70), 2**70),
                  st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=2),
                  st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
ENTRY_FIELDS = ("action", "addr", "size", "time_us", "frames", "stream")
FRAME_FIELDS = ("filename", "line", "name")
SEGMENT_FIELDS = ("address", "total_size", "blocks", "device")
BLOCK_FIELDS = ("address", "size", "requested_size", "state")


def damage(snap: dict, where: str, index: int, field: int, value) -> None:
    trace, segment = snap["device_traces"][0], snap["segments"][0]
    if where == "entry" and trace:
        trace[index % len(trace)][ENTRY_FIELDS[field % len(ENTRY_FIELDS)]] = value
    elif where == "frame" and trace:
        entry = trace[index % len(trace)]
        entry["frames"] = [dict(f) for f in entry["frames"]] or [{}]
        entry["frames"][0][FRAME_FIELDS[field % len(FRAME_FIELDS)]] = value
    elif where == "segment":
        segment[SEGMENT_FIELDS[field % len(SEGMENT_FIELDS)]] = value
    elif where == "block" and segment["blocks"]:
        segment["blocks"][index % len(segment["blocks"])][BLOCK_FIELDS[field % len(BLOCK_FIELDS)]] = value
    elif where == "entry-whole" and trace:
        trace[index % len(trace)] = value
    elif where == "trace":
        snap["device_traces"][0] = value


@SETTINGS
@given(case=snapshots(), where=st.sampled_from(["entry", "frame", "segment", "block", "entry-whole", "trace"]),
       index=st.integers(0, 99), field=st.integers(0, 9), value=weird)
def test_a_damaged_snapshot_is_parsed_or_refused_by_name_never_a_traceback(case, where, index, field, value):
    snap = case[0]
    damage(snap, where, index, field, value)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "damaged.pickle"
        path.write_bytes(pickle.dumps(snap, protocol=4))
        try:
            parse_snapshot(path)
        except SnapshotError as exc:
            assert str(exc).startswith(f"{path}: ")
        out = Path(tmp) / "parsed.json"
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(["parse-snapshot", str(path), "--out", str(out)]) == 0
        record = json.loads(out.read_text())
        assert record["status"] in ("ok", "error") and "Traceback" not in err.getvalue()
        assert record["status"] == "ok" or record["error"].startswith(f"{path}: ")


@SETTINGS
@given(data=st.binary(max_size=200))
def test_any_bytes_are_a_snapshot_or_refused_by_name(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "any.pickle"
        path.write_bytes(data)
        try:
            parse_snapshot(path)
        except SnapshotError as exc:
            assert str(exc).startswith(f"{path}: ")
