"""Command line of cs336report: one subcommand per workflow step.

    python -m cs336report check-config workflow/config/default.yaml
    python -m cs336report cells benchmarking --config workflow/config/default.yaml
    python -m cs336report run benchmarking --name NAME --cell JSON --out results/benchmarking/NAME.json
    python -m cs336report render --config-json JSON --out report results/**/*.json
"""

from __future__ import annotations

import argparse
import json
import sys


def _check_config(args) -> int:
    from .config import Config, ConfigError

    try:
        cfg = Config.from_file(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.config}: ok (device {cfg.device}, grid {cfg.grid_name})")
    return 0


def _cells(args) -> int:
    from . import experiments
    from .config import Config

    for name in experiments.cells(args.experiment, Config.from_file(args.config)):
        print(name)
    return 0


def _run(args) -> int:
    from .runner import run_cell

    run_cell(args.experiment, args.name, json.loads(args.cell), args.out)
    return 0


def _render(args) -> int:
    from .report.render import render_report

    render_report(args.results, json.loads(args.config_json), args.out)
    return 0


def _publish(args) -> int:
    from .publish import publish

    print(publish(args.results, json.loads(args.config_json), args.out))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cs336report", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("check-config", help="validate a config file and resolve its device")
    p.add_argument("config")
    p.set_defaults(func=_check_config)

    p = sub.add_parser("cells", help="list the cells of an experiment")
    p.add_argument("experiment")
    p.add_argument("--config", default="workflow/config/default.yaml")
    p.set_defaults(func=_cells)

    p = sub.add_parser("run", help="measure one cell and write its result JSON")
    p.add_argument("experiment")
    p.add_argument("--name", required=True, help="cell name")
    p.add_argument("--cell", required=True, help="the resolved cell, as JSON")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_run)

    p = sub.add_parser("render", help="render report.md and index.html from result files")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("--config-json", required=True, help="the resolved config, as JSON")
    p.add_argument("--out", required=True, help="report folder")
    p.set_defaults(func=_render)

    p = sub.add_parser("publish", help="copy result files and their job timings into a published folder")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("--config-json", required=True, help="the resolved config, as JSON")
    p.add_argument("--out", required=True, help="published folder, e.g. report/data")
    p.set_defaults(func=_publish)

    args = parser.parse_args(argv)
    return args.func(args)
