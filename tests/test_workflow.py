"""End to end: the whole Snakemake workflow on the CPU grid, in a copy of the repository."""

import json
import os
import re

import pytest

from conftest import snakemake
from helpers import run_config, without_record_links

from cs336report.parsers.kernel_records import kernel_rows
from cs336report.report.tables import fmt_mean_std, sig

pytestmark = pytest.mark.slow


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a (dry) run: rule -> number of jobs."""
    if "Nothing to be done" in output:
        return {}
    block = output.split("Job stats:", 1)[1]
    counts = {}
    for line in block.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    counts.pop("total", None)
    return counts


def test_cpu_report_has_every_section_and_measured_numbers(workdir):
    md = without_record_links((workdir / "report/cpu/report.md").read_text())
    html = (workdir / "report/cpu/index.html").read_text()
    assert "CPU run: no CUDA device was available" in md
    assert '<h2 id="benchmarking_script">' in html and "## benchmarking\\_script" in md
    result = json.loads((workdir / "results/benchmarking/naive-fp32-mini-ctx128-forward.json").read_text())
    stats = result["data"]["stats_s"]
    assert fmt_mean_std(stats["mean"], stats["std"], 1e-3) in md
    assert result["provenance"]["device"] == "cpu"
    assert (workdir / "report/cpu/figures/benchmarking_time_naive_fp32.png").stat().st_size > 1000
    assert 'src="data:image/png;base64,' in html
    memory = md.split('<a id="memory_profiling"></a>', 1)[1].split('<a id="pytorch_attention"></a>', 1)[0]
    assert "Not run: needs a CUDA device" in memory and '<h2 id="memory_profiling">' in html


def test_the_run_prints_a_line_a_job_and_ends_naming_the_report(workdir):
    """The console of the run that built the CPU report: no input lists, a line a job with its
    phases, and a last line naming the pages to read."""
    lines = (workdir / ".snakemake" / "console.txt").read_text().splitlines()
    assert lines[-1].endswith("The answers: report/cpu/answers.md; the whole report: report/cpu/index.html"), lines[-3:]
    assert not any(line.lstrip().startswith(("input:", "output:", "SNAKEMAKE")) for line in lines)
    jobs = [line for line in lines if re.match(r"^\[\d\d:\d\d:\d\d\] \d+/\d+ ", line)]
    if jobs:  # a run that had jobs (a reused, up-to-date folder has none)
        total = int(jobs[0].split()[1].split("/")[1])
        assert len(jobs) == total and jobs[-1].endswith(f"{total}/{total} report")
        phases = [line for line in lines if line.startswith("    ")]
        assert len(lines) <= 2 + len(jobs) + len(phases) + 2, lines[:5]
        if any(" benchmarking " in job for job in jobs):  # a timed cell ran: its warm-up and timing show
            assert "    warm-up: 5 steps" in lines and "    timing 10 steps" in lines


def test_the_jobs_share_a_bytecode_cache_only_where_the_installation_has_none(workdir):
    """Where torch's installation holds its bytecode (pip's), the jobs read it and no run cache is
    made; where it has none and may not be written, every job's Python compiles into the run's cache."""
    import os

    from cs336report.machine import bytecode

    cache = workdir / ".snakemake" / "cs336report" / "pycache"
    compiled = [p.as_posix() for p in cache.rglob("*.pyc")]
    wanted, _ = bytecode.bytecode_env(dict(os.environ), str(workdir))
    if wanted:
        assert any("/torch/" in p for p in compiled) and any("/cs336report/" in p for p in compiled)
    else:
        assert bytecode.installed_bytecode() or "PYTHONDONTWRITEBYTECODE" not in os.environ
        assert compiled == []


def test_second_run_does_nothing(workdir):
    run = snakemake(workdir, "-n", "report")
    assert run.returncode == 0
    assert job_counts(run.stdout + run.stderr) == {}


def test_changing_one_size_reruns_its_cells_and_the_report_only(workdir):
    (workdir / "override.yaml").write_text("sizes:\n  mini: {d_model: 128, d_ff: 384, num_layers: 4, num_heads: 4}\n")
    run = snakemake(workdir, "-n", "report", "--configfile", "workflow/config/default.yaml", "override.yaml")
    assert run.returncode == 0, run.stderr[-2000:]
    counts = job_counts(run.stdout + run.stderr)
    mini_cells = [p for p in (workdir / "results/benchmarking").glob("*-mini-*.json")]
    profiled = {rule: len(list((workdir / "results" / rule).glob("*-mini-*"))) for rule in
                ("benchmarking_warmup", "nsys_profile", "nsys_stats", "nsys_parse", "benchmarking_bf16",
                 "autocast_memory", "autocast_saved_tensors")}
    assert counts == {"benchmarking": len(mini_cells), "report": 1,
                      **{rule: n for rule, n in profiled.items() if n}}


def jobs_after_editing(workdir, module: str) -> dict[str, int]:
    """The jobs a dry run of the report schedules once ``module`` of the package is edited (then restored)."""
    path = workdir / "cs336report" / module
    original = path.read_text()
    path.write_text(original + "\n# edited\n")
    try:
        run = snakemake(workdir, "-n", "report")
    finally:
        path.write_text(original)
    return job_counts(run.stdout + run.stderr)


def test_editing_experiment_code_reruns_that_experiment_only(workdir):
    assert jobs_after_editing(workdir, "experiments/benchmarking_script/roofline.py") == {"roofline": 1, "report": 1}


def test_editing_the_compile_experiment_reruns_the_compiled_cells_only(workdir):
    jobs = jobs_after_editing(workdir, "experiments/torch_compile.py")
    records = {rule: [json.loads(p.read_text()) for p in (workdir / "results" / rule).glob("*.json")]
               for rule in ("compiled_attention", "compiled_attention_overhead", "compiled_model", "optimized_step")}
    # a record made by a job of several cells counts its job once
    compiled = {rule: len({(r.get("job") or {}).get("name") or r["cell"] for r in rs}) for rule, rs in records.items()}
    assert all(compiled.values()), compiled  # the CPU grid runs each of them
    assert len(records["compiled_model"]) == 2 and compiled["compiled_model"] == 1  # forward and train step, one job
    assert jobs == {**compiled, "report": 1}  # not the eager attention grid


def test_uncompiled_twins_that_benchmarking_does_not_run_are_their_own_jobs(workdir):
    """Without tiny in the benchmarking grid, compiled_model runs the tiny cells' uncompiled twins itself,
    one job each; the compiled job, whose cells did not change, is not rerun."""
    (workdir / "twins.yaml").write_text("grids:\n  cpu:\n    benchmarking:\n      sizes: [mini]\n")
    run = snakemake(workdir, "-n", "report", "--configfile", "workflow/config/default.yaml", "twins.yaml")
    assert run.returncode == 0, run.stderr[-2000:]
    jobs = job_counts(run.stdout + run.stderr)
    assert jobs.get("compiled_model_eager") == 2 and "compiled_model" not in jobs, jobs
    for mode in ("forward", "train_step"):
        assert f"results/compiled_model/naive-fp32-tiny-ctx32-{mode}.json" in run.stdout + run.stderr


def test_editing_the_coverage_module_rerenders_the_report_only(workdir):
    assert jobs_after_editing(workdir, "records/coverage.py") == {"report": 1}


def test_installing_or_upgrading_triton_reruns_the_rules_that_run_it(workdir, tmp_path):
    """Triton's version is a param of handout_tests and the flash rules: another Triton (here a
    distribution record that shadows the installed one, or a first one where none is) reruns their
    cells and the report, and nothing else."""
    import subprocess
    import sys

    dist = tmp_path / "site" / "triton-0.0.0+test.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 0.0.0+test\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(dist.parent), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "-n", "report"], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    output = run.stdout + run.stderr
    cells = {rule: len(list((workdir / "results" / rule).glob("*.json"))) for rule in
             ("handout_tests", "flash_benchmarking", "flash_leaderboard")}
    assert cells["handout_tests"] and cells["flash_benchmarking"], cells
    assert job_counts(output) == {**{rule: n for rule, n in cells.items() if n}, "report": 1}
    assert "triton 0.0.0+test" in output  # the changed param, named in Snakemake's reason


def hints(markdown: str) -> tuple[set[str], list[str]]:
    """The commands a report's "not run" lines give to run on its machine, and what the others say
    their result needs (a machine, a setting), from its Markdown."""
    text = without_record_links(markdown).replace("\\_", "_")
    here = set(re.findall(r"Run it with `([^`]+)`", text)) | set(re.findall(r"not run \(`([^`]+)`\)", text))
    elsewhere = re.findall(r"It needs (.+?)(?:: run `[^`]+` there)?\.(?:\s|$)", text)
    elsewhere += re.findall(r"not run \(needs ([^:)]+)(?:: `|\))", text)  # the summary's (not the appendix's reasons)
    return here, elsewhere


def planned_jobs(workdir, command: str) -> dict[str, int]:
    """The jobs a dry run of a hint's command plans in the built CPU workflow."""
    import subprocess
    import sys

    words = command.split()
    assert words[:3] == ["snakemake", "--cores", "1"] and "--forcerun" in words, command
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", *words[1:]], cwd=workdir, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, (command, run.stderr[-2000:])
    return job_counts(run.stdout + run.stderr)


def test_every_not_run_hint_plans_the_missing_jobs_or_names_the_machine(workdir, tmp_path):
    """Each "not run" line of the CPU report, and of the same report without some rules' records,
    gives a command whose dry run plans those rules' jobs, or says which machine (or setting) the
    result needs: the CPU grid has no cells of the GPU-only rules, so no command runs them here."""
    from cs336report.report.render import render_report

    here, elsewhere = hints((workdir / "report/cpu/report.md").read_text())
    assert elsewhere and all(re.search(r"\bCUDA GPUs?\b", need) for need in elsewhere), elsewhere
    dropped = ("benchmarking_warmup", "naive_ddp_benchmarking", "ddp_bucketed_benchmarking")
    results = [p for p in sorted((workdir / "results").glob("*/*.json")) if p.parent.name not in dropped]
    render_report([str(p) for p in results], run_config(workdir), tmp_path / "out", links_from=workdir / "report/cpu")
    more, _ = hints((tmp_path / "out/report.md").read_text())
    forced = {command: set(command.split("--forcerun ", 1)[1].split(" -- ")[0].split()) for command in here | more}
    assert set(dropped) <= set().union(*forced.values()), forced  # each missing rule has a command
    for command, rules in forced.items():
        jobs = planned_jobs(workdir, command)
        assert rules <= set(jobs) and jobs.get("report") == 1, (command, jobs)


def test_bad_config_stops_before_any_job(workdir, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grids:\n  cpu:\n    benchmarking:\n      sizes: [mini, colossal]\n      contexts: [32]\n")
    run = snakemake(workdir, "report", "--configfile", "workflow/config/default.yaml", str(bad))
    assert run.returncode != 0
    assert f"{bad}: key 'grids.cpu.benchmarking.sizes[1]'" in run.stderr and "colossal" in run.stderr
    assert "Job stats" not in run.stdout + run.stderr


def test_cpu_report_says_its_phases_were_timed_by_the_wall_clock_inside_the_steps(workdir):
    md = without_record_links((workdir / "report/cpu/report.md").read_text())
    section = md.split('<a id="evidence-benchmarking_script"></a>', 1)[1].split("<a id=", 1)[0]
    assert "phases were timed by the wall clock at their starts and ends" in section
    assert "between two synchronizations" not in section and "CUDA events" not in section


def test_cpu_report_has_the_nsys_profile_section_from_torch_profiler(workdir):
    from cs336report.report.render import md_cell

    md = without_record_links((workdir / "report/cpu/report.md").read_text())
    section = md.split('<a id="evidence-nsys_profile"></a>', 1)[1].split("<a id=", 1)[0]
    assert "Profiler used: torch.profiler" in section and "PyTorch operators timed on the CPU" in section
    result = json.loads((workdir / "results/nsys_parse/naive-fp32-mini-ctx32-forward.json").read_text())
    data = result["data"]
    assert result["status"] == "ok" and data["source"] == "torch.profiler" and data["exact"]
    assert all(check["ok"] for check in data["checks"]["range_instances"].values())
    top = max((k for k in kernel_rows(data["kernels"]) if k["range"] == "forward"), key=lambda k: k["total_ns"])
    assert md_cell(top["short_name"]) in section


def test_cpu_report_has_the_flash_section_with_measured_medians(workdir):
    md = without_record_links((workdir / "report/cpu/report.md").read_text())
    flash = md.split('<a id="evidence-flash_benchmarking"></a>', 1)[1].split('<a id="appendix">', 1)[0]
    assert "CPU run: these times come from a wall-clock loop" in flash
    assert "Not run: this run has no flash\\_leaderboard record (the harness needs CUDA)" in flash
    result = json.loads((workdir / "results/flash_benchmarking/naive-fp32.json").read_text())
    shape = result["data"]["shapes"][0]
    median_ms = shape["passes"]["forward_backward"]["stats_s"]["median"] * 1e3
    assert f"| {shape['d']} | {shape['seq']} |" in flash and sig(median_ms) in flash
    assert (workdir / "report/cpu/figures/flash_latency_fp32.png").stat().st_size > 1000


def test_cpu_report_has_the_attention_and_compile_sections(workdir):
    md = without_record_links((workdir / "report/cpu/report.md").read_text())
    attention = md.split('<a id="evidence-pytorch_attention"></a>', 1)[1].split("<a id=", 1)[0]
    result = json.loads((workdir / "results/pytorch_attention/naive-fp32-d64-s256.json").read_text())
    stats = result["data"]["forward_stats_s"]
    assert f"| 64 | 256 | {fmt_mean_std(stats['mean'], stats['std'], 1e-3)} |" in attention
    assert "the bytes saved for backward grow as seq to the power" in attention
    compiled = md.split('<a id="evidence-torch_compile"></a>', 1)[1].split("<a id=", 1)[0]
    for part in ("(a) Compiled attention", "(b) Compiled Transformer", "(c) The optimized configuration"):
        assert part in compiled and "Not run" not in compiled.split(part, 1)[1][:200]
    first = json.loads((workdir / "results/compiled_model/naive-fp32-tiny-ctx32-forward-compiled.json").read_text())
    assert first["status"] == "ok" and first["data"]["compile"]["graphs"] >= 1
    train = json.loads((workdir / "results/compiled_model/naive-fp32-tiny-ctx32-train_step-compiled.json").read_text())
    assert train["status"] == "ok" and train["job"] == first["job"]  # one job compiled the model for both
    both = first["data"]["compile"]["first_call_s"] + train["data"]["compile"]["first_call_s"]
    assert f"| tiny | 32 | train step (AdamW) |" in compiled and f"{sig(both)} (2 calls)" in compiled
    assert (workdir / "report/cpu/figures/pytorch_attention_scaling.png").stat().st_size > 1000

def test_cpu_report_has_the_mixed_precision_sections(workdir):
    from cs336report.report.tables import sig

    md = without_record_links((workdir / "report/cpu/report.md").read_text())
    accumulation = md.split('<a id="evidence-mixed_precision_accumulation"></a>', 1)[1].split("<a id=", 1)[0]
    result = json.loads((workdir / "results/mixed_precision_accumulation/cpu.json").read_text())
    for row in result["data"]["rows"]:
        assert f"| {row['description']} |" in accumulation and format(row["result"], ".8g") in accumulation
    section = md.split('<a id="evidence-benchmarking_mixed_precision"></a>', 1)[1].split("<a id=", 1)[0]
    short = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
    ln = [next(short[row["dtype"]] for row in json.loads((workdir / f"results/autocast_dtypes/cpu-{t}.json").read_text())
               ["data"]["rows"] if row["component"] == "ln output") for t in ("fp16", "bf16")]
    assert f"| LayerNorm output | {ln[0]} | {ln[1]} |" in section
    assert "torch keeps no peak-memory counter for the CPU" in section
    bf16 = json.loads((workdir / "results/benchmarking_bf16/naive-bf16-tiny-ctx32-forward.json").read_text())
    assert sig(bf16["data"]["stats_s"]["mean"] * 1e3) in section
    assert not list((workdir / "results/benchmarking_bf16").glob("*-fp32-*"))  # fp32 comes from benchmarking
    census = json.loads((workdir / "results/autocast_saved_tensors/native-tiny-census.json").read_text())
    assert census["status"] == "ok" and all(case["status"] == "ok" for case in census["data"]["cases"])


def test_editing_the_leaderboard_reruns_the_leaderboard_not_the_flash_grid(tmp_path):
    """The GPU grid's flash jobs share attention code with the leaderboard; the leaderboard's own module is its alone."""
    import shutil
    import subprocess

    from conftest import REPO

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        if (REPO / rel).is_file() and not rel.startswith(("report/", "tests/")):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, tmp_path / rel)
    # the GPU grid's DAG on this machine, as for jobs that run elsewhere (device: cuda is checked where they run)
    (tmp_path / "gpu.yaml").write_text("device: cuda\njobs_elsewhere: true\n")
    args = ["-n", "--rerun-triggers", "mtime", "--configfile", "workflow/config/default.yaml", "gpu.yaml"]
    listed = snakemake(tmp_path, *args, "--list-target-rules")  # the DAG builds with the GPU grid
    assert listed.returncode == 0, listed.stderr[-2000:]
    flash = [f"results/flash_benchmarking/{c}-{d}.json" for c in ("triton", "sdpa_cudnn") for d in ("bf16", "fp32")]
    targets = flash + ["results/flash_leaderboard/leaderboard.json"]
    for t in targets:  # results newer than every code file, as after a run
        (tmp_path / t).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / t).write_text("{}")
    assert job_counts((run := snakemake(tmp_path, *targets, *args)).stdout + run.stderr) == {}
    clock = max((tmp_path / t).stat().st_mtime for t in targets)
    for module, expected in (("experiments/flash_benchmarking/leaderboard.py", {"flash_leaderboard": 1}),
                             ("experiments/flash_benchmarking/timing.py", {"flash_leaderboard": 1, "flash_benchmarking": 4})):
        clock += 100
        os.utime(tmp_path / "cs336report" / module, (clock, clock))  # the edit
        run = snakemake(tmp_path, *targets, *args)
        assert run.returncode == 0, run.stderr[-2000:]
        assert job_counts(run.stdout + run.stderr) == expected, module
        clock += 100
        for t in targets:  # rerun: up to date again before the next edit
            os.utime(tmp_path / t, (clock, clock))


# Rules whose cells call torch.compile through cs336report.measure.compiling; the others import it with
# the shared experiment modules but never run it, so it is not among their code inputs.
COMPILING_RULES = {"compiled_attention", "compiled_attention_overhead", "compiled_model", "optimized_step"}
# Rules whose cells time each kernel through cs336report.measure.kernel_times (the shared benchmarking module
# imports it; only cells with kernel_steps call it).
KERNEL_TIMING_RULES = {"optimized_step", "flash_leaderboard", "compiled_attention_overhead"}


def _package_imports(path) -> set[str]:
    """The package files a module imports itself (relative imports, at any depth of the file)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "cs336report"
    package = list(path.relative_to(root).parent.parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.level):
            continue
        base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
        # ``from . import x`` names submodules; ``from .m import x`` imports module m (and x if a submodule)
        for parts in ([base] if node.module else []) + [base + [a.name] for a in node.names]:
            for f in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
                if parts and f.is_file():
                    found.add(f"cs336report/{f.relative_to(root).as_posix()}")
    return found


def test_each_cell_rule_lists_the_code_its_cells_run(workdir):
    """From Snakemake's record of each job's inputs: the module of the rule's cells, of its run
    function, the runner and every package module the run function's module imports."""
    import inspect
    import subprocess
    import sys
    from pathlib import Path

    from cs336report import experiments

    run = subprocess.run([sys.executable, "-m", "snakemake", "--detailed-summary", "--cores", "1"], cwd=workdir,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    inputs: dict[str, set] = {}
    for line in run.stdout.splitlines()[1:]:
        fields = line.split("\t")
        inputs.setdefault(fields[2], set()).update(f for f in fields[4].split(",") if f.startswith("cs336report/"))
    checked = 0
    for name in experiments.names():
        if name not in inputs:  # not on the CPU grid
            continue
        cells, runner = experiments.registry()[name][0], experiments.runner(name)  # the run's module imported
        root = Path(experiments.__file__).resolve().parent.parent
        modules = {Path(inspect.getsourcefile(f)).resolve() for f in (cells, runner)}
        need = {f"cs336report/{m.relative_to(root).as_posix()}" for m in modules}
        need |= {"cs336report/run/runner.py"} | _package_imports(Path(inspect.getsourcefile(runner)).resolve())
        need -= {"cs336report/__init__.py"}  # the package's version string
        if name not in COMPILING_RULES:
            need -= {"cs336report/measure/compiling.py"}
        if name not in KERNEL_TIMING_RULES:
            need -= {"cs336report/measure/kernel_times.py"}
        assert need <= inputs[name], (name, sorted(need - inputs[name]))
        checked += 1
    assert checked >= 12, sorted(inputs)


def test_the_report_rule_lists_every_package_module_the_report_imports(workdir):
    """Editing a formula of accounting.py (or any module the report package imports) re-renders the
    report, also where the results are published ones that no experiment rewrites."""
    import subprocess
    import sys
    from pathlib import Path

    run = subprocess.run([sys.executable, "-m", "snakemake", "--detailed-summary", "--cores", "1", "report"],
                         cwd=workdir, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = next(line.split("\t") for line in run.stdout.splitlines()[1:] if line.split("\t")[2] == "report")
    inputs = set(report[4].split(","))
    package = Path(__file__).resolve().parent.parent / "cs336report"
    need = set().union(*(_package_imports(f) for f in (package / "report").rglob("*.py")))
    need -= {"cs336report/__init__.py"}
    assert "cs336report/accounting/transformer.py" in need and need <= inputs, sorted(need - inputs)

