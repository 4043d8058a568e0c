"""The commands a report gives for a result it lacks: the rules to run again, with the report's grid.

The handout's problems themselves (order, titles, points, sub-questions, the rule whose records
answer each) are edition data: :mod:`cs336report.editions`. Imported by the report's renderer and
sections; it imports nothing heavy.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

# What every rerun command of the report being rendered adds: its grid, where that is not the one the
# device picks by itself (set by the renderer for the time of one render).
RERUN_OPTIONS: ContextVar[str] = ContextVar("rerun_options", default="")


class Hint(str):
    """The command a "not run" line gives (the string itself), with what the machine must have where
    the one the report ran on cannot produce the result (``needs``, e.g. "a CUDA GPU"; empty where it
    can). An empty command with ``needs``: no command does it as configured, and ``needs`` says what to
    change."""

    needs: str

    def __new__(cls, command: str, needs: str = ""):
        hint = super().__new__(cls, command)
        hint.needs = needs
        return hint


@dataclass(frozen=True)
class RerunHost:
    """What the grid and the machine of the report being rendered can run (set by the renderer for the
    time of one render): the cells each experiment has on the report's grid; for an experiment with none
    there, the GPUs its cells of the gpu grid need; for one whose records say "not run" for want of
    GPUs, how many its cells needed."""

    grid: str
    device: str
    cells: dict[str, int]
    gpu_grid: dict[str, int]
    short_of: dict[str, int]


RERUN_HOST: ContextVar[RerunHost | None] = ContextVar("rerun_host", default=None)


def _gpus(n: int) -> str:
    return "a CUDA GPU" if n <= 1 else f"{n} CUDA GPUs"


def rerun_command(*rules: str) -> Hint:
    """The command that runs the cells of ``rules`` again and renders the report. A rule of one job
    per cell has a wildcard and cannot be a target itself, so the rules are forced and the report
    is the target (which also reruns a cell whose record is an error). Within a render it carries
    the report's grid where needed (:data:`RERUN_OPTIONS`, :func:`grid_option`) and leaves out the
    rules its grid has no cells of (:data:`RERUN_HOST`); where none of ``rules`` has cells there, the
    gpu grid's command and the GPUs it needs, and where their cells were not run for want of GPUs,
    how many."""
    host = RERUN_HOST.get()
    if host is None:
        return Hint(snakemake_command(f"--forcerun {' '.join(rules)} -- report", cores=True))
    known = [r for r in rules if r in host.cells]  # a rule it does not know (a parse step) follows the others
    absent = [r for r in known if not host.cells[r]]
    if known and absent == known:
        elsewhere = [host.gpu_grid[r] for r in absent if r in host.gpu_grid]
        if not elsewhere:
            return Hint("", needs=f"cells of {', '.join(absent)} in the config's grids.{host.grid}")
        command = f"snakemake --cores 1 --forcerun {' '.join(rules)} -- report"  # the gpu grid, a CUDA device's own
        gpus = max(elsewhere)
        return Hint(command, needs="" if host.device == "cuda" and gpus <= 1 else _gpus(gpus))
    forced = [r for r in rules if r not in absent]
    short = max((host.short_of.get(r, 0) for r in forced), default=0)
    return Hint(snakemake_command(f"--forcerun {' '.join(forced)} -- report", cores=True),
                needs=f"a host of {short} GPUs or more" if short else "")


def snakemake_command(arguments: str, cores: bool = False) -> str:
    """``snakemake`` with ``arguments`` and, within a render, the report's grid option."""
    options = RERUN_OPTIONS.get()
    return " ".join(filter(None, ["snakemake", "--cores 1" if cores else "", options, arguments]))


def grid_option(grid: str | None, device: str | None, edition: int | None = None) -> str:
    """``--config grid=... handout=...`` for a report of ``grid`` on ``device`` answering ``edition``: the grid
    where ``grid: auto`` (the default) would not pick it there (the gpu grid on a CUDA device, the cpu grid
    elsewhere), the edition where it is not the default one, or nothing where neither is needed."""
    from ..editions import DEFAULT

    default = "gpu" if device == "cuda" else "cpu"
    options = [f"grid={grid}" if grid and grid != default else "",
               f"handout={edition}" if edition and edition != DEFAULT else ""]
    options = [o for o in options if o]
    return f"--config {' '.join(options)}" if options else ""
