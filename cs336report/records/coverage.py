"""Which configured cells have a result: the cells a resolved config asks for (given by the
experiments, :func:`cs336report.experiments.expected_cells`), against what ran.

The report lists the configured cells with no result as "not run"; ``python -m cs336report
missing`` prints them as the result files Snakemake would build, so a run made in parts (or a
published folder) can be completed with exactly those cells.
"""

from __future__ import annotations

import re
from typing import Iterable


def gpus_of(cell: dict) -> int:
    """The GPUs a cell runs on: its world size for an NCCL group, one on a CUDA device, else none."""
    if cell.get("backend") == "nccl":
        return int(cell.get("world_size") or 1)
    return int(str(cell.get("device", "")).startswith("cuda"))


def gpus_short(records: Iterable[dict]) -> dict[str, int]:
    """Per experiment, the GPUs its cells needed where their records say "not run" for want of them."""
    out: dict[str, int] = {}
    for r in records:
        m = re.search(r"needs (\d+) GPUs, \d+ present", r.get("error") or "") if r["status"] == "not_run" else None
        if m:
            out[r["experiment"]] = max(out.get(r["experiment"], 0), int(m[1]))
    return out


def coverage(have: Iterable[tuple[str, str]], expected: dict[str, dict] | None) -> dict[str, dict]:
    """Per experiment: how many of its configured cells are among ``have`` ((experiment, cell)
    pairs), and which are not."""
    if not expected:
        return {}
    present: dict[str, set] = {}
    for experiment, cell in have:
        present.setdefault(experiment, set()).add(cell)
    out = {}
    for name, cells in expected.items():
        missing = sorted(set(cells) - present.get(name, set()))
        out[name] = {"expected": len(cells), "present": len(cells) - len(missing), "missing": missing}
    return out


# Profiled experiments whose record is written by the parse rule at the end of their chain.
PARSED_BY = {"nsys_profile": "nsys_parse", "ddp_overlap_profile": "ddp_overlap_parse"}


def result_target(experiment: str, cell: str) -> str:
    """The result file the workflow's rule for ``experiment`` writes for ``cell``."""
    return f"results/{PARSED_BY.get(experiment, experiment)}/{cell}.json"


def _reason(error: str) -> str:
    text = error.removeprefix("not run:").strip()
    if m := re.fullmatch(r"needs (\d+) GPUs, (\d+) present", text):
        return f"needs {m[1]} GPUs and this run's host had {m[2]} (run it on a host of {m[1]} or more)"
    return text


def not_run_reason(records: Iterable[dict]) -> str:
    """Why records that say "not run" were not run: their distinct reasons (e.g. "needs 2 GPUs, 1
    present", the distributed cells on a host of one GPU), empty where none says."""
    return "; ".join(sorted({_reason(r.get("error") or "") for r in records if r["status"] == "not_run"} - {""}))
