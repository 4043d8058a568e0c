"""Generated nsys stats exports (Hypothesis): every table gives the numbers it holds, and every damaged one
an error naming the file and line; parse-nsys never ends in a traceback."""

import contextlib
import csv
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cs336report.cli import main
from cs336report.parsers.nsys import NsysParseError, parse_exports, parse_file

SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
KERN = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
        "Name"]
NVTX = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
        "Style", "Range"]
NK = ["NVTX Range", "Style", "PID", "TID", "NVTX Inst", "Kern Inst", "Total Time (ns)", "Avg (ns)", "Med (ns)",
      "Min (ns)", "Max (ns)", "StdDev (ns)", "Kernel Name"]
RANGES = ("step", "forward", "backward", "optimizer_step", "attention_scores", "softmax", "attention_value", "warmup")

# Names as exports hold them: templates with commas, quotes, spaces, non-ASCII letters; no line ends.
names = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40).map(str.strip).filter(bool)
counts = st.integers(min_value=1, max_value=10**6)
totals = st.integers(min_value=0, max_value=10**13)


@st.composite
def kernel_rows(draw, min_size=0):
    rows = draw(st.lists(st.tuples(names, totals, counts), min_size=min_size, max_size=25,
                         unique_by=lambda r: r[0]))
    return [[0.0, total, n, total / n, total / n, total // n, total // n, 0.0, name] for name, total, n in rows]


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def text_table(rows: list[list]) -> str:
    """The fixed-width text nsys prints, numbers with thousands separators."""
    header = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Name"]
    cells = [[f"{r[0]:.1f}", f"{r[1]:,}", f"{r[2]:,}", f"{r[3]:,.1f}", r[8]] for r in rows]
    widths = [max([len(h)] + [len(c[k]) for c in cells]) for k, h in enumerate(header)]
    line = lambda cs: "  ".join(c.rjust(w) if k < 4 else c for k, (c, w) in enumerate(zip(cs, widths)))  # noqa: E731
    body = [line(header), "  ".join("-" * w for w in widths)] + [line(c) for c in cells]
    return " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n" + "\n".join(body) + "\n"


@SETTINGS
@given(rows=kernel_rows(), encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le"]))
# a name whose characters put NULs in the even bytes of UTF-16-LE without a byte-order mark
@example(rows=[[0.0, 0, 1, 0.0, 0.0, 0, 0, 0.0, "\u0100" * 7 + "\U00010000" * 3]], encoding="utf-16-le")
def test_a_kernel_export_gives_its_names_and_numbers(rows, encoding):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stats_cuda_gpu_kern_sum.csv"
        write_csv(path, KERN, rows)
        if encoding != "utf-8":
            path.write_bytes(path.read_text(encoding="utf-8").encode(encoding))
        frame = parse_file(path)["cuda_gpu_kern_sum"]
    assert frame["name"].tolist() == [r[8] for r in rows]
    assert frame["total_ns"].tolist() == [float(r[1]) for r in rows]
    assert frame["instances"].tolist() == [float(r[2]) for r in rows]


@SETTINGS
@given(rows=kernel_rows(min_size=1).filter(lambda rs: all("\t" not in r[8] for r in rs)))
def test_a_text_table_gives_its_names_and_numbers(rows):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stats.txt"
        path.write_text(text_table(rows), encoding="utf-8")
        frame = parse_file(path)["cuda_gpu_kern_sum"]
    assert frame["name"].tolist() == [r[8] for r in rows]
    assert frame["total_ns"].tolist() == [float(r[1]) for r in rows]
    assert frame["instances"].tolist() == [float(r[2]) for r in rows]


damage = st.one_of(
    st.tuples(st.just("blank"), st.integers(0, 10**6), st.integers(0, 8)),  # a cell emptied
    st.tuples(st.just("cut"), st.integers(0, 10**6)),  # the file cut at a byte
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.text(max_size=30)),  # a line of anything
    st.tuples(st.just("cell"), st.integers(0, 10**6), st.integers(0, 8),
              st.sampled_from(["-1", "nan", "inf", "x", "1e999", "0x10", "1,5", "", "12%", "3.5"])),
    st.tuples(st.just("bytes"), st.binary(max_size=64)),  # not text at all
)


def damaged(path: Path, rows: list[list], how: tuple) -> None:
    kind = how[0]
    if kind in ("blank", "cell") and rows:
        row = rows[how[1] % len(rows)]
        row[how[2]] = "" if kind == "blank" else how[3]
    write_csv(path, KERN, rows)
    data = path.read_bytes()
    if kind == "cut":
        path.write_bytes(data[:how[1] % (len(data) + 1)])
    elif kind == "insert":
        lines = data.decode().split("\n")
        lines.insert(how[1] % len(lines), how[2].replace("\r", ""))
        path.write_text("\n".join(lines), encoding="utf-8")
    elif kind == "bytes":
        path.write_bytes(how[1])


@SETTINGS
@given(rows=kernel_rows(min_size=1), how=damage)
def test_a_damaged_kernel_export_gives_its_numbers_or_an_error_naming_it(rows, how):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stats_cuda_gpu_kern_sum.csv"
        damaged(path, rows, how)
        try:
            frames = parse_file(path)
        except NsysParseError as exc:
            assert exc.source == str(path) and exc.line >= 1 and str(path) in str(exc)
            return
    for frame in frames.values():  # what was read is numbers the file holds: no NaN in a count or a total
        if len(frame) and frame.attrs["report"] == "cuda_gpu_kern_sum":
            assert frame["total_ns"].ge(0).all() and frame["instances"].ge(0).all()
            assert (frame["instances"] % 1 == 0).all()


@st.composite
def profiles(draw):
    """The four exports of a profiled train step: kernels, each in a phase, and the ranges."""
    kernels = draw(kernel_rows())
    phases = draw(st.lists(st.sampled_from(RANGES[1:7]), min_size=len(kernels), max_size=len(kernels)))
    instances = {r: draw(st.integers(0, 60)) for r in RANGES}
    nvtx = [[0.0, draw(totals), n, 1.0, 1.0, 1, 1, 0.0, "PushPop", f":{r}"] for r, n in instances.items() if n]
    nk = []
    for k, phase in zip(kernels, phases):
        stats = [k[2], k[1], *k[3:8]]
        if phase == "backward":
            nk.append(["", "", 1, 2, 0, *stats, k[8]])
            continue
        for rng in ("step", "optimizer_step" if phase == "optimizer_step" else "forward", phase):
            nk.append([f":{rng}", "PushPop", 1, 1, instances[rng], *stats, k[8]])
    api = [[100.0, sum(k[1] for k in kernels), max(1, sum(k[2] for k in kernels)), 1.0, 1.0, 1, 1, 0.0,
            "cudaLaunchKernel"]]
    return kernels, nvtx, nk, api


@SETTINGS
@given(profile=profiles(), how=st.one_of(st.none(), damage), which=st.sampled_from(["kern", "nvtx", "nk"]),
       batch=st.one_of(st.none(), st.integers(-2, 64)))
def test_parse_nsys_writes_a_record_or_names_the_file_never_a_traceback(profile, how, which, batch):
    kernels, nvtx, nk, api = profile
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "naive-fp32-small-ctx128-train_step"
        folder.mkdir()
        write_csv(folder / "stats_cuda_gpu_kern_sum.csv", KERN, kernels)
        write_csv(folder / "stats_nvtx_sum.csv", NVTX, nvtx)
        write_csv(folder / "stats_nvtx_kern_sum.csv", NK, nk)
        write_csv(folder / "stats_cuda_api_sum.csv", KERN, api)
        if how is not None:
            path = folder / {"kern": "stats_cuda_gpu_kern_sum.csv", "nvtx": "stats_nvtx_sum.csv",
                             "nk": "stats_nvtx_kern_sum.csv"}[which]
            damaged(path, kernels if which == "kern" else [], how) if which == "kern" else \
                _damage_other(path, how)
        out = Path(tmp) / "record.json"
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["parse-nsys", str(folder / "stats"), "--out", str(out)]
                        + ([] if batch is None else ["--batch-size", str(batch)]))
        if code == 2:
            message = err.getvalue()
            assert message.startswith("error: ") and "Traceback" not in message
            assert str(folder) in message or "--batch-size" in message
            assert not out.exists()
            return
        assert code == 0
        record = json.loads(out.read_text())
        if how is None and kernels:
            total = parse_exports(folder / "stats")["cuda_gpu_kern_sum"]["total_ns"].sum()
            rows = record["data"]["kernels"]["rows"]
            step = sum(t for r, t in zip(rows["range"], rows["total_ns"]) if r == "step" and t is not None)
            assert step <= total * (1 + 1e-9)  # the measured steps hold no more kernel time than the export


def _damage_other(path: Path, how: tuple) -> None:
    """Damage a range export as damaged() does a kernel export (its rows are kept as written)."""
    data = path.read_bytes()
    kind = how[0]
    lines = data.decode().split("\n")
    if kind in ("blank", "cell") and len(lines) > 2:
        n = 1 + how[1] % (len(lines) - 2)
        fields = next(csv.reader([lines[n]]))
        fields[how[2] % len(fields)] = "" if kind == "blank" else how[3]
        buf = io.StringIO()
        csv.writer(buf, lineterminator="").writerow(fields)
        lines[n] = buf.getvalue()
        path.write_text("\n".join(lines), encoding="utf-8")
    elif kind == "cut":
        path.write_bytes(data[:how[1] % (len(data) + 1)])
    elif kind == "insert":
        lines.insert(how[1] % len(lines), how[2].replace("\r", ""))
        path.write_text("\n".join(lines), encoding="utf-8")
    elif kind == "bytes":
        path.write_bytes(how[1])
