"""The handlers of the command line's subcommands (:mod:`cs336report.cli` builds the parser).

Each takes the parsed arguments, calls into a room of the package and returns the exit status; a
refused input or a failed write is an ``error: ...`` line on stderr and a non-zero status. A
handler imports what it runs inside its body, so that a command loads only the rooms it uses.
:func:`_json_arg` reads the JSON arguments the workflow passes, inline or as @FILE.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _json_arg(value: str):
    """A JSON argument, given inline or as @FILE (the workflow passes files: a cell's settings, the config)."""
    if value.startswith("@"):
        with open(value[1:]) as fh:
            return json.load(fh)
    return json.loads(value)


def _check_config(args) -> int:
    from ..config import Config, ConfigError, load_files

    try:
        cfg = Config.from_dict(load_files(args.config), source=args.config[-1], files=args.config, require_cuda=True)
        if cfg.student or cfg.model_source:  # the probes of the student's checkout and model run their code
            from ..student.check import check_config

            check_config(cfg.data.get("student"), cfg.model_source, cfg.device, args.config[-1])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{' + '.join(args.config)}: ok (device {cfg.device}, grid {cfg.grid_name})")
    return 0


def _check_student(args) -> int:
    from ..config import ConfigError
    from ..records.store import save
    from ..student.check import check_config

    given = _json_arg(args.check_json)
    try:
        checked = check_config(given["student"], given["model_source"], given["device"], given["source"],
                               given.get("files"))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    save(checked, args.out)  # written whole or not at all
    verdicts = ((checked["student"] or {}).get("adapters") or {}).items()
    print(f"{args.out}: ok" + "".join(f"; {name} {v['status']}" for name, v in verdicts))
    return 0


def _cells(args) -> int:
    from .. import experiments
    from ..config import Config, ConfigError

    if args.experiment not in experiments.registry():
        print(f"error: unknown experiment {args.experiment!r}; known: {', '.join(sorted(experiments.registry()))}",
              file=sys.stderr)
        return 2
    try:
        cfg = Config.from_file(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name in experiments.cells(args.experiment, cfg):
        print(name)
    return 0


def _run(args) -> int:
    cell = _json_arg(args.cell)
    no_worker = args.no_worker or os.environ.get("CS336REPORT_WORKER") == "0"
    if args.log and not no_worker:  # a warm worker runs it (torch is imported there, not here)
        from ..run.worker_client import run_client

        return run_client(args.experiment, args.name, cell, args.out, args.log)
    from ..run.runner import run_cell

    run_cell(args.experiment, args.name, cell, args.out)
    return 0


def _run_job(args) -> int:
    from ..records.store import result_stem

    cells = _json_arg(args.cells)
    names = [name for name, _ in cells]
    # a cell's result is <name>.json, or a file in a folder of its own (<name>/run.json, profile-job's)
    stems = [result_stem(out) if result_stem(out) in names else Path(out).parent.name for out in args.out]
    if names != stems:
        print(f"error: --out files {stems} do not match the job's cells {names} (same names, same order)",
              file=sys.stderr)
        return 2
    from ..run.runner import run_job

    run_job(args.experiment, args.job, [(name, cell, out) for (name, cell), out in zip(cells, args.out)],
            share=not args.no_share)
    return 0


def _worker_stop(args) -> int:
    from ..run.worker_client import SOCKET_DIR, stop_workers

    for line in stop_workers(args.dir or SOCKET_DIR):
        print(line)
    return 0


def _render(args) -> int:
    from ..config import edition_id, reference_grids
    from ..experiments import expected_cells
    from ..report.render import render_report

    config = _json_arg(args.config_json)
    # the report rule passes the configured cells with their settings (_expected) and the default grids
    # (_reference_grids); a config without them has them resolved here, so that the report imports no
    # experiment and reads no config file
    expected = None if "_expected" in config else expected_cells(config)
    config = {"_reference_grids": reference_grids(edition_id(config)), **config}
    try:
        render_report(args.results, config, args.out, expected=expected)
    except OSError as exc:  # a full disk: the file being written is left as it was (records.store.write_atomic)
        print(f"error: writing {exc.filename or args.out} failed: {exc.strerror or exc}; the report in {args.out} "
              f"is not whole", file=sys.stderr)
        return 1
    return 0


def _publish(args) -> int:
    from ..steps.publish import publish

    try:
        manifest = publish(args.results, _json_arg(args.config_json), args.out, args.benchmarks, merge=args.merge,
                           mixed_cards=args.mixed_cards, allow_dirty=args.allow_dirty,
                           add_experiment=args.add_experiment)
    except (OSError, ValueError) as exc:  # a refused record or folder: the message names the file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(manifest)
    return 0


def _profile(args) -> int:
    from ..run.profiling import profile_cell

    profile_cell(args.experiment, args.name, _json_arg(args.cell), args.out_dir)
    return 0


def _profile_job(args) -> int:
    from ..run.profiling import profile_job

    profile_job(args.experiment, args.job, [tuple(c) for c in _json_arg(args.cells)], args.out_dir)
    return 0


def _capture_nsys_memory(args) -> int:
    from ..steps.nsys_memory_step import capture

    capture(args.name, _json_arg(args.cell), args.out_dir, args.out)
    return 0


def _nsys_stats(args) -> int:
    from ..run.profiling import REPORTS, export_stats

    reports = tuple(args.reports.split(",")) if args.reports else REPORTS
    export = export_stats(args.profile_dir, args.out_dir, nsys=args.nsys, reports=reports)
    if export.get("reason"):
        print(f"no stats: {export['reason']}", file=sys.stderr)
    return 0


def _parse_nsys(args) -> int:
    from ..parsers.nsys import NsysParseError
    from ..steps.nsys_step import CellNameError, parse_stats

    try:
        record = parse_stats(args.prefix, args.out, run_path=args.run, name=args.name, batch_size=args.batch_size)
    except (NsysParseError, FileNotFoundError, CellNameError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {record['status']}" + (f" ({record['error']})" if record["error"] else ""))
    return 0


def _parse_trace_exports(args, parse) -> int:
    """A profiled run's nsys trace exports into its record with ``parse`` (stats folder, run.json, out)."""
    from ..parsers.nsys_columns import NsysParseError
    from ..records.store import ResultError

    try:
        record = parse(args.stats_dir, args.run, args.out, name=args.name)
    except (NsysParseError, ResultError, FileNotFoundError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {record['status']}" + (f" ({record['error']})" if record["error"] else ""))
    return 0


def _parse_ddp_timeline(args) -> int:
    from ..steps.ddp_timeline import parse_timeline

    return _parse_trace_exports(args, parse_timeline)


def _parse_fsdp_forward(args) -> int:
    from ..steps.fsdp_forward import parse_forward

    return _parse_trace_exports(args, parse_forward)


def _missing(args) -> int:
    from ..steps.publish import missing_targets

    try:
        targets, n_missing, expected, n_shared = missing_targets(args.folder, host_bound=args.host_bound)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for target in targets:
        print(target)
    extra = len(targets) - n_missing - n_shared
    print(f"{args.folder}: {n_missing} of {expected} configured cells have no record"
          + (f", {n_shared} to run again (out of memory while other processes held part of the card, or not run "
             "for want of GPUs" + (", or host-bound and timed beside other jobs" if args.host_bound else "") + ")"
             if n_shared else "")
          + (f"; {extra} more result file{'s' if extra != 1 else ''} listed, written by the same job"
             if extra else ""), file=sys.stderr)
    return 0


def _rerender_check(args) -> int:
    from ..rerender import check

    return check(args.data, args.report, keep=args.keep)


def _parse_snapshot(args) -> int:
    from ..steps.snapshot_step import main_args

    return main_args(args)
