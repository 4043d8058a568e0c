"""Sentences of the published answers that the records and the accounting answer without a new run:
each figure recomputed here from the records it comes from, apart from the code that rendered it."""

import re

import pytest

from conftest import REPO
from cs336report.records.store import load
from cs336report.report.tables import fmt_bytes, sig

DATA = REPO / "report" / "data"
H100 = 80e9  # the handout's card, in bytes


def answer(problem: str, part: str | None = None) -> str:
    """A problem's (or sub-question's) text in the published answers, links replaced by their text."""
    md = re.sub(r"\[([^\]]*)\]\([^)\s]*\)", r"\1", (REPO / "report" / "answers.md").read_text())
    block = md.split(f'<a id="{problem}"></a>', 1)[1].split("\n## ", 2)[1]
    if part:
        block = block.split(f'<a id="{problem}-{part}"></a>', 1)[1].split("<a id=", 1)[0]
    return block


def records(experiment: str) -> list[dict]:
    folder = DATA / experiment
    if not folder.exists():
        pytest.skip("no published records")
    return [load(p) for p in sorted(folder.glob("*.json.gz"))]


def test_nsys_profile_a_gives_the_forward_time_in_ms():
    forward = {(r["config"]["size"], r["config"]["context"]): r["data"]["ranges"]["forward"]["med_ns"]
               for r in records("nsys_profile") if r["status"] == "ok"}
    (size, context), ns = max(forward.items(), key=lambda kv: kv[1])
    assert f"It takes {sig(min(forward.values()) / 1e6)} ms in" in answer("nsys_profile", "a")
    assert f"to {sig(ns / 1e6)} ms in {size} at context {context} under the profiler" in answer("nsys_profile", "a")


def test_nsys_profile_e_sets_the_softmax_bytes_over_the_measured_bandwidth():
    probe = records("roofline")[0]["data"]["copy"]["gb_per_s"]
    text = answer("nsys_profile", "e")
    m = re.search(r"In (\S+) at context (\d+) its (\d+) reads and (\d+) writes", text)
    assert m, text
    cell = next(r for r in records("nsys_profile")
                if r["config"]["size"] == m[1] and r["config"]["context"] == int(m[2]))
    c, model = cell["config"], cell["config"]["model"]
    soft = [k for k in cell["data"]["kernels"] if k["range"] == "softmax"]
    layers = model["num_layers"]
    reads = sum(k["per_step_instances"] for k in soft) / layers
    writes = sum(k["per_step_instances"] for k in soft if k["class"] != "reduction") / layers
    assert (int(m[3]), int(m[4])) == (reads, writes)
    moved = (reads + writes) * layers * c["batch_size"] * model["num_heads"] * c["context"] ** 2 * 4
    measured = sum(k["per_step_ns"] for k in soft)
    assert (f"move {fmt_bytes(moved)} a forward pass, {sig(moved / probe / 1e6)} ms at this card's measured "
            f"{sig(probe)} GB/s, against {sig(measured / 1e6)} ms measured") in text
    assert moved / (probe * 1e9) < measured / 1e9  # the kernels take longer than their traffic at the copy rate


def test_memory_profiling_a_says_which_peak_is_which():
    text = answer("memory_profiling", "a")
    records("memory_profiling_parse")  # skips without the published folder
    peaks = {mode: load(DATA / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx512-{mode}.json.gz")
             ["data"]["capture"]["peak_memory"]["allocated_bytes"] for mode in ("forward", "train_step")}
    assert (f"(b)'s peak allocated, {fmt_bytes(peaks['forward'])} and "
            f"{fmt_bytes(peaks['train_step'])}, counts the allocator's rounded-up blocks") in text


def test_pytorch_attention_says_the_handouts_largest_size_fits_80_gb():
    at = [r for r in records("pytorch_attention")
          if r["config"]["implementation"] == "naive" and r["config"]["seq"] == 16384]
    assert at and all(r["status"] == "ok" for r in at)
    peak = max(r["data"]["peak"]["allocated_bytes"] - (r["data"].get("memory_baseline_bytes") or 0) for r in at)
    text = answer("pytorch_attention")
    assert f"Seq 16384, the handout's largest, has a peak allocated of {fmt_bytes(peak)}" in text
    assert f"{'within' if peak <= H100 else 'beyond'} an 80 GB H100's 74.5 GiB" in text


def test_benchmarking_script_names_the_cells_an_80_gb_card_would_not_hold():
    over = [r for r in records("benchmarking") if r["status"] == "ok"
            and r["data"]["peak_memory"]["allocated_bytes"] > H100 >= 0
            and r["provenance"]["gpu_memory_bytes"] > H100]
    text = answer("benchmarking_script", "b")
    if not over:
        assert "80 GB H100" not in text
        return
    peaks = [r["data"]["peak_memory"]["allocated_bytes"] for r in over]
    assert (f"had a peak allocated of {sig(min(peaks) / 1e9)} to {sig(max(peaks) / 1e9)} GB ({len(over)} cells)"
            in text)
    for size in {r["config"]["size"] for r in over}:
        assert f" {size} " in text.split("GB allocated")[0].rsplit("The ", 1)[1] + " "


def test_flash_benchmarking_states_its_settings():
    ok = [r for r in records("flash_benchmarking") if r["status"] == "ok"]
    batch = ", ".join(sorted({str(r["config"]["batch"]) for r in ok}))
    causal = "causal" if {r["config"]["causal"] for r in ok} == {True} else "not causal"
    timer = ", ".join(sorted({r["data"]["timer"] for r in ok}))
    assert f"Settings: batch {batch}, {causal}, `{timer}`" in answer("flash_benchmarking")
