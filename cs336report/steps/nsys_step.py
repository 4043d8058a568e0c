"""The parse step of nsys_profile: one cell's ``nsys stats`` exports in, its result record out.

Rule ``nsys_parse``, command ``parse-nsys``: the exports are read by
:mod:`cs336report.parsers.nsys` and analysed per phase by
:func:`cs336report.parsers.kernel_ranges.summarise`; the record adds the Python timer's
measurements (the profiled run's measured and warm-up steps) and the wall times of the
profiled run and of the export. It works on exports brought from another machine too
(``python -m cs336report parse-nsys PREFIX --out FILE``): the cell's settings are then read
from its name, which must follow :func:`cs336report.names.benchmarking.cell_name`, and
the record has no wall time.
"""

from __future__ import annotations

from pathlib import Path

from .. import editions
from ..config import DEFAULT_CONFIG, edition_sizes, load_file
from ..names.benchmarking import CELL_NAME_FORM, cell_from_name
from ..parsers import nsys
from ..parsers.kernel_ranges import summarise
from ..records.store import SCHEMA, load, now_iso, save
from ..run.profiling import EXPORT_FILE, LAUNCH_FILE, STATS_PREFIX, read_step_file

__all__ = ["CellNameError", "parse_stats"]


class CellNameError(ValueError):
    """Exports parsed without their run's record under a name that does not spell out the cell (or with a
    batch size that cannot be the cell's)."""


def _model_of(size: str) -> dict:
    """``{"model": shape}`` of a size of the default edition's model table or the default config's
    small models, else nothing (a cell name does not say its edition)."""
    sizes = edition_sizes(load_file(DEFAULT_CONFIG).get("sizes"), editions.DEFAULT)
    return {"model": dict(sizes[size])} if size in sizes else {}


def parse_stats(prefix: str | Path, out: str | Path, run_path: str | Path | None = None,
                name: str | None = None, batch_size: int | None = None) -> dict:
    """Parse the ``PREFIX_<report>.csv`` exports into the result record of one profiled cell.

    ``run_path`` is the profiled run's ``run.json`` (status, cell, Python timer, provenance);
    without it (exports from elsewhere) the cell's settings come from its name (``name``, else
    the export's directory or file name), which must read as
    ``<implementation>-<precision>-<size>-ctx<N>-<mode>``; any other name raises
    :class:`CellNameError` before anything is written. The model's shape then comes from the
    default config's size table, and the batch size from ``batch_size`` (else it is not known, and
    nsys_profile (e) has no FLOPs); with ``run_path`` it is the run's. A malformed export raises
    :class:`cs336report.parsers.nsys.NsysParseError` naming the file and line.
    """
    if batch_size is not None and (run_path or batch_size < 1):
        raise CellNameError("--batch-size gives the batch of exports parsed without --run, a whole number from 1"
                            if batch_size < 1 else "--batch-size is for exports parsed without --run: the run's "
                            "record holds its batch size")
    prefix = Path(prefix)
    run = load(run_path) if run_path else None
    cell_id = name or (run["cell"] if run else prefix.parent.name if prefix.name == STATS_PREFIX else prefix.stem)
    named = None if run else cell_from_name(cell_id)
    if not run and named is None:
        raise CellNameError(
            f"cell name {cell_id!r} does not say which cell was profiled; pass the profiled run's "
            f"record (--run RUN.json) or name the cell as {CELL_NAME_FORM} (--name, e.g. "
            f"naive-fp32-small-ctx128-forward)")
    run_dir = Path(run_path).parent if run_path else None
    export = read_step_file(prefix.parent / EXPORT_FILE)
    launch = read_step_file(run_dir / LAUNCH_FILE if run_dir else None)
    cell = dict(run["config"]) if run else {**named, **_model_of(named["size"]),
                                            **({"batch_size": batch_size} if batch_size else {})}
    cell.pop("profile_dir", None)
    status, error, data = (run["status"], run.get("error"), {}) if run else ("ok", None, {})
    source = export.get("source") or "nsys"
    activity = export.get("activity") or "cuda"
    if status == "ok" and export.get("reason"):
        status, error = "error", export["reason"]
    if status == "ok":
        try:
            frames = nsys.parse_file(prefix) if prefix.is_file() else nsys.parse_exports(prefix)
        except FileNotFoundError as exc:
            if run is None:
                raise
            status, error = "error", str(exc)
        else:
            data = summarise(frames, cell=cell, source=source, activity=activity)
            data["exports"] = sorted({str(f.attrs.get("source")) for f in frames.values()})
    if run and run["status"] == "ok":
        d = run["data"]
        times = d.get("times_s") or {}
        data["python_timer"] = {"stats_s": d.get("stats_s"), "phase_stats_s": d.get("phase_stats_s"),
                                "measured_s": times.get("measured_s"), "warmup_s": times.get("warmup_s")}
        data["params"] = d.get("params")
        data["model"] = d.get("model")
    if launch.get("fit_search"):  # the job's search for the longest contexts that fit: which did
        data["fit_search"] = launch["fit_search"]
    data["tool"] = {"source": source, "activity": activity,
                    "nsys_version": export.get("nsys_version") or launch.get("nsys_version"),
                    "torch_version": export.get("torch_version"),
                    "profile_command": launch.get("command"), "profile_wall_s": launch.get("wall_s"),
                    "export_wall_s": export.get("wall_s"), "run_wall_s": run.get("wall_s") if run else None}
    provenance = run["provenance"] if run else {"device": cell.get("device"), "note": "exports parsed without "
                                                "the profiled run's record: where they were measured is unknown"}
    record = {
        "schema": SCHEMA, "experiment": run["experiment"] if run else "nsys_profile",
        "cell": cell_id,
        "status": status, "error": error, "config": cell, "data": data, "provenance": provenance,
        "started_at": run.get("started_at") if run else now_iso(), "finished_at": now_iso(),
        "wall_s": run.get("wall_s", 0.0) if run else 0.0,
        **({"job": run["job"]} if run and run.get("job") else {}),  # the profiled job of several cells
    }
    save(record, out, compact=True)  # without indentation json writes with its C encoder: 10^5 kernels in a second
    return record
