"""Publishing a run: copy its result records (and Snakemake's timing of each job) into a
folder that is committed with the report, so the report can be re-rendered anywhere.

    python -m cs336report publish results/*/*.json --config-json JSON --out report/data

The folder holds ``<experiment>/<cell>.json.gz`` records (the compact JSON of each record,
gzip-compressed with a fixed header, so the same record always gives the same bytes; read one
with ``zcat`` or :func:`cs336report.records.store.load`), ``config.json`` (the resolved config of the
run) and ``manifest.json`` (the list of records, in the order the report reads them); those two
stay plain JSON. Raw profiler files (``.nsys-rep``, snapshot pickles) are never copied.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections import Counter
from pathlib import Path

from ..experiments import expected_cells
from ..records.job_timing import benchmark_of, job_of
from ..records.provenance import commit_code_hash
from ..records.store import host_bound_beside_jobs, load, now_iso, record_status, result_stem, save

PUBLISHED_SUFFIX = ".json.gz"

# Cell settings that a config resolves per machine (nsys_profile's ``tool: auto`` becomes nsys
# where the executable is found), so a folder's config read elsewhere cannot say what they were.
MACHINE_RESOLVED = {"nsys_profile": frozenset({"profiler"}), "ddp_overlap_profile": frozenset({"profiler"})}
# How a cell is measured again when noisy, not what it measures: a record made without repeats
# is a record of the same cell.
MEASUREMENT_POLICY = frozenset({"repeats", "noisy_cv", "repeat_always"})


def provenance_problems(record: dict, commit_hashes: dict[str, str | None] | None = None) -> list[str]:
    """Why ``record`` does not come from one clean commit: it names no commit, it ran with
    uncommitted changes, or the hash of the code that ran differs from the hash of the code in the
    commit it names (compared where this checkout has that commit)."""
    prov = record.get("provenance") or {}
    commit, problems = prov.get("git_commit"), []
    if not commit:
        problems.append("names no commit")
    if prov.get("git_dirty") is True:
        problems.append("ran with uncommitted changes")
    if commit and prov.get("code_hash"):
        cache = commit_hashes if commit_hashes is not None else {}
        if commit not in cache:
            cache[commit] = commit_code_hash(commit)
        if cache[commit] is not None and cache[commit] != prov["code_hash"]:
            problems.append(f"ran code (hash {prov['code_hash']}) that differs from commit {commit[:12]}'s "
                            f"(hash {cache[commit]})")
    return problems


def with_experiment(config: dict, experiment: str) -> dict:
    """``config`` (a published folder's) with one more experiment: its entry in the same grid of the default
    config (workflow/config/default.yaml, the handout grid resolved for the folder's edition), nothing else
    changed. Refused for an unknown experiment, one the folder's grid has already, and one the default
    grid lacks."""
    from .. import experiments
    from ..config import edition_id, reference_grids

    if experiment not in experiments.registry():
        raise ValueError(f"--add-experiment {experiment}: unknown experiment; known: {', '.join(experiments.names())}")
    grid = config.get("_grid")
    if (config.get("grids") or {}).get(grid, {}).get(experiment) is not None:
        raise ValueError(f"--add-experiment {experiment}: the folder's {grid} grid has it already; publish its "
                         "records with --merge alone")
    entry = (reference_grids(edition_id(config)).get(grid) or {}).get(experiment)
    if entry is None:
        raise ValueError(f"--add-experiment {experiment}: the default config's {grid} grid has no entry for it")
    out = copy.deepcopy(config)
    out["grids"][grid][experiment] = copy.deepcopy(entry)
    return out


def publish(result_paths: list[str], config: dict, out_dir: str | Path, benchmarks: str | Path = "benchmarks",
            merge: bool = False, mixed_cards: bool = False, allow_dirty: bool = False,
            add_experiment: str | None = None) -> Path:
    """Write ``result_paths`` (and their job timings) as the published folder ``out_dir``.

    With ``merge`` the folder's records are kept and only those of the same experiment and cell
    are replaced, so a grid run in parts (or a few cells run again) is published piece by piece;
    the folder's config must then be ``config``, and every record given must have run with the
    settings that config gives its cell. The report compares timings within one card, so
    the published records must all name one GPU (records naming none, from a machine without
    one, go with any), unless ``mixed_cards``. A record merged into a folder must be of the
    folder's grid (a cell its config gives) and device (a CPU record never joins a GPU folder).
    A published report comes from one clean commit: a record without a commit, with uncommitted
    changes or whose code hash differs from its commit's is refused unless ``allow_dirty``, and
    is then marked (``published.problems``), which the report states on its first screen. Every
    check runs before anything is written.

    ``add_experiment`` (with ``merge``, into an existing folder whose config is ``config``) publishes the
    records of one experiment the folder's config lacks: the folder's config gains that experiment's
    entry (:func:`with_experiment`) and nothing else, and every record given must be of it and have run
    with the settings the extended config gives its cell.
    """
    out = Path(out_dir)
    kept: dict[tuple[str, str], str] = {}
    expected: dict[str, dict] | None = None  # the folder's cells, whose settings merged records must have
    folder_config = config
    if add_experiment:
        if not (merge and (out / "manifest.json").exists()):
            raise ValueError(f"--add-experiment {add_experiment}: extends a published folder; give --merge and "
                             f"a folder that has one ({out} has no manifest.json)")
        config = with_experiment(config, add_experiment)
    if merge and (out / "manifest.json").exists():
        old_files, old_config = published_files(out)
        if old_config != folder_config:
            differs = sorted(k for k in set(old_config) | set(config) if old_config.get(k) != config.get(k))
            raise ValueError(f"{out / 'config.json'}: the published config differs from this run's in "
                             f"{', '.join(differs)}; publish without --merge to replace the folder")
        kept = {_cell_key(f): f for f in old_files}
        expected = expected_cells(config)
    records = []
    hashes: dict[str, str | None] = {}
    for path in result_paths:
        record = load(path)
        if add_experiment and record.get("experiment") != add_experiment:
            raise ValueError(f"{path}: a record of {record.get('experiment')}; --add-experiment {add_experiment} "
                             f"publishes that experiment's records only")
        if merge and (out / "manifest.json").exists():
            _check_grid(record, config, expected, path, out)
        if expected is not None:
            _check_settings(record, expected, path, out)
        problems = provenance_problems(record, hashes)
        if problems and not allow_dirty:
            raise ValueError(f"{path}: {'; '.join(problems)}: a published report comes from one clean commit "
                             "(commit, rerun and publish again, or --allow-dirty to publish it marked as such)")
        prov = record.get("provenance") or {}
        commit_hash, ran_hash = hashes.get(prov.get("git_commit")), prov.get("code_hash")
        if problems or (commit_hash and ran_hash):
            record["published"] = {"problems": problems, "allow_dirty": bool(problems),
                                   "code_matches_commit": commit_hash == ran_hash if commit_hash and ran_hash else None}
        record.pop("_path")
        record["benchmark"] = benchmark_of(path, benchmarks, job_of(record))
        dest = out / record["experiment"] / f"{result_stem(path)}{PUBLISHED_SUFFIX}"
        kept.pop(_cell_key(dest), None)
        records.append((record, dest))
    _check_whole_jobs(records)
    if not mixed_cards:
        _check_one_card([r for r, _ in records] + [load(f) for f in kept.values()], out)
    if not merge and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for record, dest in records:
        save(record, dest, compact=True)
        files.append(str(dest))
    files = sorted(files + list(kept.values())) if merge else files
    save(config, out / "config.json")
    manifest = {"published_at": now_iso(), "files": files}
    save(manifest, out / "manifest.json")
    return out / "manifest.json"


def _cell_key(path: str | Path) -> tuple[str, str]:
    """(experiment, cell) of a result file at ``.../<experiment>/<cell>.json[.gz]``."""
    return Path(path).parent.name, result_stem(path)


def _check_whole_jobs(records: list[tuple[dict, Path]]) -> None:
    """Records of a job of several cells go together: they share the job's timing, which the
    report counts once, so a job published in part would count cells whose records are elsewhere."""
    given = {(r["experiment"], job_of(r), r["cell"]) for r, _ in records}
    for record, dest in records:
        if job := job_of(record):
            left = [c for c in record["job"].get("cells", []) if (record["experiment"], job, c) not in given]
            if left:
                raise ValueError(f"{dest.name}: cell {record['cell']} ran in job {job} with {', '.join(left)}; "
                                 f"publish the job's other result file(s) with it")


def _check_grid(record: dict, config: dict, expected: dict | None, path: str | Path, out: Path) -> None:
    """A record merged into a folder is one of the cells the folder's config gives (whose settings,
    device included, :func:`_check_settings` then compares): a record of a CPU run or of another grid
    would sit in the report's tables as if the folder's run had made it."""
    if expected is None:
        return
    cells = expected.get(record.get("experiment"))
    if cells is not None and record.get("cell") in cells:
        return
    device, folder_device = (record.get("config") or {}).get("device"), config.get("_device")
    if device and folder_device and device.split(":")[0] != folder_device.split(":")[0]:
        raise ValueError(f"{path}: cell {record['cell']} ran on {device}, the folder {out} holds a {folder_device} "
                         f"run ({config.get('_grid')} grid); a published folder takes records of its own grid and device only")
    raise ValueError(f"{path}: cell {record['cell']} of {record.get('experiment')} is not among the cells the "
                     f"folder's config gives ({config.get('_grid')} grid); a published folder takes its own grid's only")


def _check_settings(record: dict, expected: dict | None, path: str | Path, out: Path) -> None:
    """A record merged into a folder ran with the settings the folder's config gives its cell (a
    cell of the same name run under other settings would sit in the report as if it were one of
    the folder's run); cells the config does not resolve, and machine-resolved settings, are not
    compared."""
    want = (expected or {}).get(record.get("experiment"), {}).get(record.get("cell"))
    got = record.get("config")
    if want is None or got is None:
        return
    skip = MACHINE_RESOLVED.get(record["experiment"], frozenset()) | MEASUREMENT_POLICY
    differs = sorted(k for k in set(want) | set(got) if k not in skip and want.get(k) != got.get(k))
    if differs:
        def value(d, k):
            return repr(d[k]) if k in d else "not set"

        shown = "; ".join(f"{k}: {value(got, k)}, the folder's config gives {value(want, k)}" for k in differs)
        raise ValueError(f"{path}: cell {record['cell']} ran with other settings than {out / 'config.json'} gives it "
                         f"({shown}); run it under the folder's config (its settings are in config.json)")


def _check_one_card(records: list[dict], out: Path) -> None:
    cards = Counter(gpu for r in records if (gpu := (r.get("provenance") or {}).get("gpu")))
    if len(cards) > 1:
        listed = ", ".join(f"{gpu}: {n} record{'s' if n != 1 else ''}" for gpu, n in cards.most_common())
        raise ValueError(f"{out}: the records would name more than one GPU ({listed}); the report compares "
                         "timings within one card, so a published folder holds one (--mixed-cards to publish anyway)")


def published_files(out_dir: str | Path) -> tuple[list[str], dict]:
    """The record paths and the resolved config of a published folder."""
    out = Path(out_dir)
    manifest = out / "manifest.json"
    if not manifest.exists():
        raise FileNotFoundError(
            f"{manifest}: no published results here; run `snakemake --cores 1 publish` on the machine "
            f"that ran the experiments first"
        )
    files = json.loads(manifest.read_text())["files"]
    return files, json.loads((out / "config.json").read_text())


def missing_targets(out_dir: str | Path, host_bound: bool = False) -> tuple[list[str], int, int, int]:
    """The result files (``results/<experiment>/<cell>.json``) of the configured cells a published
    folder has no record for, or only the record of an out-of-memory error on a shared card (not
    the cell's own limit) or of a cell that needed more GPUs than its host had (not run), with the other cells of their jobs, which one job writes together; how
    many configured cells have no record, how many its config asks for in all, and how many
    records are listed to run again. ``host_bound``: also the cells timed host-bound beside other
    jobs (:func:`~cs336report.records.store.host_bound_beside_jobs`), to time again with one GPU slot.

    Build them with Snakemake under the config the folder was published with, then add them with
    ``publish --merge``.
    """
    from ..experiments import job_of_cell
    from ..records.coverage import coverage, result_target

    files, config = published_files(out_dir)
    expected = expected_cells(config)
    if expected is None:
        raise ValueError(f"{Path(out_dir) / 'config.json'}: this version cannot resolve the folder's config into "
                         "cells, so it cannot say which are missing")
    keys = [(_cell_key(f), f) for f in files]
    cov = coverage((key for key, _ in keys), expected)
    # an OOM on a shared card, or a cell that needed more GPUs than its host had: run it again elsewhere
    records = {key: load(f) for key, f in keys if key[0] in expected}
    again = [key for key, r in records.items() if record_status(r) in ("oom_shared", "not_run")
             or (host_bound and host_bound_beside_jobs(r))]
    # a cell that runs in one job with others is built (and published) with them
    cells = [(name, cell) for name in cov for cell in cov[name]["missing"]] + again
    targets = sorted({result_target(name, member) for name, cell in cells
                      for member in job_of_cell(name, expected[name], cell)})
    return (targets, sum(len(c["missing"]) for c in cov.values()), sum(c["expected"] for c in cov.values()),
            len(again))
