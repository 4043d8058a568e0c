"""Tests for cs336report.parsers.nsys, the nsys stats table parser."""

import json
import math
from pathlib import Path

import pytest

from cs336report.parsers import nsys
from cs336report.parsers.nsys import NsysParseError, parse_exports, parse_file, parse_text, to_records

FIXTURES = Path(__file__).parent / "fixtures" / "nsys"
REAL = FIXTURES / "real"

CANONICAL = ["name", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns"]


def _assert_canonical(df):
    for col in CANONICAL:
        assert col in df.columns, col
    for col in CANONICAL[1:]:
        assert df[col].dtype == "float64", col


# ---------------------------------------------------------------- CSV files


def test_csv_export_file_uses_report_from_file_name():
    frames = parse_file(FIXTURES / "exports" / "lm_cuda_gpu_kern_sum.csv")
    assert list(frames) == ["cuda_gpu_kern_sum"]
    df = frames["cuda_gpu_kern_sum"]
    _assert_canonical(df)
    assert len(df) == 4
    assert df["name"][0] == "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"
    assert df["name"][1].startswith("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add")
    assert df["name"][1].endswith("(int, T2, T3)")
    assert df["total_ns"][0] == 905112336
    assert df["instances"][0] == 2880
    assert df["med_ns"][2] == 388704.0
    assert df.attrs["format"] == "csv"
    assert df.attrs["report"] == "cuda_gpu_kern_sum"


def test_parse_exports_reads_every_report_of_a_prefix():
    frames = parse_exports(FIXTURES / "exports" / "lm")
    assert set(frames) == {"cuda_gpu_kern_sum", "nvtx_sum", "cuda_api_sum", "nvtx_kern_sum"}
    api = frames["cuda_api_sum"]
    assert api["instances"].tolist() == [5280, 40]
    assert api["name"].tolist() == ["cudaLaunchKernel", "cudaDeviceSynchronize"]
    nvtx = frames["nvtx_sum"]
    assert nvtx["range"].tolist() == ["step", "attention, causal"]
    assert nvtx["name"].tolist() == ["step", "attention, causal"]
    assert nvtx["style"].tolist() == ["PushPop", "PushPop"]


def test_parse_exports_accepts_a_directory():
    assert set(parse_exports(FIXTURES / "exports")) == {
        "cuda_gpu_kern_sum", "nvtx_sum", "cuda_api_sum", "nvtx_kern_sum"}


def test_parse_exports_without_files_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        parse_exports(tmp_path / "missing")


def test_nvtx_kern_sum_ranges_and_kernel_names():
    df = parse_exports(FIXTURES / "exports" / "lm")["nvtx_kern_sum"]
    _assert_canonical(df)
    assert df["range"].tolist() == ["step", "step", "attention, causal"]
    assert df["name"][0] == "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"
    assert "cunn_SoftMaxForward" in df["name"][2]
    assert df["instances"].tolist() == [2880, 480, 480]
    assert df["nvtx_instances"].tolist() == [10, 10, 10]
    assert df["pid"][0] == 51022
    assert math.isnan(df["time_pct"][0])


# ------------------------------------------------------- CSV on stdout


def test_csv_stdout_with_noise_and_several_reports():
    frames = parse_file(FIXTURES / "stdout_csv_2024.txt")
    assert list(frames) == [
        "nvtx_sum", "cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"]
    kern = frames["cuda_gpu_kern_sum"]
    assert len(kern) == 3
    assert kern["total_ns"][0] == 1_204_440_112  # quoted with thousands separators
    assert kern["name"][1].startswith("void at::native::unrolled_elementwise_kernel<at::native::direct_copy")
    assert "FusedAdamMathFunctor" in kern["name"][2]
    assert frames["nvtx_sum"].empty
    assert "does not contain NV Tools Extension" in frames["nvtx_sum"].attrs["reason"]
    size = frames["cuda_gpu_mem_size_sum"]
    assert size["total_bytes"][0] == pytest.approx(805.306e6)
    assert size["instances"][0] == 96
    assert frames["cuda_gpu_mem_time_sum"]["name"][0] == "[CUDA memcpy Device-to-Device]"


def test_csv_without_titles_uses_processing_lines():
    text = (
        "Using run.sqlite for SQL queries.\n"
        "Running [/opt/nsys/reports/cudaapisum.py run.sqlite]... \n"
        '"Time(%)","Total Time (ns)","Num Calls","Average","Minimum","Maximum","StdDev","Name"\n'
        '"90.0","900","3","300.0","100","500","200.0","cudaMalloc"\n'
        '"10.0","100","1","100.0","100","100","0.0","cudaFree"\n'
        "\n"
        "Running [/opt/nsys/reports/gpukernsum.py run.sqlite]... \n"
        '"Time(%)","Total Time (ns)","Instances","Average","Minimum","Maximum","StdDev","Name"\n'
        '"100.0","4000","4","1000.0","900","1100","80.0","volta_sgemm_128x64_nn"\n'
    )
    frames = parse_text(text)
    assert list(frames) == ["cuda_api_sum", "cuda_gpu_kern_sum"]
    kern = frames["cuda_gpu_kern_sum"]
    assert kern["avg_ns"][0] == 1000.0
    assert kern["min_ns"][0] == 900
    assert math.isnan(kern["med_ns"][0])
    assert frames["cuda_api_sum"]["instances"].tolist() == [3, 1]


def test_untitled_csv_report_is_inferred_from_columns():
    text = (
        "NVTX Range,Style,PID,TID,NVTX Inst,Kern Inst,Total Time (ns),Kernel Name\n"
        ":fwd,PushPop,1,1,1,40,1000000,ampere_sgemm_128x64_tn\n"
    )
    frames = parse_text(text)
    assert list(frames) == ["nvtx_kern_sum"]
    assert frames["nvtx_kern_sum"]["range"][0] == "fwd"
    plain = parse_text("Time (%),Total Time (ns),Instances,Name\n100.0,10,1,k\n")
    assert list(plain) == ["cuda_gpu_kern_sum"]


@pytest.mark.parametrize(
    "unit, factor", [("ns", 1), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
)
def test_time_units_are_converted_to_ns(unit, factor):
    text = (
        f"Time (%),Total Time ({unit}),Instances,Avg ({unit}),Med ({unit}),Min ({unit}),Max ({unit}),"
        f"StdDev ({unit}),Name\n"
        "100.0,2.5,5,0.5,0.5,0.25,0.75,0.125,k\n"
    )
    df = parse_text(text, report="cuda_gpu_kern_sum")["cuda_gpu_kern_sum"]
    assert df["total_ns"][0] == pytest.approx(2.5 * factor)
    assert df["avg_ns"][0] == pytest.approx(0.5 * factor)
    assert df["min_ns"][0] == pytest.approx(0.25 * factor)
    assert df["std_ns"][0] == pytest.approx(0.125 * factor)
    assert df["instances"][0] == 5


def test_kernel_names_with_commas_quotes_brackets_and_5000_chars():
    long_name = "void kern<" + ", ".join(f"T{i}" for i in range(900)) + ">(float *)"
    long_name = (long_name + " " + "x" * 5000)[:4999] + ")"
    names = [
        'void f<(int)4, "quoted, name">(at::TensorIterator &)::{lambda(float, float)#1}',
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*, float const*, int)",
        long_name,
    ]
    rows = "".join(
        '{},{},1,{},{},{},{},0.0,"{}"\n'.format(33.3, 100 + i, 100 + i, 100 + i, 100 + i, 100 + i, n.replace('"', '""'))
        for i, n in enumerate(names)
    )
    text = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n" + rows
    df = parse_text(text)["cuda_gpu_kern_sum"]
    assert df["name"].tolist() == names
    assert len(df["name"][2]) == 5000


def test_long_name_in_text_table_runs_to_end_of_line():
    long_name = "void at::native::elementwise_kernel<128, 2, " + "a" * 5000 + ">(int, T3)"
    text = (
        " Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  Min (ns)  Max (ns)  StdDev (ns)  Name\n"
        " --------  ---------------  ---------  --------  --------  --------  --------  -----------  ----\n"
        f"    100.0            4,128          1   4,128.0   4,128.0     4,128     4,128          0.0  {long_name}\n"
    )
    df = parse_text(text)["cuda_gpu_kern_sum"]
    assert df["name"][0] == long_name
    assert df["total_ns"][0] == 4128


# -------------------------------------------------------------- text tables


def test_text_profile_stats_2024():
    frames = parse_file(FIXTURES / "profile_stats_2024.txt")
    assert list(frames) == [
        "nvtx_sum", "osrt_sum", "cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum"]
    kern = frames["cuda_gpu_kern_sum"]
    _assert_canonical(kern)
    assert kern["total_ns"][0] == 452_880_114
    assert kern["instances"][2] == 4800
    assert kern["name"][0].startswith("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32")
    assert kern["name"][2].endswith("(int, T2, T3)")
    assert kern["name"][4].endswith("\u2026")
    assert kern.attrs["names_truncated"] is True
    assert kern.attrs["format"] == "text"
    nvtx = frames["nvtx_sum"]
    assert nvtx["range"].tolist() == ["forward", "backward", "optimizer step"]
    assert nvtx["avg_ns"][0] == 81_245_512.0
    api = frames["cuda_api_sum"]
    assert api["instances"].tolist() == [40, 12480, 6]
    size = frames["cuda_gpu_mem_size_sum"]
    assert size["total_bytes"][0] == pytest.approx(1677.722e6)


def test_text_stats_2023_titles_skipped_and_nvtx_kern_sum():
    frames = parse_file(FIXTURES / "stats_2023.txt")
    assert list(frames) == ["cuda_gpu_kern_sum", "nvtx_sum", "nvtx_kern_sum"]
    assert frames["cuda_gpu_kern_sum"].attrs["title"] == "CUDA GPU Kernel Summary"
    assert frames["nvtx_sum"].empty
    assert frames["nvtx_sum"].attrs["reason"].startswith("SKIPPED:")
    nks = frames["nvtx_kern_sum"]
    assert nks["range"].tolist() == ["train step", "train step", "cuBLAS:cublasSgemm_v2"]
    assert nks["name"][1] == "triton_poi_fused_add_mul_silu_3"
    assert nks["instances"].tolist() == [1800, 12000, 1800]
    assert nks["nvtx_instances"].tolist() == [5, 5, 1800]
    assert nks["total_ns"][0] == 644_002_060


def test_text_old_2021_columns_and_report_ids():
    frames = parse_file(FIXTURES / "stats_2021.txt")
    assert list(frames) == [
        "cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum"]
    kern = frames["cuda_gpu_kern_sum"]
    assert kern["name"][0] == "volta_sgemm_128x64_nn"
    assert kern["avg_ns"][0] == 680_421.7
    assert kern["min_ns"][0] == 671_200
    assert kern["max_ns"][0] == 702_560
    assert kern["std_ns"][0] == 8_204.4
    assert math.isnan(kern["med_ns"][0])
    assert "sum_functor" in kern["name"][1] and kern["name"][1].endswith("float, 4>)")
    size = frames["cuda_gpu_mem_size_sum"]
    assert size["total_bytes"][0] == 16384 * 1024
    assert frames["nvtx_sum"]["range"].tolist() == ["forward"]


def test_text_old_2020_titles_without_units_and_kib():
    frames = parse_file(FIXTURES / "profile_stats_2020.txt")
    assert list(frames) == ["cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"]
    kern = frames["cuda_gpu_kern_sum"]
    assert kern["name"].tolist() == ["turing_fp16_s1688gemm_fp16_128x256_ldg8_f2f_nn", ""]
    assert kern["total_ns"].tolist() == [3360, 136]
    assert math.isnan(kern["std_ns"][0])
    assert frames["cuda_gpu_mem_size_sum"]["total_bytes"][0] == 538906.0 * 1024
    assert frames["cuda_api_sum"]["instances"].tolist() == [2, 2]


def test_text_grid_block_columns_and_ms_unit():
    frames = parse_file(FIXTURES / "profile_stats_2022_gridxyz.txt")
    kern = frames["cuda_gpu_kern_sum"]
    assert kern["grid_xyz"].tolist() == ["4 4 1", "1024 1 1"]
    assert kern["block_xyz"].tolist() == ["128 1 1", "32 32 1"]
    assert kern["total_ns"][0] == pytest.approx(114.495e6)
    assert kern["name"][1] == "mm_cuda_naive(float *, float *, float *, int, int, int)"
    mem = frames["cuda_gpu_mem_time_sum"]
    assert mem.empty and "GPU memory data" in mem.attrs["reason"]


def test_text_header_wrapped_over_two_lines_and_comment_prefix():
    text = (
        "# Running [/soft/reports/gpukernsum.py report3.sqlite]... \n"
        "#\n"
        "#  Time(%)  Total Time (ns)  Instances    Average    Minimum    Maximum    StdDev\n"
        "#                     Name\n"
        "#\n"
        "#  -------  ---------------  ---------  ---------  ---------  ---------  --------  ----------------------------\n"
        "#     88.7   39,754,166,488     37,500  1,060,111.1   27,456  3,930,745  1,033,670.1  update_weight_133_gpu(float*)\n"
    )
    df = parse_text(text)["cuda_gpu_kern_sum"]
    assert df["name"][0] == "update_weight_133_gpu(float*)"
    assert df["total_ns"][0] == 39_754_166_488
    assert df["std_ns"][0] == pytest.approx(1_033_670.1)


def test_text_rows_not_aligned_with_header_fall_back_to_tokens():
    text = (
        "CUDA Kernel Statistics (nanoseconds)\n\n"
        "Time(%)  Total Time   Instances  Average  Minimum    Maximum  Name                \n"
        "-------  ----------  ----------  -------  -------  ---------  --------------------\n"
        "  100.0    83786531    6     13964421.8   7552     66107333  conv_forward_kernel \n"
    )
    df = parse_text(text)["cuda_gpu_kern_sum"]
    assert df["instances"][0] == 6
    assert df["avg_ns"][0] == 13964421.8
    assert df["name"][0] == "conv_forward_kernel"


def test_decimal_comma_locale():
    text = (
        "Running [/soft/reports/gpukernsum.py report3.sqlite]... \n\n"
        " Time(%)  Total Time (ns)  Instances  Average  Minimum  Maximum      Name     \n"
        " -------  ---------------  ---------  -------  -------  -------  -------------\n"
        "    33,0            2.176          1  2.176,0    2.176    2.176  loop_2_38_gpu\n"
        "    67,0            4.144          2  2.072,0    2.000    2.144  loop_1_21_gpu\n"
    )
    df = parse_text(text)["cuda_gpu_kern_sum"]
    assert df["time_pct"].tolist() == [33.0, 67.0]
    assert df["total_ns"].tolist() == [2176, 4144]
    assert df["avg_ns"].tolist() == [2176.0, 2072.0]


def test_elided_rows_end_a_table():
    text = (
        "[6/8] Executing 'gpukernsum' stats report\n\n"
        " Time (%)  Total Time (ns)  Instances  Name\n"
        " --------  ---------------  ---------  ----\n"
        "     90.0            9,000         10  a\n"
        "     ......\n"
    )
    assert parse_text(text)["cuda_gpu_kern_sum"]["name"].tolist() == ["a"]


# ---------------------------------------------------------- no data / errors


def test_skipped_report_is_empty_with_reason():
    text = (
        "Processing [r.sqlite] with [/opt/nsys/reports/cuda_gpu_kern_sum.py]... \n"
        "SKIPPED: r.sqlite does not contain CUDA kernel data.\n"
    )
    frames = parse_text(text)
    df = frames["cuda_gpu_kern_sum"]
    assert df.empty
    assert list(df.columns) == CANONICAL
    assert df.attrs["reason"] == "SKIPPED: r.sqlite does not contain CUDA kernel data."


def test_skipped_without_heading_is_attributed_from_message(tmp_path):
    frames = parse_text("SKIPPED: /tmp/x.sqlite does not contain CUDA kernel data.\n")
    assert list(frames) == ["cuda_gpu_kern_sum"]
    path = tmp_path / "run_nvtx_kern_sum.csv"
    path.write_text("SKIPPED: x.sqlite does not contain NV Tools Extension (NVTX) data.\n")
    frames = parse_file(path)
    assert list(frames) == ["nvtx_kern_sum"]
    assert "range" in frames["nvtx_kern_sum"].columns


def test_empty_export_file_of_known_report(tmp_path):
    path = tmp_path / "run_cuda_gpu_kern_sum.csv"
    path.write_text("")
    df = parse_file(path)["cuda_gpu_kern_sum"]
    assert df.empty and df.attrs["reason"]


def test_header_only_table_is_empty_without_error():
    df = parse_text("Time (%),Total Time (ns),Instances,Name\n")["cuda_gpu_kern_sum"]
    assert df.empty
    assert "reason" not in df.attrs


def test_malformed_csv_names_file_and_line():
    path = FIXTURES / "malformed_kern.csv"
    with pytest.raises(NsysParseError) as info:
        parse_file(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.line == 3
    assert str(path) in str(err)
    assert "line 3" in str(err)


def test_non_numeric_value_is_reported_with_column():
    text = "Time (%),Total Time (ns),Instances,Name\n50.0,12abc,1,k\n"
    with pytest.raises(NsysParseError, match=r'<string>, line 2: expected a number in column "Total Time \(ns\)"'):
        parse_text(text)


def test_text_with_no_table_raises_expected_header():
    with pytest.raises(NsysParseError, match=r'mystery\.txt, line 2: expected a header row with "Total Time" column'):
        parse_text("\nthis is not nsys output\nat all\n", source="mystery.txt")


def test_bad_row_inside_text_table_raises():
    text = (
        " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n"
        " Time (%)  Total Time (ns)  Instances  Name\n"
        " --------  ---------------  ---------  ----\n"
        "     90.0            9,000         10  a\n"
        "     oops  not a row\n"
    )
    with pytest.raises(NsysParseError) as info:
        parse_text(text, source="t.txt")
    assert info.value.line == 6


def test_garbled_header_after_title_raises():
    text = " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\nTme,Totl Tme,Nme\n1,2,3\n"
    with pytest.raises(NsysParseError, match="line 3"):
        parse_text(text)


# ---------------------------------------------------------------- records


def test_to_records_is_json_serialisable():
    frames = parse_file(FIXTURES / "stats_2023.txt")
    records = to_records(frames)
    json.dumps(records)
    kern = records["cuda_gpu_kern_sum"]
    assert kern["report"] == "cuda_gpu_kern_sum"
    assert kern["format"] == "text"
    assert kern["rows"][0]["total_ns"] == 1_288_004_120
    assert kern["rows"][0]["name"].startswith("void cutlass::Kernel2<")
    assert records["nvtx_sum"]["rows"] == []
    assert records["nvtx_sum"]["reason"].startswith("SKIPPED")
    assert records["nvtx_kern_sum"]["rows"][0]["time_pct"] is None


def test_repeated_report_gets_numbered_key():
    one = "Time (%),Total Time (ns),Instances,Name\n100.0,10,1,k\n"
    text = "** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n" + one + "\n** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n" + one
    assert list(parse_text(text)) == ["cuda_gpu_kern_sum", "cuda_gpu_kern_sum#2"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("gpukernsum", "cuda_gpu_kern_sum"),
        ("nvtxkernsum", "nvtx_kern_sum"),
        ("cudaapisum", "cuda_api_sum"),
        ("gpumemtimesum", "cuda_gpu_mem_time_sum"),
        ("gpumemsizesum", "cuda_gpu_mem_size_sum"),
        ("nvtxsum", "nvtx_sum"),
        ("cuda_gpu_kern_sum:base", "cuda_gpu_kern_sum"),
        ("/opt/nsys/reports/nvtx_kern_sum.py", "nvtx_kern_sum"),
    ],
)
def test_canonical_report_names(name, expected):
    assert nsys.canonical_report(name) == expected


# ----------------------------------------------------- exports from our GPU

_REAL_FILES = sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix != ".md") if REAL.is_dir() else []


@pytest.mark.skipif(not _REAL_FILES, reason="no real exports under tests/fixtures/nsys/real/")
@pytest.mark.parametrize("path", _REAL_FILES, ids=[p.name for p in _REAL_FILES])
def test_real_exports_parse(path):
    frames = parse_file(path)
    assert frames
    kernel_tables = [df for key, df in frames.items() if key.split("#")[0] == "cuda_gpu_kern_sum" and not df.empty]
    for df in kernel_tables:
        assert (df["total_ns"] > 0).all()
        assert (df["instances"] > 0).all()
        assert df["name"].map(len).gt(0).any()
    if path.stem.endswith(("cuda_gpu_kern_sum", "gpukernsum")):
        assert kernel_tables, "a kernel summary export without kernel rows"
