"""nsys_profile records at scale: every kernel kept, as columns, and a large export parsed in bounded memory."""

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cs336report.cli import main
from cs336report.parsers.kernel_records import COLUMNS, kernel_frame, kernel_rows
from cs336report.parsers.nsys import parse_file
from cs336report.records.store import load

FIXTURES = Path(__file__).parent / "fixtures"
PUBLISHED = Path(__file__).parent.parent / "report" / "data" / "nsys_profile"


def make_large():
    spec = importlib.util.spec_from_file_location("make_large", FIXTURES / "nsys" / "make_large.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_record_keeps_every_kernel_once_by_name_and_its_rows_as_columns(tmp_path):
    prefix = make_large().write(500, tmp_path / "naive-fp32-small-ctx128-train_step")
    assert main(["parse-nsys", str(prefix), "--out", str(tmp_path / "r.json")]) == 0
    kernels = load(tmp_path / "r.json")["data"]["kernels"]
    names, rows = kernels["names"], kernels["rows"]
    assert len(set(names["name"])) == len(names["name"]) == len(names["class"]) == len(names["short_name"])
    assert len({len(v) for v in rows.values()}) == 1  # every column as long as the others
    frame = kernel_frame(kernels)
    assert list(frame.columns) == list(COLUMNS) and not frame.duplicated(["range", "name"]).any()
    exported = parse_file(prefix.parent / "stats_cuda_gpu_kern_sum.csv")["cuda_gpu_kern_sum"]
    step = frame[frame["range"] == "step"].set_index("name")
    assert sorted(step.index) == sorted(exported["name"])  # every kernel of the export, in the measured steps
    assert step["total_ns"].sum() == exported["total_ns"].sum()
    assert (step["avg_ns"] - step["total_ns"] / step["instances"]).abs().max() < 1e-6 * step["avg_ns"].max()
    assert kernel_rows(kernels) == frame.astype(object).where(frame.notna(), None).to_dict("records")


def test_a_published_record_of_kernel_rows_reads_as_before():
    path = next(PUBLISHED.glob("*train_step*.json.gz"))
    rows = json.loads(gzip.decompress(path.read_bytes()))["data"]["kernels"]
    assert isinstance(rows, list) and kernel_rows(rows) is rows
    assert kernel_frame(rows).equals(pd.DataFrame(rows))


def test_data_kernels_of_another_shape_is_refused():
    with pytest.raises(ValueError, match="neither a list of kernel rows"):
        kernel_frame({"range": ["step"]})


@pytest.mark.slow
def test_parse_nsys_of_100000_kernels_stays_under_a_gibibyte(tmp_path):
    prefix = make_large().write(100_000, tmp_path / "naive-fp32-small-ctx128-train_step")
    out = tmp_path / "r.json"
    code = ("import resource, sys; from cs336report.cli import main; code = main(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(code)")
    run = subprocess.run([sys.executable, "-c", code, "parse-nsys", str(prefix), "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.split()[-1]) * 1024 < 1 << 30  # peak RSS (KiB on Linux); about 0.45 GiB
    kernels = json.loads(out.read_text())["data"]["kernels"]
    assert len(kernels["names"]["name"]) == 100_000
    step = [n for r, n in zip(kernels["rows"]["range"], kernels["rows"]["kernel"]) if r == "step"]
    assert len(step) == 100_000
