"""Publishing a run and re-rendering the report from the published results alone."""

import json
import shutil

import pytest
from conftest import snakemake

pytestmark = pytest.mark.slow


@pytest.fixture
def workdir(workdir, tmp_path):
    """A copy of the session's built CPU workflow, so other configs here leave the shared one alone."""
    return shutil.copytree(workdir, tmp_path / "work", symlinks=True)


def test_publish_then_render_without_running_experiments(workdir):
    (workdir / "pub.yaml").write_text("published: {dir: pubdata, render: false}\n")
    run = snakemake(workdir, "publish", "--configfile", "workflow/config/default.yaml", "pub.yaml")
    assert run.returncode == 0, run.stderr[-2000:]
    manifest = json.loads((workdir / "pubdata/manifest.json").read_text())
    n_results = len(list((workdir / "results").glob("*/*.json")))
    assert len(manifest["files"]) == n_results
    record = json.loads((workdir / manifest["files"][0]).read_text())
    assert record["benchmark"]["wall_s"] > 0 and "_path" not in record

    (workdir / "render.yaml").write_text("published: {dir: pubdata, render: true}\nreport_dir: pubreport\n")
    dry = snakemake(workdir, "-n", "report", "--configfile", "workflow/config/default.yaml", "render.yaml")
    assert "benchmarking " not in dry.stdout and "report " in dry.stdout
    run = snakemake(workdir, "report", "--configfile", "workflow/config/default.yaml", "render.yaml")
    assert run.returncode == 0, run.stderr[-2000:]
    md = (workdir / "pubreport/report.md").read_text()
    assert "pubdata/benchmarking/" in md  # tables name the published files they came from
    assert "Cost of this report" in md


def test_render_published_without_a_published_folder_says_what_to_do(workdir):
    (workdir / "missing.yaml").write_text("published: {dir: nowhere, render: true}\n")
    run = snakemake(workdir, "-n", "report", "--configfile", "workflow/config/default.yaml", "missing.yaml")
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert "nowhere/manifest.json" in output and "snakemake --cores 1 publish" in output


def test_a_chained_result_costs_every_job_of_its_chain(tmp_path):
    from cs336report.publish import benchmark_of

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for rule, (wall, rss, cpu) in {"nsys_profile": (10.0, 900.0, 8.0), "nsys_stats": (2.0, 300.0, 1.5)}.items():
        (tmp_path / rule).mkdir()
        (tmp_path / rule / "c.tsv").write_text(header + f"{wall}\t0:00:10\t{rss}\t0\t0\t0\t0\t0\t0\t{cpu}\n")
    got = benchmark_of("results/nsys_parse/c.json", tmp_path)
    assert got == {"wall_s": 12.0, "max_rss_mib": 900.0, "cpu_time_s": 9.5, "jobs": 2}
    assert benchmark_of("results/nsys_profile/c.json", tmp_path)["wall_s"] == 10.0  # one job of its own
    assert benchmark_of("results/benchmarking/c.json", tmp_path) is None
