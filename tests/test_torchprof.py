"""torch.profiler traces summarised in nsys's layout (cs336report.parsers.torchprof)."""

import gzip
import json

import pytest

from cs336report.parsers import nsys, torchprof
from cs336report.parsers.kernels import classify


def _x(cat, name, tid, ts, dur, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


# Two measured steps on the main thread (tid 1); the backward kernels are launched by another
# thread (tid 2, outside every range), and one kernel after the steps, outside every range.
STEPS = [(0, 1), (1000, 2)]
KERNELS = {  # correlation: (launching tid, launch time µs, kernel, duration µs)
    1: (1, 20, "gemm_fwd", 100), 2: (1, 30, "elementwise_fwd", 10), 3: (1, 510, "adam_update", 50),
    4: (1, 1020, "gemm_fwd", 110), 5: (1, 1030, "elementwise_fwd", 12), 6: (1, 1510, "adam_update", 52),
    7: (2, 420, "gemm_bwd", 200), 8: (2, 1420, "gemm_bwd", 210), 9: (1, 2500, "init_fill", 5),
}


def cuda_trace() -> dict:
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for start, _ in STEPS:
        events += [_x("user_annotation", "step", 1, start, 1000), _x("user_annotation", "forward", 1, start + 10, 390),
                   _x("user_annotation", "backward", 1, start + 400, 50),
                   _x("user_annotation", "optimizer_step", 1, start + 500, 400)]
    for corr, (tid, ts, name, dur) in KERNELS.items():
        events.append(_x("cuda_runtime", "cudaLaunchKernel", tid, ts, 3, correlation=corr))
        events.append(_x("kernel", name, 7, ts + 5, dur, pid=0, correlation=corr))
    return {"traceEvents": events}


def test_cuda_kernels_are_summed_per_name():
    frames = torchprof.stats_from_trace(cuda_trace())
    kern = frames["cuda_gpu_kern_sum"].set_index("name")
    for name in {k[2] for k in KERNELS.values()}:
        durs = [k[3] * 1000 for k in KERNELS.values() if k[2] == name]
        assert kern.loc[name, "instances"] == len(durs)
        assert kern.loc[name, "total_ns"] == sum(durs)
        assert kern.loc[name, "min_ns"] == min(durs) and kern.loc[name, "max_ns"] == max(durs)
    assert kern["time_pct"].sum() == pytest.approx(100)
    assert torchprof.activity(cuda_trace()) == "cuda"


def test_ranges_and_kernels_per_range_follow_the_launching_thread():
    frames = torchprof.stats_from_trace(cuda_trace())
    ranges = frames["nvtx_sum"].set_index("range")
    assert ranges.loc["step", "instances"] == len(STEPS)
    assert ranges.loc["step", "total_ns"] == 1000 * 1000 * len(STEPS)
    nk = frames["nvtx_kern_sum"]
    rows = {(r, n): (i, t) for r, n, i, t in zip(nk["range"], nk["name"], nk["instances"], nk["total_ns"])}
    assert rows[("forward", "gemm_fwd")] == (2, (100 + 110) * 1000)
    assert rows[("step", "gemm_fwd")] == (2, (100 + 110) * 1000)
    assert rows[("optimizer_step", "adam_update")] == (2, (50 + 52) * 1000)
    # launched by the other thread: in no range, although a main-thread range was open at the time
    assert rows[("", "gemm_bwd")] == (2, (200 + 210) * 1000)
    assert ("backward", "gemm_bwd") not in rows and ("step", "gemm_bwd") not in rows
    assert rows[("", "init_fill")] == (1, 5000)
    assert set(nk.loc[nk["name"] == "gemm_bwd", "tid"]) == {2}
    step_inst = nk.loc[nk["range"] == "step", "nvtx_instances"]
    assert set(step_inst) == {len(STEPS)}


def test_cpu_trace_uses_the_self_time_of_operators():
    events = [
        _x("user_annotation", "step", 1, 0, 300),
        _x("cpu_op", "aten::einsum", 1, 5, 100), _x("cpu_op", "aten::bmm", 1, 10, 50),
        _x("cpu_op", "aten::resolve_conj", 1, 12, 4), _x("cpu_op", "aten::permute", 1, 60, 10),
        _x("cpu_op", "aten::as_strided", 1, 62, 2), _x("cpu_op", "aten::add", 1, 120, 10),
        _x("cpu_op", "aten::add", 2, 130, 7),
    ]
    trace = {"traceEvents": events}
    assert torchprof.activity(trace) == "cpu"
    frames = torchprof.stats_from_trace(trace)
    kern = frames["cuda_gpu_kern_sum"].set_index("name")
    self_us = {"aten::einsum": 100 - 50 - 10, "aten::bmm": 50 - 4, "aten::resolve_conj": 4,
               "aten::permute": 10 - 2, "aten::as_strided": 2, "aten::add": 10 + 7}
    assert kern["total_ns"].to_dict() == {name: us * 1000 for name, us in self_us.items()}
    # the self times add up to the time spent in the outermost operators
    assert kern["total_ns"].sum() == (100 + 10 + 7) * 1000
    nk = frames["nvtx_kern_sum"]
    assert nk.loc[(nk["range"] == "") & (nk["name"] == "aten::add"), "tid"].tolist() == [2]


def test_exports_round_trip_through_the_nsys_parser(tmp_path):
    frames = torchprof.stats_from_trace(cuda_trace())
    written = torchprof.write_exports(frames, tmp_path / "stats")
    assert sorted(p.name for p in written) == ["stats_cuda_gpu_kern_sum.csv", "stats_nvtx_kern_sum.csv",
                                               "stats_nvtx_sum.csv"]
    back = nsys.parse_exports(tmp_path / "stats")
    for report, frame in frames.items():
        parsed = back[report]
        assert len(parsed) == len(frame)
        for col in ("total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns"):
            assert sorted(parsed[col]) == pytest.approx(sorted(frame[col]))
    assert set(back["nvtx_kern_sum"]["range"]) == {"", "step", "forward", "optimizer_step"}


def test_load_trace_reads_gzip_and_rejects_other_json(tmp_path):
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(cuda_trace(), fh)
    assert len(torchprof.load_trace(path)["traceEvents"]) == len(cuda_trace()["traceEvents"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a trace"}')
    with pytest.raises(torchprof.TraceError, match="traceEvents"):
        torchprof.load_trace(bad)


@pytest.mark.parametrize("name, expected", [
    ("aten::mm", "gemm"), ("aten::bmm", "gemm"), ("aten::addmm", "gemm"), ("aten::_softmax", "softmax"),
    ("aten::_log_softmax_backward_data", "softmax"), ("aten::_foreach_mul_", "optimizer"),
    ("aten::_fused_adamw_", "optimizer"), ("aten::copy_", "copy/memset"), ("aten::fill_", "copy/memset"),
    ("aten::sum", "reduction"), ("aten::amax", "reduction"), ("aten::mul", "elementwise"),
    ("aten::exp", "elementwise"), ("aten::where", "elementwise"), ("aten::empty", "other"),
    ("aten::as_strided", "other"), ("aten::_local_scalar_dense", "other"),
])
def test_pytorch_operator_names_are_classified(name, expected):
    assert classify(name) == expected
