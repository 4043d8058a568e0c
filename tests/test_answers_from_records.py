"""Sentences of the published answers that the records and the accounting answer without a new run:
each figure recomputed here from the records it comes from, apart from the code that rendered it."""

import math
import re
import statistics

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
    assert (f"move {fmt_bytes(moved)} a forward pass, {sig(moved / probe / 1e6)} ms at the card's measured "
            f"{sig(probe)} GB/s, against {sig(measured / 1e6)} ms measured") in text
    assert moved / (probe * 1e9) < measured / 1e9  # the kernels take longer than their traffic at the copy rate


def test_memory_profiling_quotes_one_peak_per_quantity():
    """(a) and (b) quote the counter's peak allocated only; the snapshot's requested peak of the same
    moment (a different figure) stays in the evidence."""
    records("memory_profiling_parse")  # skips without the published folder
    cells = {mode: load(DATA / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx512-{mode}.json.gz")["data"]
             for mode in ("forward", "train_step")}
    text = answer("memory_profiling", "a") + answer("memory_profiling", "b")
    for data in cells.values():
        allocated, requested = data["capture"]["peak_memory"]["allocated_bytes"], data["snapshot"]["peak"]["bytes"]
        assert fmt_bytes(allocated) != fmt_bytes(requested)  # two figures for one peak, as the records have it
        assert fmt_bytes(allocated) in text and fmt_bytes(requested) not in text
    assert f"to a peak allocated of {fmt_bytes(cells['forward']['capture']['peak_memory']['allocated_bytes'])}" in text
    assert "snapshot peak" not in answer("memory_profiling")


def test_memory_profiling_b_gives_the_inference_forward_pass():
    """(b)'s table has the handout's inference forward pass (no_grad) beside the autograd-on one, each
    context's figure from its own record, and the text sets the two growths side by side."""
    peak = {}
    for r in records("memory_profiling_parse"):
        c = r["config"]
        if c["implementation"] == "naive" and c["precision"] == "fp32":
            mode = "forward_no_grad" if c.get("grad") == "no_grad" else c["mode"]
            peak[(mode, c["context"])] = r["data"]["capture"]["peak_memory"]["allocated_bytes"]
    text = answer("memory_profiling", "b")
    head = "| context | forward pass, inference (no\\_grad) | forward pass, autograd on | full training step |"
    assert head in text
    contexts = sorted({c for _, c in peak})
    for c in contexts:
        row = f"| {c} | " + " | ".join(fmt_bytes(peak[(m, c)]) for m in ("forward_no_grad", "forward", "train_step"))
        assert row in text
    lo, hi = contexts[0], contexts[-1]
    nograd = peak[("forward_no_grad", hi)] - peak[("forward_no_grad", lo)]
    grad = peak[("forward", hi)] - peak[("forward", lo)]
    assert nograd < grad / 10  # without autograd no layer keeps its activations
    assert f"From context {lo} to {hi} the inference forward pass's peak allocated grows by only {fmt_bytes(nograd)}" \
        in text
    assert f"With autograd on it grows by {fmt_bytes(grad)}" in text


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


def _slowest_steps(record: dict) -> list[float]:
    """A DDP cell's per-step times of its first run: the slowest rank's, step by step."""
    ranks = record["data"]["ranks"]
    return [max(rank["measured"][i]["step"] for rank in ranks) for i in range(len(ranks[0]["measured"]))]


def _phase_median(record: dict, phase: str) -> float:
    """A DDP cell's median of one phase; over fresh-process repeats, the median of the runs' medians."""
    runs = (record["data"].get("repeats") or {}).get("runs") or []
    if len(runs) > 1:
        return statistics.median(r["stats_s"][phase]["median"] for r in runs)
    return record["data"]["stats_s"][phase]["median"]


def _link_rates(world: int) -> tuple[float, float]:
    """(w bytes/s at the largest size, o s: the smallest size's time less its bytes at w) of NCCL."""
    rec = next(r for r in records("distributed_communication_single_node")
               if r["config"]["backend"] == "nccl" and r["config"]["world_size"] == world)
    sizes = sorted(rec["data"]["sizes"], key=lambda s: s["bytes"])
    w = sizes[-1]["bytes"] / sizes[-1]["latency_stats_s"]["median"]
    return w, sizes[0]["latency_stats_s"]["median"] - sizes[0]["bytes"] / w


def test_ddp_bucketed_a_states_ties_within_the_noise_and_backward_as_the_cause():
    timed = [r for r in records("ddp_bucketed_benchmarking") + records("ddp_overlap_individual_parameters_benchmarking")
             if r["status"] == "ok"]
    noise = math.sqrt(statistics.mean(statistics.stdev(_slowest_steps(r)) ** 2 for r in timed))
    text = answer("ddp_bucketed_benchmarking", "a")
    assert f"Steps closer than {sig(noise * 1e3)} ms are a tie" in text
    naive = next(r for r in timed if r["config"]["variant"] == "naive")
    naive_backward = sig(_phase_median(naive, "backward") * 1e3)
    assert f"with no all-reduce beside it (naive DDP) backward takes {naive_backward} ms" in text
    slower = 0
    for r in timed:
        if r["config"]["variant"] != "bucketed":
            continue
        size = sig(r["config"]["bucket_size_mb"])
        assert f"{sig(_phase_median(r, 'backward') * 1e3)} ms with {size} MiB buckets" in text
        is_slower = _phase_median(r, "step") - _phase_median(naive, "step") > noise
        assert (f"{size} MiB buckets are slower than naive DDP" in text) is is_slower, size
        slower += is_slower
    assert slower  # the records hold a bucket size slower than naive DDP beyond the noise


def test_ddp_bucketed_b_takes_o_and_w_from_the_all_reduce_records():
    bucketed = [r for r in records("ddp_bucketed_benchmarking")
                if r["status"] == "ok" and r["config"]["variant"] == "bucketed"]
    w, o = _link_rates(bucketed[0]["config"]["world_size"])
    s = bucketed[0]["data"]["grad_bytes"]
    n = math.sqrt(s / (w * o))
    text = answer("ddp_bucketed_benchmarking", "b")
    assert "overhead(n_b) = n_b·o + s/(n_b·w)" in text and "b* = s/n_b* = √(s·w·o)" in text
    assert f"Then n_b* = {sig(n)} buckets of b* = {sig(s / n / 2**20)} MiB" in text
    calls = [r["data"]["allreduce_calls"] for r in bucketed]
    measured = [_phase_median(r, "sync") for r in bucketed]
    predicted = [c * o + s / (c * w) for c in calls]
    error = math.sqrt(statistics.mean((p - m) ** 2 for p, m in zip(predicted, measured)))
    assert (f"an error of {sig(error * 1e3)} ms (root-mean-square) beside measured times of "
            f"{sig(min(measured) * 1e3)} ms to {sig(max(measured) * 1e3)} ms") in text
    for c, p in zip(calls, predicted):
        assert f"{sig(p * 1e3)} ms for {c} (" in text


def test_ddp_overlap_b_gives_hidden_communication_as_transfer_time():
    profiles = [r for r in records("ddp_overlap_profile") if r["status"] == "ok"]
    timed = next(r for r in records("ddp_overlap_individual_parameters_benchmarking") if r["status"] == "ok")
    w, _ = _link_rates(timed["config"]["world_size"])
    transfer = timed["data"]["grad_bytes"] / w
    text = answer("ddp_overlap_individual_parameters_benchmarking", "b")
    assert f"take {sig(transfer * 1e3)} ms at the {sig(w / 1e9)} GB/s" in text
    naive_seen = False
    for r in profiles:
        exposed = r["data"]["ranks"]["0"]["overlap"]["exposed_us"] / 1e6
        hidden = max(0.0, transfer - exposed)
        if hidden == 0:
            naive_seen |= r["config"]["variant"] == "naive"
            assert f"none ({sig(exposed * 1e3)} ms exposed)" in text
        else:
            assert f"{sig(hidden * 1e3)} ms ({sig(100 * hidden / transfer)} %; {sig(exposed * 1e3)} ms exposed)" in text
    assert naive_seen  # naive DDP all-reduces after backward: nothing of it runs beside compute


def test_benchmarking_script_names_the_impossible_orderings():
    by_cell = {}
    for r in records("benchmarking"):
        if r["status"] == "ok":
            c = r["config"]
            by_cell.setdefault((c["size"], c["context"], c["precision"]), {})[c["mode"]] = r
    pairs = [(key, m) for key, m in by_cell.items() if {"forward_backward", "train_step"} <= set(m)
             and m["train_step"]["data"]["stats_s"]["median"] < m["forward_backward"]["data"]["stats_s"]["median"]]
    assert pairs
    host_bound = all(any(m[k]["data"]["host"]["host_bound"] for k in ("forward_backward", "train_step"))
                     for _, m in pairs)
    text = answer("benchmarking_script", "b")
    names = [f"{size} {context}" for (size, context, _), _ in pairs]
    assert any(f"{len(pairs)}{' host-bound' if host_bound else ''} pairs ({', '.join(order)}) time train steps "
               "below forward + backward: impossible" in text for order in (names, sorted(names)))


def _attention_at(seq: int) -> dict[int, dict]:
    return {r["config"]["d_head"]: r for r in records("pytorch_attention")
            if r["config"]["implementation"] == "naive" and r["config"]["seq"] == seq}


def test_pytorch_attention_explains_the_forward_passes_that_ran_out():
    """The out-of-memory cells that stopped in the forward pass are explained from their error text
    (what the allocator held) against the cells that got through it, in T×T matrices."""
    from cs336report.parsers.oom import fragmented, oom_bytes
    ooms = [r for r in records("pytorch_attention") if r["config"]["implementation"] == "naive" and r["status"] == "oom"]
    if not ooms:
        pytest.skip("no naive cell ran out of memory")
    seq = min(r["config"]["seq"] for r in ooms)
    at = {d: r for d, r in _attention_at(seq).items() if r["status"] == "oom"}
    stopped = {d: r for d, r in at.items() if "forward" in r["data"]["oom_phase"]}
    through = {d: r for d, r in at.items() if d not in stopped}
    text = answer("pytorch_attention")
    if not stopped or not through:
        assert "ran out in the forward pass, asking" not in text
        return
    matrix = through[min(through)]["data"]["matrix_bytes"]
    k = max(r["data"]["forward_peak"]["allocated_bytes"] for r in through.values()) / matrix
    assert 3.5 < k < 4.5  # scores, exponentials, probabilities and one more at once
    assert f"At seq {seq} the forward pass peaks at {sig(k, 2)} T×T matrices, {fmt_bytes(4 * matrix)}" in text
    ds = " and ".join(str(d) for d in sorted(through))
    peaks = ", ".join(fmt_bytes(through[d]["data"]["forward_peak"]["allocated_bytes"]) for d in sorted(through))
    assert f"d_head {ds} got through it (forward peak allocated {peaks}) and ran out in backward" in text
    sizes = [oom_bytes(stopped[d]["error"]) for d in sorted(stopped)]
    assert all(fragmented(s) for s in sizes)  # the allocator held the request's size, not in one block
    assert all(round(s["requested"] / matrix) == 1 and s["allocated"] // matrix == 3 for s in sizes)
    allocated = ", ".join(fmt_bytes(s["allocated"]) for s in sizes)
    ds = " and ".join(str(d) for d in sorted(stopped))
    assert f"With d_head {ds} it ran out asking for the fourth ({fmt_bytes(sizes[0]['requested'])}) " \
           f"with {allocated} allocated" in text
    assert f"the allocator held {fmt_bytes(sizes[0]['unallocated'])} reserved but unallocated in no block that " \
           "long" in text
    free = ", ".join(fmt_bytes(s["free"]) for s in sizes)
    assert f"and the card {free} free (fragmentation)" in text


def test_pytorch_attention_predicts_where_an_80_gb_card_runs_out():
    """From the longest seq that ran, its peak in T×T matrices sets the longest seq an 80 GB card holds."""
    at = {}
    for r in records("pytorch_attention"):
        if r["config"]["implementation"] == "naive" and r["status"] == "ok":
            at[r["config"]["seq"]] = at.get(r["config"]["seq"], []) + [r]
    seq = max(at)
    cell = min(at[seq], key=lambda r: r["config"]["d_head"])  # the accounting's head size: the smallest
    k = cell["data"]["peak"]["allocated_bytes"] / cell["data"]["matrix_bytes"]
    per_t2 = cell["data"]["matrix_bytes"] / seq**2
    fits = math.sqrt(H100 / (k * per_t2))
    first = min(s for s in {r["config"]["seq"] for r in records("pytorch_attention")} | {2 * seq} if s > fits)
    text = answer("pytorch_attention")
    assert (f"The peak allocated measured at seq {seq}, d_head {cell['config']['d_head']}, is {sig(k, 3)} T×T "
            f"matrices, so an 80 GB card holds seqs up to about {int(fits) // 100 * 100:,} at batch "
            f"{cell['config']['batch_size']}" in text)
    assert f"and runs out first at seq {first} of this grid ({fmt_bytes(k * per_t2 * first**2)})" in text


def _flash_passes(implementation: str, dtype: str) -> dict[tuple[int, int], dict]:
    r = next((r for r in records("flash_benchmarking") if r["config"]["implementation"] == implementation
              and r["config"]["dtype"] == dtype and r["status"] == "ok"), None)
    if r is None:
        pytest.skip(f"no {implementation} {dtype} record")
    return {(s["d"], s["seq"]): s["passes"] for s in r["data"]["shapes"]}


def test_flash_benchmarking_gives_the_kernels_time_where_the_call_is_host_overhead():
    """At the shortest seq do_bench's forward + backward is not the sum of its parts, the kernels' is;
    over every host-bound shape (kernels under half of do_bench's time) the kernels' sum holds."""
    host, gaps = [], []
    for dtype in ("bf16", "fp32"):
        for (d, seq), p in _flash_passes("triton", dtype).items():
            if all(p[x]["status"] == "ok" and p[x].get("kernel_s") for x in ("forward", "backward", "forward_backward")):
                fb = p["forward_backward"]
                if fb["kernel_s"] < 0.5 * fb["stats_s"]["median"]:
                    host.append((dtype, d, seq))
                    gaps.append(abs(fb["kernel_s"] / (p["forward"]["kernel_s"] + p["backward"]["kernel_s"]) - 1))
    first = min(s for dt, d, s in host if dt == "bf16" and d == 64)
    p = _flash_passes("triton", "bf16")[(64, first)]
    bench = {x: p[x]["stats_s"]["median"] for x in p}
    kernels = {x: p[x]["kernel_s"] for x in p}
    assert abs(bench["forward_backward"] / (bench["forward"] + bench["backward"]) - 1) > 0.1  # not the sum
    text = answer("flash_benchmarking")
    assert (f"at seq {first} (d_head 64, bf16) do_bench gives Triton FA2 {sig(bench['forward'] * 1e3)} ms forward, "
            f"{sig(bench['backward'] * 1e3)} backward and {sig(bench['forward_backward'] * 1e3)} forward + backward, "
            f"while its kernels take {sig(kernels['forward'] * 1e6)}, {sig(kernels['backward'] * 1e6)} and "
            f"{sig(kernels['forward_backward'] * 1e6)} µs") in text
    assert max(gaps) < 0.1
    assert (f"forward + backward is the sum of the two within {100 * max(gaps):.0f} % in all {len(host)} "
            "host-bound shapes") in text


def test_flash_benchmarking_gives_the_kernels_rate_at_the_longest_seq():
    """TFLOP/s of forward + backward at the longest seq, d_head 64: the records' FLOPs (the causal count,
    2·B·T²·d forward and 2.5× that backward) over the kernels' time."""
    text = answer("flash_benchmarking")
    rates = {}
    for impl in ("triton", "naive"):
        for dtype in ("bf16", "fp32"):
            passes = _flash_passes(impl, dtype)
            seq = max(s for d, s in passes if d == 64 and passes[(d, s)]["forward_backward"]["status"] == "ok")
            p = passes[(64, seq)]
            assert p["forward"]["flops"] == 2 * seq**2 * 64 and p["backward"]["flops"] == 2.5 * p["forward"]["flops"]
            fb = p["forward_backward"]
            rates[(impl, dtype)] = (seq, fb["flops"] / fb["kernel_s"] / 1e12)
    seq = rates[("triton", "bf16")][0]
    assert (f"At seq {seq} (d_head 64) the kernels run forward + backward at {sig(rates[('triton', 'bf16')][1])} "
            f"TFLOP/s in bf16 and {sig(rates[('triton', 'fp32')][1])} in fp32 for Triton FA2, "
            f"{sig(rates[('naive', 'bf16')][1])} and {sig(rates[('naive', 'fp32')][1])} for the naive attention, "
            "counting causal matmul FLOPs for both") in text
    assert rates[("triton", "bf16")][1] > 10 * rates[("naive", "bf16")][1]
