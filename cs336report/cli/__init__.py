"""Command line of cs336report: the checks a user runs, and one subcommand per workflow step.

    python -m cs336report check-config workflow/config/default.yaml [my-settings.yaml ...]
    python -m cs336report check-student --check-json @JSON --out results/check_student/checkout.json
    python -m cs336report cells benchmarking --config workflow/config/default.yaml
    python -m cs336report run benchmarking --name NAME --cell JSON --out results/benchmarking/NAME.json [--log LOG]
    python -m cs336report run-job compiled_model --job JOB --cells '[[NAME, CELL], ...]' --out FILE ...
    python -m cs336report worker-stop
    python -m cs336report render --config-json JSON --out report results/**/*.json
    python -m cs336report parse-snapshot results/memory_profiling/NAME.pickle --result results/memory_profiling/NAME.json --out results/memory_profiling_parse/NAME.json
    python -m cs336report profile ddp_overlap_profile --name NAME --cell JSON --out-dir results/ddp_overlap_profile/NAME
    python -m cs336report profile-job nsys_profile --job JOB --cells '[[NAME, CELL], ...]' --out-dir results/nsys_profile/JOB
    python -m cs336report nsys-stats results/nsys_profile/JOB/NAME --out-dir results/nsys_stats/NAME
    python -m cs336report parse-nsys results/nsys_stats/NAME/stats --run results/nsys_profile/JOB/NAME/run.json --out FILE
    python -m cs336report parse-ddp-timeline results/ddp_overlap_stats/NAME --run results/ddp_overlap_profile/NAME/run.json --out FILE
    python -m cs336report parse-fsdp-forward results/fsdp_accounting_stats/NAME --run results/fsdp_accounting_profile/NAME/run.json --out FILE
    python -m cs336report rerender-check [--data report/data --report report/report.md]

This module builds the parser and dispatches; each subcommand's handler is in :mod:`.handlers`.
"""

from __future__ import annotations

import argparse
import textwrap

from .handlers import (_capture_nsys_memory, _cells, _check_config, _check_student, _missing, _nsys_stats,
                       _parse_ddp_timeline, _parse_fsdp_forward, _parse_nsys, _parse_snapshot, _profile, _profile_job,
                       _publish, _render, _rerender_check, _run, _run_job, _worker_stop)


# The commands a user types; the others are the workflow's steps, which its rules run.
USER_COMMANDS = ("check-config", "cells", "missing", "rerender-check", "worker-stop")


def _help_epilog(helps: dict[str, str]) -> str:
    """The commands (``helps``: each one's help) in two lists, a user's and the workflow's."""
    width = max(map(len, helps)) + 4

    def listed(names) -> list[str]:
        return [textwrap.fill(helps[c], 100, initial_indent=f"  {c:<{width - 2}}", subsequent_indent=" " * width)
                for c in names]

    lines = ["commands to type:", *listed(USER_COMMANDS), "",
             "steps of the workflow (its rules run them: snakemake --cores 1 report):",
             *listed(c for c in helps if c not in USER_COMMANDS)]
    return "\n".join(lines + ["", "python -m cs336report COMMAND --help describes a command's arguments."])


def main(argv: list[str] | None = None) -> int:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="cs336report", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s [-h] [--version] COMMAND ...",
                                     description="The CS336 Systems experiments and their report: the checks a "
                                                 "user runs, and the steps of the Snakemake workflow.")
    parser.add_argument("--version", action="version", version=f"cs336report {__version__}")
    # listed by the epilog, in two groups, rather than in one list of choices
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS)
    helps: dict[str, str] = {}

    def command(name: str, help: str) -> argparse.ArgumentParser:
        helps[name] = help
        return sub.add_parser(name, help=help)

    p = command("check-config", help="validate config files (merged in order, as Snakemake's --configfile "
                "does) and resolve the device")
    p.add_argument("config", nargs="+")
    p.set_defaults(func=_check_config)

    p = command("check-student", help="run the probes of a student's checkout and a user's model (the "
                "workflow's first rule): import them and run each piece once, before any cell")
    p.add_argument("--check-json", required=True, help="the config's student key, model source, device and file, "
                   "as JSON or @FILE")
    p.add_argument("--out", required=True, help="JSON to write: the checkout's entry with each piece's verdict, and "
                   "the checked model")
    p.set_defaults(func=_check_student)

    p = command("cells", help="list the cells of an experiment")
    p.add_argument("experiment")
    p.add_argument("--config", default="workflow/config/default.yaml")
    p.set_defaults(func=_cells)

    p = command("run", help="measure one cell and write its result JSON")
    _gpus_argument(p)
    p.add_argument("experiment")
    p.add_argument("--name", required=True, help="cell name")
    p.add_argument("--cell", required=True, help="the resolved cell, as JSON or @FILE")
    p.add_argument("--out", required=True)
    p.add_argument("--log", help="the cell's log: with it, a warm worker process runs the cell and writes its "
                   "output there (cs336report.run.worker); without it, this process runs the cell")
    p.add_argument("--no-worker", action="store_true", help="run the cell in this process even with --log "
                   "(also CS336REPORT_WORKER=0, which the workflow sets for `worker: false`)")
    p.set_defaults(func=_run)

    p = command("run-job", help="measure several cells in one process, in order, and write a result JSON each")
    _gpus_argument(p)
    p.add_argument("experiment")
    p.add_argument("--job", required=True, help="job name, recorded in each result")
    p.add_argument("--cells", required=True, help="the cells as a JSON list of [name, resolved cell], or @FILE")
    p.add_argument("--out", required=True, nargs="+", help="one result file per cell, in the same order")
    p.add_argument("--no-share", action="store_true", help="each cell builds its own state (no shared dict)")
    p.set_defaults(func=_run_job)

    p = command("worker-stop", help="ask the warm workers of this folder's workflow to exit")
    p.add_argument("--dir", help="their socket folder (default: .snakemake/cs336report-worker)")
    p.set_defaults(func=_worker_stop)

    p = command("render", help="render report.md and index.html from result files")
    p.add_argument("results", nargs="+", help="result files (.json, or published .json.gz)")
    p.add_argument("--config-json", required=True, help="the resolved config, as JSON or @FILE")
    p.add_argument("--out", required=True, help="report folder")
    p.set_defaults(func=_render)

    p = command("publish", help="copy result files and their job timings into a published folder")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("--config-json", required=True, help="the resolved config, as JSON or @FILE")
    p.add_argument("--out", required=True, help="published folder, e.g. report/data")
    p.add_argument("--benchmarks", default="benchmarks", help="Snakemake's benchmark folder of the run")
    p.add_argument("--merge", action="store_true",
                   help="keep the folder's other records; replace only the cells given")
    p.add_argument("--allow-dirty", action="store_true",
                   help="publish records without a commit, with uncommitted changes or whose code differs from their "
                        "commit's; the report says so on its first screen")
    p.add_argument("--mixed-cards", action="store_true",
                   help="publish even when the records name more than one GPU")
    p.add_argument("--add-experiment", metavar="NAME",
                   help="with --merge: add experiment NAME, which the folder's config lacks, taking its entry from "
                        "the same grid of workflow/config/default.yaml; only NAME's records are accepted")
    p.set_defaults(func=_publish)

    p = command("missing", help="list the result files of the configured cells a published folder lacks")
    p.add_argument("folder", help="published folder, e.g. report/data")
    p.add_argument("--host-bound", action="store_true", help="also the cells whose time the host sets (host-bound "
                   "steps, Gloo all-reduces) timed beside other jobs (a run on several GPU slots), to time again "
                   "with one slot")
    p.set_defaults(func=_missing)

    p = command("profile", help="run one cell under nsys (or torch.profiler) into a folder")
    _gpus_argument(p)
    p.add_argument("experiment")
    p.add_argument("--name", required=True, help="cell name")
    p.add_argument("--cell", required=True, help="the resolved cell, as JSON or @FILE")
    p.add_argument("--out-dir", required=True, help="folder for run.json, the profile and launch.json")
    p.set_defaults(func=_profile)

    p = command("profile-job", help="run several cells in one process under nsys, a capture range each, "
                "into a folder per cell")
    _gpus_argument(p)
    p.add_argument("experiment")
    p.add_argument("--job", required=True, help="job name, recorded in each result")
    p.add_argument("--cells", required=True, help="the cells as a JSON list of [name, resolved cell], or @FILE")
    p.add_argument("--out-dir", required=True, help="the job's folder: <out-dir>/<cell>/ gets each cell's files")
    p.set_defaults(func=_profile_job)

    p = command("capture-nsys-memory", help="memory_profiling (f): one step under nsys with CUDA memory tracking, "
                "exported to SQLite and parsed by block into a result JSON (not run without a GPU and nsys)")
    _gpus_argument(p)
    p.add_argument("--name", required=True, help="cell name")
    p.add_argument("--cell", required=True, help="the resolved cell, as JSON or @FILE")
    p.add_argument("--out-dir", required=True, help="folder for run.json, the report, its SQLite export and stats")
    p.add_argument("--out", required=True, help="result JSON to write")
    p.set_defaults(func=_capture_nsys_memory)

    p = command("nsys-stats", help="export the stats CSVs of a profiled cell's folder")
    p.add_argument("profile_dir")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--nsys", help="nsys executable (default: the cell's, on PATH)")
    p.add_argument("--reports", help="comma-separated nsys stats reports (default: the kernel, NVTX and CUDA API "
                   "summaries of nsys_profile)")
    p.set_defaults(func=_nsys_stats)

    p = command("parse-nsys", help="parse nsys stats exports (PREFIX_<report>.csv) into a result JSON")
    p.add_argument("prefix", help="the --output PREFIX given to nsys stats, or a folder of exports")
    p.add_argument("--out", required=True, help="result JSON to write")
    p.add_argument("--run", help="the profiled run's run.json (status, cell, Python timer)")
    p.add_argument("--name", help="cell name (default: from the run, else the folder name); without --run "
                   "it gives the cell's settings: <implementation>-<precision>-<size>-ctx<N>-<mode>")
    p.add_argument("--batch-size", type=int, help="without --run: the profiled run's batch size, which the "
                   "FLOPs of nsys_profile (e) need")
    p.set_defaults(func=_parse_nsys)

    p = command("parse-ddp-timeline", help="a profiled DDP cell's nsys trace exports into a result JSON "
                "(each rank's last step: kernels per stream, communication hidden behind compute)")
    p.add_argument("stats_dir", help="the folder nsys-stats wrote (stats_cuda_gpu_trace.csv, stats_nvtx_gpu_proj_trace.csv)")
    p.add_argument("--run", required=True, help="the profiled run's run.json")
    p.add_argument("--out", required=True, help="result JSON to write")
    p.add_argument("--name", help="cell name (default: the run's)")
    p.set_defaults(func=_parse_ddp_timeline)

    p = command("parse-fsdp-forward", help="a profiled FSDP cell's nsys trace exports into a result JSON "
                "(each rank's last forward pass: kernels per stream, all-gathers against compute)")
    p.add_argument("stats_dir", help="the folder nsys-stats wrote (stats_cuda_gpu_trace.csv, stats_nvtx_gpu_proj_trace.csv)")
    p.add_argument("--run", required=True, help="the profiled run's run.json")
    p.add_argument("--out", required=True, help="result JSON to write")
    p.add_argument("--name", help="cell name (default: the run's)")
    p.set_defaults(func=_parse_fsdp_forward)

    p = command("parse-snapshot", help="parse a CUDA memory snapshot pickle into a result JSON")
    p.add_argument("snapshot", help="snapshot pickle (optionally .gz), as written by _dump_snapshot")
    p.add_argument("--out", required=True, help="result JSON to write")
    p.add_argument("--result", help="the capture's result JSON (status, config and provenance come from it)")
    p.add_argument("--name", help="cell name (default: the capture's, else the file name)")
    p.add_argument("--cell", help="the cell config as JSON, when there is no capture result")
    p.add_argument("--top", type=int, default=20, help="largest allocations to keep")
    p.add_argument("--max-points", type=int, default=3000, help="points of the plotted timeline")
    p.add_argument("--max-snapshot-bytes", type=int, default=None, help="most bytes a gzip snapshot may decompress "
                   "to (default: 100 times the file, at least 8 MiB); a larger one is refused early")
    p.set_defaults(func=_parse_snapshot)

    p = command("rerender-check", help="render the published report again from its records and compare "
                "it with the committed report.md (timestamps masked)")
    p.add_argument("--data", default="report/data", help="published folder")
    p.add_argument("--report", default="report/report.md", help="the committed Markdown report")
    p.add_argument("--keep", help="render into this folder (default: a temporary one, removed)")
    p.set_defaults(func=_rerender_check)

    parser.epilog = _help_epilog(helps)
    args = parser.parse_args(argv)
    # With several GPU slots, a job runs on the GPUs and cores it claims, one that times nothing on
    # the cores the timed jobs leave (cs336report.machine.gpu_slots); otherwise nothing is bound.
    from ..machine.gpu_slots import claim

    # The slots stay held until this process has exited, shutdown included (gpu_slots.claim).
    with claim(getattr(args, "gpus", 0), until_exit=True):
        return args.func(args)


def _gpus_argument(p) -> None:
    p.add_argument("--gpus", type=int, default=0, help="GPUs the job holds (Snakemake's resources.gpu): with "
                   "several GPU slots it runs on that many free ones and their cores (cs336report.machine.gpu_slots)")
