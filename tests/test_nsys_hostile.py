"""nsys stats exports that once ended badly: a missing number, a long field, UTF-16, a row that reads like
a message. Each must give the file's numbers or an error naming the file and line (cs336report.parsers.nsys)."""

import shutil
from pathlib import Path

import pytest

from cs336report.cli import main
from cs336report.parsers.nsys import NsysParseError, parse_exports, parse_file, parse_text

REAL = Path(__file__).parent / "fixtures" / "nsys" / "real"
CELL = "naive-fp32-small-ctx128-train_step"


def exports(tmp_path: Path) -> Path:
    """A copy of the real train-step exports, named as the cell, to edit; returns their prefix."""
    folder = tmp_path / CELL
    folder.mkdir()
    for path in REAL.glob("small_ctx128_train_step_*.csv"):
        shutil.copy(path, folder / path.name.replace("small_ctx128_train_step", "stats"))
    return folder / "stats"


def edit_cell(path: Path, line: int, column: int, value: str) -> None:
    """Set field ``column`` of 1-based ``line`` (a line without quotes) to ``value``."""
    lines = path.read_text().split("\n")
    fields = lines[line - 1].split(",")
    fields[column] = value
    lines[line - 1] = ",".join(fields)
    path.write_text("\n".join(lines))


@pytest.mark.parametrize("cell, why", [("", "missing here"), ("-3", "at least 0"), ("inf", "at least 0")])
def test_a_kernel_without_its_total_time_is_refused_by_line_and_column(tmp_path, cell, why):
    path = exports(tmp_path).parent / "stats_cuda_gpu_kern_sum.csv"
    edit_cell(path, 4, 1, cell)  # the third kernel's Total Time (ns)
    with pytest.raises(NsysParseError) as info:
        parse_file(path)
    assert info.value.line == 4 and info.value.source == str(path)
    assert 'column "Total Time (ns)"' in str(info.value) and why in str(info.value)


def test_an_empty_instances_cell_of_the_step_range_is_refused(tmp_path, capsys):
    prefix = exports(tmp_path)
    path = prefix.parent / "stats_nvtx_sum.csv"
    line = next(n for n, text in enumerate(path.read_text().split("\n"), 1) if text.endswith(",:step"))
    edit_cell(path, line, 2, "")
    out = tmp_path / "record.json"
    assert main(["parse-nsys", str(prefix), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}, line {line}: expected a whole number in column \"Instances\"")
    assert "Traceback" not in err and not out.exists()


def test_a_fractional_kernel_count_is_refused(tmp_path):
    path = exports(tmp_path).parent / "stats_cuda_gpu_kern_sum.csv"
    edit_cell(path, 2, 2, "364.5")
    with pytest.raises(NsysParseError, match=r'line 2: expected a whole number in column "Instances"'):
        parse_file(path)


def test_a_kernel_table_without_an_instances_column_is_refused_at_its_header():
    text = "Time (%),Total Time (ns),Avg (ns),Name\n60.0,600,60.0,a\n40.0,400,40.0,b\n"
    with pytest.raises(NsysParseError) as info:
        parse_text(text, source="kern.csv", report="cuda_gpu_kern_sum")
    assert info.value.line == 1 and '"Instances"' in str(info.value)


def test_a_text_table_with_an_empty_total_is_refused():
    text = (" ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n"
            " Time (%)  Total Time (ns)  Instances  Name\n"
            " --------  ---------------  ---------  ----\n"
            "     60.0              600          6  a\n"
            "     40.0                -          4  b\n")
    with pytest.raises(NsysParseError, match=r"stats\.txt, line 6: expected a number in column \"Total Time \(ns\)\""):
        parse_text(text, source="stats.txt")


def test_a_field_longer_than_the_csv_modules_limit_is_read(tmp_path):
    prefix = exports(tmp_path)
    path = prefix.parent / "stats_cuda_gpu_kern_sum.csv"
    name = "void long_kernel<" + "float, " * 40_000 + "int>(T1)"  # 280,000 characters, quoted for its commas
    lines = path.read_text().split("\n")
    lines.insert(2, f'1.0,1000,10,100.0,100.0,90,110,5.0,"{name}"')
    path.write_text("\n".join(lines))
    kern = parse_file(path)["cuda_gpu_kern_sum"]
    assert kern["name"].iloc[1] == name and kern["total_ns"].iloc[1] == 1000
    lines[3] = lines[3].replace("sm80_xmma", '"sm80\nxmma') + '"'  # a quoted line end: read by the csv module
    path.write_text("\n".join(lines))
    kern = parse_file(path)["cuda_gpu_kern_sum"]
    assert kern["name"].iloc[1] == name and kern["name"].iloc[2].startswith("sm80\nxmma")
    assert main(["parse-nsys", str(prefix), "--out", str(tmp_path / "r.json")]) == 0


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
                                           ("utf-16-le", b""), ("utf-8", b"\xef\xbb\xbf"), ("utf-32-le", b"")])
def test_an_export_in_utf16_is_read_as_in_utf8(tmp_path, encoding, bom):
    source = REAL / "small_ctx128_train_step_nvtx_kern_sum.csv"
    path = tmp_path / "stats_nvtx_kern_sum.csv"
    path.write_bytes(bom + source.read_text().replace("\n", "\r\n").encode(encoding))  # as PowerShell writes it
    got, want = parse_file(path)["nvtx_kern_sum"], parse_file(source)["nvtx_kern_sum"]
    assert got.equals(want) and len(got) == 174


def test_text_output_in_utf16_is_read(tmp_path):
    source = REAL / "mini_ctx64_train_step_stats_text.txt"
    path = tmp_path / "stats.txt"
    path.write_bytes(b"\xff\xfe" + source.read_text().encode("utf-16-le"))
    got, want = parse_file(path), parse_file(source)
    assert list(got) == list(want) and all(got[k].equals(want[k]) for k in want)


def test_a_row_that_reads_like_an_nsys_message_stays_a_row():
    # a range of a domain named like nsys's messages: the row has every field, so it is a row
    text = ("NVTX Range,Style,PID,TID,NVTX Inst,Kern Inst,Total Time (ns),Avg (ns),Med (ns),Min (ns),Max (ns),"
            "StdDev (ns),Kernel Name\n"
            ":step,PushPop,1,1,3,30,3000,100.0,100.0,90,110,5.0,k1\n"
            "WARNING:step,PushPop,1,1,3,30,6000,200.0,200.0,190,210,5.0,k2\n"
            "Saving:step,PushPop,1,1,3,30,9000,300.0,300.0,290,310,5.0,k3\n"
            ":step,PushPop,1,1,3,30,1000,33.3,33.0,30,40,5.0,k4\n")
    frame = parse_text(text, source="nk.csv", report="nvtx_kern_sum")["nvtx_kern_sum"]
    assert frame["name"].tolist() == ["k1", "k2", "k3", "k4"]
    assert frame["total_ns"].sum() == 19000


def test_a_message_after_a_table_still_ends_it():
    text = ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
            "100.0,600,6,100.0,100.0,90,110,5.0,a\n"
            "WARNING: the report holds one kernel\n"
            "SKIPPED: report.sqlite does not contain NV Tools Extension (NVTX) data.\n")
    frames = parse_text(text, source="out.txt", report="cuda_gpu_kern_sum")
    assert frames["cuda_gpu_kern_sum"]["name"].tolist() == ["a"]
    assert "does not contain" in frames[next(k for k in frames if k != "cuda_gpu_kern_sum")].attrs["reason"]


def test_real_exports_still_parse(tmp_path):
    frames = parse_exports(exports(tmp_path))
    assert len(frames["cuda_gpu_kern_sum"]) == 72 and len(frames["nvtx_kern_sum"]) == 174


@pytest.mark.parametrize("data", [b"\x1f\x8b", b"\x1f\x8b\x08\x00garbage"], ids=["magic-only", "corrupt"])
def test_a_truncated_or_corrupt_gzip_export_is_refused_naming_the_file(tmp_path, data):
    path = tmp_path / "run_cuda_gpu_kern_sum.csv"
    path.write_bytes(data)
    with pytest.raises(NsysParseError) as info:
        parse_file(path)
    assert info.value.source == str(path) and "gzip" in str(info.value)
