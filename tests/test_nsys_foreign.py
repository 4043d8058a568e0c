"""nsys stats output from other machines and versions: application output, every known report."""

from pathlib import Path

import pytest

from cs336report.parsers.nsys import NsysParseError, parse_exports, parse_file, parse_text

FIXTURES = Path(__file__).parent / "fixtures" / "nsys"


def test_application_output_around_2020_tables_is_skipped():
    frames = parse_file(FIXTURES / "profile_stats_2020_app_output.txt")
    assert list(frames) == ["cuda_api_sum", "cuda_gpu_kern_sum"]
    api, kern = frames["cuda_api_sum"], frames["cuda_gpu_kern_sum"]
    assert list(api["name"]) == ["cudaMalloc", "cudaLaunchKernel"]
    assert list(api["instances"]) == [2.0, 4.0]
    assert api.attrs["title"] == "CUDA API Statistics (nanoseconds)"
    assert list(kern["name"]) == ["ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel"]
    assert list(kern["total_ns"]) == [3360.0, 136.0]
    assert kern.attrs["title"] == "CUDA Kernel Statistics (nanoseconds)"


def test_application_line_between_title_and_table_does_not_relabel_it():
    text = (
        " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n"
        " ** rank 0: kernel summary follows, 1 kernel\n\n"
        " Time (%)  Total Time (ns)  Instances  Name\n"
        " --------  ---------------  ---------  ----\n"
        "    100.0            9,000         10  a\n"
    )
    frames = parse_text(text)
    assert list(frames) == ["cuda_gpu_kern_sum"]
    assert frames["cuda_gpu_kern_sum"].attrs["title"] == "CUDA GPU Kernel Summary"
    assert list(frames["cuda_gpu_kern_sum"]["total_ns"]) == [9000.0]


def test_nvtx_gpu_proj_sum_columns_are_mapped():
    frames = parse_file(FIXTURES / "proj" / "run_nvtx_gpu_proj_sum.csv")
    df = frames["nvtx_gpu_proj_sum"]
    assert list(df["range"]) == ["step", "forward", "attention, causal"]
    assert list(df["instances"]) == [10.0, 10.0, 240.0]
    assert df["total_ns"].iloc[0] == 1520331008.0
    assert df["total_range_time_ns"].iloc[0] == 1554200100.0
    assert df["avg_ns"].iloc[2] == 501667.9
    assert df["std_ns"].iloc[1] == 80112.9
    assert df.attrs["columns"]["total_ns"] == "Total Proj Time (ns)"
    assert set(parse_exports(FIXTURES / "proj" / "run")) == {"nvtx_gpu_proj_sum"}


def test_report_known_by_columns_alone():
    text = (FIXTURES / "proj" / "run_nvtx_gpu_proj_sum.csv").read_text()
    assert list(parse_text(text)) == ["nvtx_gpu_proj_sum"]


def test_cut_last_row_is_refused_with_its_line():
    path = FIXTURES / "cut_nvtx_gpu_proj_sum.csv"
    with pytest.raises(NsysParseError) as info:
        parse_file(path)
    assert info.value.line == 5
    assert "cut short" in str(info.value)
    assert str(path) in str(info.value)
