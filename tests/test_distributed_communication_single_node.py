"""The all-reduce benchmark: a Gloo cell on the CPU, an NCCL cell without its GPUs recorded as not
run, the link read from a real H200 host's nvidia-smi output, and the section's numbers derived
from the raw per-rank samples."""

import gzip
import json
import statistics
from pathlib import Path

import pytest
import torch

from cs336report.config import Config
from cs336report.accounting.interconnect import link_between, nvlink_peak
from cs336report.experiments import distributed_communication_single_node as ar
from cs336report.records.store import load
from cs336report.report.render import RenderContext, render_report
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import distributed_communication_single_node as section
from cs336report.run.runner import run_cell

FIXTURES = Path(__file__).parent / "fixtures" / "ddp_h200" / "distributed_communication_single_node"
CELL = {"device": "cpu", "backend": "gloo", "world_size": 2, "sizes_mb": [0.01, 0.1], "warmup": 1,
        "iterations": 3, "timeout_s": 120}


def test_cells_of_both_grids():
    cpu = Config.from_file("workflow/config/default.yaml", cuda_available=False)
    gpu = Config.from_file("workflow/config/default.yaml", cuda_available=True)
    assert all(c["backend"] == "gloo" for c in ar.cells(cpu).values())
    assert {"nccl-w2", "nccl-w4", "nccl-w6", "gloo-w6"} <= set(ar.cells(gpu))
    assert ar.cells(gpu)["nccl-w6"]["device"] == "cuda"


def test_gloo_cell_on_cpu(tmp_path):
    record = run_cell(ar.NAME, "gloo-w2", CELL, tmp_path / "r.json")
    assert record["status"] == "ok", record["error"]
    sizes = record["data"]["sizes"]
    assert [s["bytes"] for s in sizes] == [10_000, 100_000] and all(s["correct"] for s in sizes)
    for s in sizes:
        assert len(s["times_s_per_rank"]) == 2 and all(len(t) == 3 for t in s["times_s_per_rank"])
        assert s["latency_s"] == [max(a, b) for a, b in zip(*s["times_s_per_rank"])]
    assert record["data"]["link"]["interconnect"] == "loopback TCP"


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this host has the GPUs")
def test_nccl_cell_without_gpus_is_recorded_not_run(tmp_path):
    cell = {**CELL, "device": "cuda", "backend": "nccl"}
    record = run_cell(ar.NAME, "nccl-w2", cell, tmp_path / "r.json")
    assert record["status"] == "not_run"
    assert record["error"].startswith("not run: needs 2 GPUs")
    assert load(tmp_path / "r.json")["status"] == "not_run"


def test_link_of_a_two_h200_host():
    link = json.loads(gzip.open(FIXTURES / "nccl-w2.json.gz").read())["data"]["link"]
    assert link_between(link["topology"], 0, 1) == "NV18"
    assert nvlink_peak(link["topology"], link["nvlink_status"]) == pytest.approx(18 * 26.562)
    assert nvlink_peak(link["topology"], None) == 18 * 25.0  # from the link count alone
    assert link_between("\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n", 0, 1) == "SYS"
    assert nvlink_peak("\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n", None) is None


def test_section_derives_bandwidth_from_raw_samples(tmp_path):
    records = [load(p) for p in sorted(FIXTURES.glob("*.json.gz"))]
    out = section.build(RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    size = [s for s in records[0]["data"]["sizes"] if s["size_mb"] == 1000][0]
    latency = statistics.median(max(call) for call in zip(*size["times_s_per_rank"]))
    busbw = size["bytes"] / latency / 1e9  # two ranks: 2(n-1)/n = 1
    largest = out["analysis"]["backends"]["nccl"]["largest"][0]
    assert largest["busbw"] == f"{busbw:.0f} GB/s"
    assert largest["of_peak"] == f"{100 * busbw / (18 * 26.562):.1f} %"
    assert out["analysis"]["not_run"][0]["n"] == 4 and "needs 4 GPUs" in out["analysis"]["not_run"][0]["why"]
    assert out["figures"] and (tmp_path / "distributed_communication_single_node.png").exists()
    assert [c.text for c in out["table"].rows[-1][:3]] == ["nccl", "4", "not run"]
    # the record checks one untimed all-reduce per size; the evidence says that, not that every call was checked
    render_report([str(p) for p in sorted(FIXTURES.glob("*.json.gz"))], {"_device": "cuda", "_grid": "gpu"},
                  tmp_path / "r", draw=False)
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    assert "one untimed all-reduce before the timed ones was checked" in evidence
    assert "every all-reduce's result was checked" not in evidence


def test_caption_and_note_name_only_the_lines_and_link_that_exist(tmp_path):
    """On one GPU only the Gloo cells ran: the caption names the dashed Gloo lines alone, and the table
    does not define "of the link" against an NVLink no cell measured."""
    gpu = [load(p) for p in sorted(FIXTURES.glob("*.json.gz"))]
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gloo").mkdir()
    full = section.build(RenderContext(gpu, RenderSettings.from_config({"_device": "cuda"}), tmp_path / "gpu"))
    assert {"solid: NCCL on GPUs", "dotted: the NVLink bandwidth per direction"} <= set(
        full["figures"][0].caption.rstrip(".").split("; "))
    assert "over the NVLink bandwidth per direction" in full["table"].note
    assert "read once for the host" in full["table"].note  # the pair read is not always the cell's own
    record = run_cell("distributed_communication_single_node", "gloo-w2", CELL, tmp_path / "gloo.json")
    assert record["status"] == "ok"
    gloo = section.build(RenderContext([load(tmp_path / "gloo.json")], RenderSettings.from_config({"_device": "cuda"}), tmp_path / "gloo"))
    caption = gloo["figures"][0].caption
    assert "dashed: Gloo on CPUs" in caption and "NCCL" not in caption and "NVLink" not in caption
    assert "over the NVLink bandwidth" not in gloo["table"].note and "none measured" in gloo["table"].note
