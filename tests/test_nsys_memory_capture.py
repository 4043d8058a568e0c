"""memory_profiling (f)'s capture step on the CPU: a cell that cannot be captured is recorded as not run
with the reason, the nsys command carries CUDA memory tracking, and the export and parse turn a
report's SQLite export (here written by a stand-in nsys from our own fixture) into the record's numbers."""

import sqlite3
import stat
import sys

from cs336report.records.store import load
from cs336report.report.sections.memory_profiling.nsys import nsys_memory, nsys_memory_reason
from cs336report.report.tables import sig
from cs336report.run.profiling import nsys_profile_command
from cs336report.steps import nsys_memory_step
from test_nsys_memory import MiB, _capture

TINY = {"d_model": 64, "d_ff": 256, "num_layers": 2, "num_heads": 4, "vocab_size": 10000, "rope_theta": 10000.0}
CELL = {"device": "cpu", "size": "tiny", "model": TINY, "context": 32, "mode": "train_step", "precision": "fp32",
        "implementation": "naive", "batch_size": 4, "warmup_steps": 2, "measured_steps": 1, "tf32": False, "seed": 0,
        "grad": "enabled", "nsys": "nsys"}


def test_a_cpu_cell_is_recorded_as_not_run_needing_a_gpu_with_nsys(tmp_path):
    record = nsys_memory_step.capture("tiny", CELL, tmp_path / "files", tmp_path / "r.json")
    saved = load(tmp_path / "r.json")
    assert record["status"] == saved["status"] == "not_run"
    assert saved["error"].startswith("not run: needs a GPU with nsys") and "'cpu'" in saved["error"]
    assert nsys_memory_reason([saved]).startswith("needs a GPU with nsys")


def test_the_profile_command_tracks_cuda_memory_inside_the_capture_range(tmp_path):
    cell = {**CELL, "profiler": "nsys", "nsys_flags": list(nsys_memory_step.NSYS_FLAGS)}
    command = nsys_profile_command(cell, tmp_path, ["python", "-m", "cs336report", "run"])
    flags = command[:command.index("python")]
    assert "--cuda-memory-usage=true" in flags and "--capture-range=cudaProfilerApi" in flags
    assert "-t" in flags and flags[flags.index("-t") + 1] == "cuda,nvtx"


def _fake_nsys(tmp_path, fixture):
    """An executable standing in for nsys: ``export`` copies ``fixture`` to its --output, ``stats`` writes a CSV."""
    script = tmp_path / "nsys"
    script.write_text(f"""#!{sys.executable}
import shutil, sys
args = sys.argv[1:]
if args[0] == "export":
    out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
    shutil.copy({str(fixture)!r}, out)
elif args[0] == "stats":
    prefix = args[args.index("--output") + 1]
    open(prefix + "_nvtx_sum.csv", "w").write("Range\\n")
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def _ok_record(folder):
    data = {"model": {}, "params": 1, "params_expected": 1, "grad_mode": "enabled", "blocks": 2, "captured_steps": 1,
            "captured_s": 1.0, "no_caching": True, "peak_memory": {}, "device_memory_bytes": 1}
    return {"status": "ok", "error": None, "config": {**CELL, "size": "xl", "model": {"d_model": 2560, "d_ff": 10240}},
            "data": data, "_path": str(folder / "r.json")}


def test_the_export_and_parse_give_saved_bytes_ops_and_gradients_against_the_expected(tmp_path):
    fixture = tmp_path / "fixture.sqlite"
    _capture(fixture, {"aten::mm": [(20, True)], "aten::softmax": [(50, True)]}, grads=400)
    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / "profile.nsys-rep").write_bytes(b"report")
    export = nsys_memory_step.export(folder, _fake_nsys(tmp_path, fixture))
    assert export["reason"] is None and export["sqlite"] == "profile.sqlite" and export["stats"] == "stats_nvtx_sum.csv"
    assert [c["command"][1] for c in export["commands"]] == ["export", "stats"]
    record = _ok_record(folder)
    record["data"]["export"] = export
    parsed = nsys_memory_step.parse(record, folder)
    memory = parsed["data"]["nsys_memory"]
    assert parsed["status"] == "ok" and memory["block_saved_bytes"] == 70 * MiB
    assert memory["gradient_bytes"] == {"0": 400 * MiB, "1": 400 * MiB}
    assert memory["gradient_expected_bytes"] == 104_862_720 * 4  # one xl block's parameters in fp32: 400 MiB
    shown = nsys_memory([parsed])
    assert shown["block_saved"] == "70.0 MiB" and shown["gradient"] == "400 MiB" and shown["expected"] == "400 MiB"
    assert [o["op"] for o in shown["largest_ops"]] == ["aten::softmax", "aten::mm"]
    assert shown["block_saved"].source == str(folder / "r.json")
    assert shown["ratio"] == sig(400 * MiB / (104_862_720 * 4)) and not shown["unattributed"]


def test_a_capture_that_gives_no_block_gradients_says_it_cannot_size_them():
    """0 B in every block's backward range is a capture that missed the gradients (every step has them),
    not a measurement of 0 B: the answer says so instead of printing 0 B against the expected bytes."""
    from cs336report.report.sections.memory_profiling.nsys import nsys_memory

    memory = {"blocks": 2, "block": 1, "block_saved_bytes": 70 * MiB, "largest_ops": [],
              "gradient_bytes": {"0": 0, "1": 0}, "gradient_expected_bytes": 400 * MiB}
    record = {"status": "ok", "config": {"size": "xl", "context": 128}, "data": {"nsys_memory": memory}, "_path": "r.json"}
    shown = nsys_memory([record])
    assert shown["unattributed"] and shown["ratio"] is None
    memory["gradient_bytes"] = {"0": 0, "1": 200 * MiB}
    shown = nsys_memory([record])
    assert not shown["unattributed"] and shown["ratio"] == sig(0.5)


def test_a_missing_report_or_an_unattributable_export_is_an_error_that_says_which(tmp_path):
    folder = tmp_path / "cell"
    folder.mkdir()
    assert "left no report" in nsys_memory_step.export(folder, "nsys")["reason"]
    db = sqlite3.connect(folder / "profile.sqlite")
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, text TEXT, textId INTEGER)")
    db.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER, address INTEGER, bytes INTEGER, "
               "memoryOperationType INTEGER)")
    db.close()
    record = _ok_record(folder)
    record["data"]["export"] = {"sqlite": "profile.sqlite", "reason": None}
    parsed = nsys_memory_step.parse(record, folder)
    assert parsed["status"] == "error" and "could not be attributed to blocks" in parsed["error"]
    assert nsys_memory([parsed]) is None and "could not be attributed" in nsys_memory_reason([parsed])


def test_the_block_ranges_open_and_close_in_order_and_change_nothing_the_model_computes(monkeypatch):
    """The hooks that mark each block's forward and backward start and end NVTX ranges (forward 0, 1,
    backward 1, 0), each ended with the id its start returned, and leave the loss and every gradient as
    they are without them. They are start/end ranges, never pushed or popped: autograd evaluates a
    backward hook inside a range of its own that emit_nvtx pushes, and a pop would close that one's
    innermost range instead (the block's backward would end where the hook's node does)."""
    import torch

    from cs336report.experiments.memory_profiling import nsys_capture
    from cs336report.lm.model import TransformerLM, cross_entropy
    from cs336report.names.spec import ModelSpec

    events, ids = [], iter(range(100, 1000))

    def start(name):
        events.append(("start", name, rid := next(ids)))
        return rid

    def stack_range(*_):
        raise AssertionError("a block range must not use the thread's range stack")

    monkeypatch.setattr(torch.cuda.nvtx, "range_start", start)
    monkeypatch.setattr(torch.cuda.nvtx, "range_end", lambda rid: events.append(("end", None, rid)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", stack_range)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", stack_range)
    torch.manual_seed(0)
    model = TransformerLM(ModelSpec(**TINY), 16)
    tokens = torch.randint(0, TINY["vocab_size"], (2, 16))

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        loss = cross_entropy(model(tokens), tokens)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    plain_loss, plain_grads = loss_and_grads()
    handles = nsys_capture.mark_blocks(nsys_capture.blocks_of(model))
    loss, grads = loss_and_grads()
    for handle in handles:
        handle.remove()
    assert torch.equal(loss, plain_loss) and all(torch.equal(a, b) for a, b in zip(grads, plain_grads))
    starts = [(name, rid) for kind, name, rid in events if kind == "start"]
    assert [name for name, _ in starts] == ["block 0 forward", "block 1 forward", "block 1 backward", "block 0 backward"]
    open_ids = set()
    for kind, _, rid in events:
        if kind == "start":
            open_ids.add(rid)
        else:
            assert rid in open_ids  # ends a range that was started and is still open
            open_ids.remove(rid)
        assert len(open_ids) <= 1  # each block's range ends before the next starts
    assert not open_ids


def test_the_f_answer_that_did_not_run_names_the_nsight_rule_to_rerun(tmp_path):
    """2026's (f) reads memory_profiling_nsys alone: its not-run line says to rerun that rule, not the
    memory_profiling rules of the rest of the problem, which would never make (f)'s record."""
    from pathlib import Path

    from cs336report.report.render import render_report

    out = tmp_path / "results" / "memory_profiling_nsys" / "tiny.json"
    nsys_memory_step.capture("tiny", CELL, tmp_path / "files", out)
    published = sorted((Path(__file__).parent.parent / "report" / "data" / "memory_profiling_parse").glob("*.json.gz"))
    render_report([str(p) for p in published[:3]] + [str(out)],
                  {"_device": "cuda", "_grid": "gpu", "_handout": 2026}, tmp_path / "out", draw=False)
    f = (tmp_path / "out" / "answers.md").read_text().split('<a id="memory_profiling-f"></a>', 1)[1].split("<a id=", 1)[0]
    assert "the Nsight capture has no numbers: needs a GPU with nsys" in f
    assert "--forcerun memory_profiling_nsys -- report" in f and "--forcerun memory_profiling " not in f
