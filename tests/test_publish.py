"""Publishing a run and re-rendering the report from the published results alone."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import snakemake

pytestmark = pytest.mark.slow


@pytest.fixture
def workdir(workdir, tmp_path):
    """A copy of the session's built CPU workflow, so other configs here leave the shared one alone."""
    return shutil.copytree(workdir, tmp_path / "work", symlinks=True)


def test_publish_then_render_without_running_experiments(workdir):
    # the copy of the tree has no .git: its records name no commit
    (workdir / "pub.yaml").write_text("published: {dir: pubdata, render: false, allow_dirty: true}\n")
    run = snakemake(workdir, "publish", "--configfile", "workflow/config/default.yaml", "pub.yaml")
    assert run.returncode == 0, run.stderr[-2000:]
    manifest = json.loads((workdir / "pubdata/manifest.json").read_text())
    n_results = len(list((workdir / "results").glob("*/*.json")))
    assert len(manifest["files"]) == n_results
    assert all(f.startswith("pubdata/") and f.endswith(".json.gz") for f in manifest["files"])
    assert not list((workdir / "pubdata").glob("*/*.json"))  # only config.json and manifest.json are plain
    record = json.loads(gzip.decompress((workdir / manifest["files"][0]).read_bytes()))
    assert record["benchmark"]["wall_s"] > 0 and "_path" not in record

    (workdir / "render.yaml").write_text("published: {dir: pubdata, render: true}\nreport_dir: pubreport\n")
    dry = snakemake(workdir, "-n", "report", "--configfile", "workflow/config/default.yaml", "render.yaml")
    assert "benchmarking " not in dry.stdout and "report " in dry.stdout
    run = snakemake(workdir, "report", "--configfile", "workflow/config/default.yaml", "render.yaml")
    assert run.returncode == 0, run.stderr[-2000:]
    md = (workdir / "pubreport/report.md").read_text()
    assert "pubdata/benchmarking/" in md  # tables name the published files they came from
    assert ".json.gz" in md
    assert "Cost of this report" in md


def test_render_published_without_a_published_folder_says_what_to_do(workdir):
    (workdir / "missing.yaml").write_text("published: {dir: nowhere, render: true}\n")
    run = snakemake(workdir, "-n", "report", "--configfile", "workflow/config/default.yaml", "missing.yaml")
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert "nowhere/manifest.json" in output and "snakemake --cores 1 publish" in output


def test_a_chained_result_costs_every_job_of_its_chain(tmp_path):
    from cs336report.records.job_timing import benchmark_of

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for rule, (wall, rss, cpu) in {"nsys_profile": (10.0, 900.0, 8.0), "nsys_stats": (2.0, 300.0, 1.5)}.items():
        (tmp_path / rule).mkdir()
        (tmp_path / rule / "c.tsv").write_text(header + f"{wall}\t0:00:10\t{rss}\t0\t0\t0\t0\t0\t0\t{cpu}\n")
    got = benchmark_of("results/nsys_parse/c.json", tmp_path)
    assert got == {"wall_s": 12.0, "max_rss_mib": 900.0, "cpu_time_s": 9.5, "jobs": 2}
    assert benchmark_of("results/nsys_profile/c.json", tmp_path)["wall_s"] == 10.0  # one job of its own
    assert benchmark_of("results/benchmarking/c.json", tmp_path) is None


def test_a_chain_whose_first_job_ran_several_cells_counts_that_job_once(tmp_path):
    from cs336report.report.appendix.cost import cost_of
    from cs336report.records.job_timing import benchmark_of

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    rows = {("nsys_profile", "job"): 30.0, ("nsys_stats", "a"): 2.0, ("nsys_parse", "a"): 1.0,
            ("nsys_stats", "b"): 4.0, ("nsys_parse", "b"): 1.5}
    for (rule, stem), wall in rows.items():
        (tmp_path / rule).mkdir(exist_ok=True)
        (tmp_path / rule / f"{stem}.tsv").write_text(header + f"{wall}\t0:00:10\t100\t0\t0\t0\t0\t0\t0\t1\n")
    a = benchmark_of("results/nsys_parse/a.json", tmp_path, job="job")
    assert a["wall_s"] == 33.0 and a["job_wall_s"] == 30.0 and a["jobs"] == 3
    b = benchmark_of("results/nsys_parse/b.json", tmp_path, job="job")
    records = [{**_record("nsys_profile", name), "job": {"name": "job", "cells": ["a", "b"]}, "benchmark": bench,
                "_path": f"results/nsys_parse/{name}.json"}
               for name, bench in (("a", a), ("b", b))]
    cost = cost_of(records)
    assert cost["total_s"] == pytest.approx(30.0 + 3.0 + 5.5)  # the shared job once, each cell's export and parse


def _data_of(experiment: str, **data) -> dict:
    """``data`` with each other field its experiment's shape requires, an empty value of its type."""
    import dataclasses
    import typing

    from cs336report.records.shapes import SHAPES

    shape = SHAPES[experiment]
    hints = typing.get_type_hints(shape)
    blank = {int: 0, float: 0.0, str: "", bool: False, list: [], dict: {}}
    required = {f.name: blank[(typing.get_args(hints[f.name]) or (hints[f.name],))[0]]
                for f in dataclasses.fields(shape) if f.default is dataclasses.MISSING}
    return {**required, **data}


def _record(experiment: str, cell: str, **data) -> dict:
    return {"schema": "cs336report.result/1", "experiment": experiment, "cell": cell, "status": "ok", "error": None,
            "config": {"size": "small", "context": 128}, "data": _data_of(experiment, **data), "provenance": {"device": "cpu", "git_commit": "0" * 40, "git_dirty": False}, "wall_s": 1.0}


@pytest.fixture
def run_results(tmp_path):
    """Two result files of a run, in results/<rule>/<cell>.json, and a benchmark of one job."""
    from cs336report.records.store import save

    paths = [save(_record("benchmarking", "small-ctx128", stats_s={"mean": 0.15}, timing="µs"),
                  tmp_path / "results/benchmarking/small-ctx128.json"),
             save(_record("nsys_profile", "small-ctx128-forward", kernels=[{"name": "sgemm", "ns": 12}]),
                  tmp_path / "results/nsys_parse/small-ctx128-forward.json")]
    bench = tmp_path / "benchmarks/benchmarking"
    bench.mkdir(parents=True)
    (bench / "small-ctx128.tsv").write_text("s\tmax_rss\tcpu_time\n2.5\t100.0\t2.0\n")
    return [str(p) for p in paths], tmp_path / "benchmarks"


def test_publish_writes_gzip_records_holding_the_run_records(run_results, tmp_path):
    from cs336report.records.store import load
    from cs336report.steps.publish import publish, published_files

    paths, benchmarks = run_results
    out = tmp_path / "pub"
    manifest = publish(paths, {"device": "cpu"}, out, benchmarks)
    files, config = published_files(out)
    assert files == [str(out / "benchmarking/small-ctx128.json.gz"), str(out / "nsys_profile/small-ctx128-forward.json.gz")]
    assert config == {"device": "cpu"} and json.loads(manifest.read_text())["files"] == files
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["config.json", "manifest.json"]
    for src, dest in zip(paths, files):
        text = gzip.decompress(open(dest, "rb").read()).decode()
        published = json.loads(text)
        run = json.loads(open(src).read())
        assert published.pop("benchmark") == ({"wall_s": 2.5, "max_rss_mib": 100.0, "cpu_time_s": 2.0}
                                              if "benchmarking" in src else None)
        assert published == run
        assert text == json.dumps({**run, "benchmark": load(dest)["benchmark"]}, sort_keys=True, separators=(",", ":"))
        assert load(dest)["_path"] == dest  # the renderer reads the published record as it is


def test_publishing_twice_gives_the_same_bytes(run_results, tmp_path):
    from cs336report.steps.publish import publish

    paths, benchmarks = run_results
    publish(paths, {"device": "cpu"}, tmp_path / "one", benchmarks)
    first = {p.relative_to(tmp_path / "one"): p.read_bytes() for p in (tmp_path / "one").rglob("*.gz")}
    publish(paths, {"device": "cpu"}, tmp_path / "one", benchmarks)  # over the same folder
    publish(paths, {"device": "cpu"}, tmp_path / "two", benchmarks)
    for folder in ("one", "two"):
        again = {p.relative_to(tmp_path / folder): p.read_bytes() for p in (tmp_path / folder).rglob("*.gz")}
        assert again == first and len(first) == 2
    assert (tmp_path / "one/config.json").read_bytes() == (tmp_path / "two/config.json").read_bytes()


def test_republishing_a_published_folder_keeps_the_cell_names(run_results, tmp_path):
    from cs336report.steps.publish import publish, published_files

    paths, benchmarks = run_results
    publish(paths, {}, tmp_path / "one", benchmarks)
    files, _ = published_files(tmp_path / "one")
    publish(files, {}, tmp_path / "two", benchmarks)
    assert [f.replace("/two/", "/one/") for f in published_files(tmp_path / "two")[0]] == files


def test_merging_replaces_only_the_cells_given(run_results, tmp_path):
    from cs336report.records.store import load, save
    from cs336report.steps.publish import publish, published_files

    paths, benchmarks = run_results
    out = tmp_path / "pub"
    publish(paths, {"device": "cpu"}, out, benchmarks)
    before = {f: open(f, "rb").read() for f in published_files(out)[0]}

    rerun = save(_record("benchmarking", "small-ctx128", stats_s={"mean": 0.3}), tmp_path / "again/benchmarking/small-ctx128.json")
    added = save(_record("benchmarking", "small-ctx256", stats_s={"mean": 0.4}), tmp_path / "again/benchmarking/small-ctx256.json")
    publish([str(rerun), str(added)], {"device": "cpu"}, out, tmp_path / "no-benchmarks", merge=True)

    files, _ = published_files(out)
    assert files == sorted([str(out / "benchmarking/small-ctx128.json.gz"), str(out / "benchmarking/small-ctx256.json.gz"),
                            str(out / "nsys_profile/small-ctx128-forward.json.gz")])
    assert load(out / "benchmarking/small-ctx128.json.gz")["data"]["stats_s"] == {"mean": 0.3}  # replaced
    assert load(out / "benchmarking/small-ctx256.json.gz")["data"]["stats_s"] == {"mean": 0.4}  # added
    kept = str(out / "nsys_profile/small-ctx128-forward.json.gz")
    assert open(kept, "rb").read() == before[kept]  # untouched


def test_merging_into_a_folder_of_another_config_is_refused(run_results, tmp_path):
    from cs336report.steps.publish import publish, published_files

    paths, benchmarks = run_results
    out = tmp_path / "pub"
    publish(paths, {"device": "cpu", "grid": "cpu"}, out, benchmarks)
    with pytest.raises(ValueError, match=r"config.json.*differs.*grid"):
        publish(paths[:1], {"device": "cpu", "grid": "gpu"}, out, benchmarks, merge=True)
    assert len(published_files(out)[0]) == 2  # nothing written


def test_merging_records_of_another_card_is_refused_before_anything_is_written(run_results, tmp_path):
    from cs336report.records.store import save
    from cs336report.steps.publish import publish, published_files

    def on(card, cell, times):
        record = _record("benchmarking", cell, stats_s={"mean": times[0]})
        record["provenance"] = {**record["provenance"], "device": "cuda", "gpu": card}
        return str(save(record, tmp_path / card.replace(" ", "_") / f"{cell}.json"))

    out = tmp_path / "pub"
    publish([on("NVIDIA H200", "a", [0.1]), on("NVIDIA H200", "b", [0.2])], {}, out, tmp_path / "no-benchmarks")
    before = {f: open(f, "rb").read() for f in published_files(out)[0]}
    with pytest.raises(ValueError, match=r"pub: the records would name more than one GPU") as refused:
        publish([on("NVIDIA H100 80GB HBM3", "a", [0.3])], {}, out, tmp_path / "no-benchmarks", merge=True)
    message = str(refused.value)
    assert "NVIDIA H200: 1 record" in message and "NVIDIA H100 80GB HBM3: 1 record" in message
    assert "1 records" not in message
    assert {f: open(f, "rb").read() for f in published_files(out)[0]} == before  # nothing written
    # replacing every record of the old card is one card again; and --mixed-cards publishes anyway
    publish([on("NVIDIA H100 80GB HBM3", c, [0.4]) for c in "ab"], {}, out, tmp_path / "no-benchmarks", merge=True)
    publish([on("NVIDIA H200", "c", [0.5])], {}, out, tmp_path / "no-benchmarks", merge=True, mixed_cards=True)
    assert len(published_files(out)[0]) == 3


def test_missing_lists_the_result_files_of_the_configured_cells_a_folder_lacks(tmp_path, capsys):
    from cs336report import experiments
    from cs336report.cli import main
    from cs336report.records.coverage import PARSED_BY
    from cs336report.records.store import load, save
    from cs336report.steps.publish import missing_targets, publish
    from helpers import tiny_config

    cfg = tiny_config()
    config = {**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}
    expected = {(name, cell) for name in experiments.names() for cell in experiments.cells(name, cfg)}
    assert len(expected) > 3
    kept = sorted(expected)[::2]  # publish every other configured cell
    # one of them ran out of memory while another process held most of the card (the H200 record's message)
    shared_error = load(Path(__file__).parent / "fixtures/attention_h200/compiled-fp32-d64-s32768.json.gz")["error"]
    shared = next((name, cell) for name, cell in kept if name == "pytorch_attention")
    paths = [str(save(dict(_record(name, cell), **({"status": "oom", "error": shared_error}
                                                   if (name, cell) == shared else {})),
                      tmp_path / f"results/{name}/{cell}.json")) for name, cell in kept]
    publish(paths, config, tmp_path / "pub", tmp_path / "no-benchmarks")

    targets, n_missing, n, n_shared = missing_targets(tmp_path / "pub")
    assert n == len(expected) and n_missing == len(expected - set(kept)) and n_shared == 1
    # a profiled cell's record is written by the parse rule at the end of its chain (nsys_profile:
    # results/nsys_parse/<cell>.json), which is the target that builds it
    missing = {f"results/{PARSED_BY.get(name, name)}/{cell}.json" for name, cell in (expected - set(kept)) | {shared}}
    assert any(t.startswith("results/nsys_parse/") for t in missing)
    # with the other cells of their jobs (compiled_model: forward and train step of one size and context)
    job_mates = {f"results/compiled_model/{member}.json" for name, cell in expected - set(kept) if name == "compiled_model"
                 for member in experiments.job_of_cell(name, experiments.cells(name, cfg), cell)}
    assert targets == sorted(missing | job_mates)

    assert main(["missing", str(tmp_path / "pub")]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == targets
    assert (f"{n_missing} of {len(expected)} configured cells have no record, 1 to run again (out of memory while "
            "other processes held part of the card, or not run for want of GPUs)") in err


def test_missing_lists_a_job_whole_and_publish_takes_a_job_whole(tmp_path, capsys):
    """The published H100 job of one size and context: one of its two cells missing from a folder
    lists both result files, and publishing one of them alone is refused before anything is written."""
    from cs336report.cli import main
    from cs336report.config import Config
    from cs336report.records.store import load, save
    from cs336report.steps.publish import missing_targets, publish

    job = Path(__file__).parent / "fixtures/compile/job-h100"
    forward, train = sorted(str(p) for p in (job / "results/compiled_model").glob("*.json.gz"))
    with pytest.raises(ValueError, match=r"naive-fp32-small-ctx128-forward-compiled.*naive-fp32-small-ctx128-compiled"
                                         r".*naive-fp32-small-ctx128-train_step-compiled"):
        publish([forward], {}, tmp_path / "pub", job / "benchmarks")
    assert not (tmp_path / "pub").exists()
    # the command says why in one line, without a traceback, and fails
    assert main(["publish", forward, "--config-json", "{}", "--out", str(tmp_path / "pub"),
                 "--benchmarks", str(job / "benchmarks")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: naive-fp32-small-ctx128-forward-compiled.json.gz: cell") and "Traceback" not in err
    assert not (tmp_path / "pub").exists()

    import yaml

    data = yaml.safe_load((Path(__file__).parents[1] / "workflow/config/default.yaml").read_text())
    # the folder's config is the one the H100 job ran under: the GPU grid, with its one size and context
    data["grids"]["gpu"]["compiled_model"] = {"sizes": ["small"], "contexts": [128], "modes": ["forward", "train_step"]}
    cfg = Config.from_dict({**data, "device": "auto"}, source="test", cuda_available=True)
    config = {**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}
    # the train step as a record of its own (as a run before jobs made it): the folder lacks the forward cell
    alone = {k: v for k, v in load(train).items() if k not in ("job", "_path")}
    publish([str(save(alone, tmp_path / "old/compiled_model" / Path(train).name[:-3]))], config, tmp_path / "pub",
            tmp_path / "no-benchmarks")
    def compiled(targets):
        return [t for t in targets if t.endswith("-compiled.json")]  # not the uncompiled twins

    targets, n_missing, n, _ = missing_targets(tmp_path / "pub")
    assert compiled(targets) == [f"results/compiled_model/{Path(p).name[:-3]}" for p in (forward, train)]
    assert n_missing == n - 1  # the forward cell is the only compiled one missing; the train step is listed with it
    # the same job run with other settings is refused, naming the file and the setting, before anything is written
    before = (tmp_path / "pub/manifest.json").read_bytes()
    other = []
    for p in (forward, train):
        record = {k: v for k, v in load(p).items() if k != "_path"}
        record["config"]["measured_steps"] = 20
        other.append(str(save(record, tmp_path / "other/compiled_model" / Path(p).name[:-3])))
    with pytest.raises(ValueError, match=r"other/compiled_model/naive-fp32-small-ctx128-forward-compiled.json: .*"
                                         r"measured_steps: 20, the folder's config gives 10"):
        publish(other, config, tmp_path / "pub", job / "benchmarks", merge=True)
    assert (tmp_path / "pub/manifest.json").read_bytes() == before
    publish([forward, train], config, tmp_path / "pub", job / "benchmarks", merge=True)
    targets, n_missing, n, _ = missing_targets(tmp_path / "pub")
    assert compiled(targets) == [] and n_missing == n - 2
    assert main(["missing", str(tmp_path / "pub")]) == 0 and "-compiled.json" not in capsys.readouterr().out


def test_settings_a_machine_resolves_are_not_compared_when_merging():
    """The published nsys records ran under Nsight Systems; the folder's config read on a machine
    without nsys resolves their cells to torch.profiler. They still merge; another setting does not."""
    from cs336report.experiments import expected_cells
    from cs336report.records.store import load
    from cs336report.steps.publish import _check_settings, published_files

    out = Path(__file__).parents[1] / "report/data"
    files, config = published_files(out)
    expected = expected_cells(config)
    path = next(f for f in files if "/nsys_profile/" in f)
    record = load(path)
    assert record["config"]["profiler"] == "nsys"
    _check_settings(record, expected, path, out)  # profiler differs only by machine
    record["config"]["warmup_steps"] += 1
    with pytest.raises(ValueError, match=r"nsys_profile/.*warmup_steps: \d+, the folder's config gives \d+\)"):
        _check_settings(record, expected, path, out)


def test_missing_names_the_config_it_cannot_resolve(run_results, tmp_path, capsys):
    from cs336report.cli import main
    from cs336report.steps.publish import missing_targets, publish

    paths, benchmarks = run_results
    publish(paths, {"device": "cpu", "grids": "not a mapping"}, tmp_path / "pub", benchmarks)
    with pytest.raises(ValueError, match=r"pub/config.json.*cannot resolve"):
        missing_targets(tmp_path / "pub")
    assert main(["missing", str(tmp_path / "nowhere")]) == 2
    assert "nowhere/manifest.json" in capsys.readouterr().err


def test_missing_can_list_the_cells_timed_host_bound_beside_other_jobs(tmp_path, capsys):
    """Sixteen records of a run on 4 H200s (tests/fixtures/bf16_beside_neighbours_h200): with
    --host-bound, the host-bound ones timed beside other jobs are listed to time again; no others."""
    from cs336report.cli import main
    from cs336report.config import Config, load_files
    from cs336report.records.store import host_bound_beside_jobs, load
    from cs336report.steps.publish import missing_targets, publish

    fixture = Path(__file__).parent / "fixtures/bf16_beside_neighbours_h200"
    paths = sorted(str(p) for p in fixture.glob("*/*.json.gz"))
    cfg = Config.from_dict(load_files([Path(__file__).parents[1] / "workflow/config/default.yaml"]),
                           cuda_available=True)
    publish(paths, {**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}, tmp_path / "pub",
            tmp_path / "no-benchmarks")
    beside = {f"results/{load(p)['experiment']}/{load(p)['cell']}.json" for p in paths if host_bound_beside_jobs(load(p))}
    assert 0 < len(beside) < len(paths)  # the fixture holds both kinds
    plain, n_missing, _, n_again = missing_targets(tmp_path / "pub")
    listed, n_missing_too, _, n_again_too = missing_targets(tmp_path / "pub", host_bound=True)
    assert set(listed) - set(plain) == beside and set(plain) <= set(listed)
    assert n_missing_too == n_missing and n_again_too == n_again + len(beside)
    assert main(["missing", str(tmp_path / "pub"), "--host-bound"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == listed and "host-bound and timed beside other jobs" in err


def test_a_gloo_all_reduce_timed_beside_other_jobs_is_listed_and_named():
    """A Gloo all-reduce runs on the CPU: timed beside other jobs of a run on several GPU slots, it is
    listed to time again like a host-bound step, and the all-reduce table's note names it; an NCCL
    cell beside the same jobs is not, nor a Gloo cell that ran alone."""
    from cs336report.records.store import host_bound_beside_jobs, load
    from cs336report.report.ddp import allreduce_frame, allreduce_table

    folder = Path(__file__).resolve().parents[1] / "report/data/distributed_communication_single_node"
    if not (folder / "gloo-w2.json.gz").exists():
        pytest.skip("no published records")
    records = {p.name.split(".")[0]: {**load(p), "_path": str(p)} for p in sorted(folder.glob("*.json.gz"))}
    gloo, nccl = records["gloo-w4"], records["nccl-w2"]
    assert gloo["contention"]["neighbour_job_pids"] and nccl["contention"]["neighbour_job_pids"]
    assert host_bound_beside_jobs(gloo) and not host_bound_beside_jobs(nccl)
    alone = {**gloo, "contention": {**gloo["contention"], "neighbour_job_pids": []}}
    assert not host_bound_beside_jobs(alone)
    note = allreduce_table(allreduce_frame(list(records.values()))).note
    assert "the Gloo cells of 2, 4, 6 processes were timed while other jobs of the workflow ran" in note
    only_alone = [r if r["config"]["backend"] != "gloo" else {**r, "contention": {}} for r in records.values()]
    assert "were timed while other jobs" not in allreduce_table(allreduce_frame(only_alone)).note
