"""The report's appendix: where the records came from (GPU, driver, versions, commits, the model
they ran) and the table of every experiment cell with its status and settings.
"""

from __future__ import annotations

import pandas as pd

from ...records.shapes import ModelInfo, StepConfig, read_as
from ...records.store import portable_path, record_status
from ..record_frame import record_frame
from ..tables import Cell, Table, status_cell

SUMMARY_KEYS = ("gpu", "driver", "cuda", "torch", "triton", "python", "platform", "cpu", "cpu_model", "git_commit",
                "git_dirty")
# The fields of a record's provenance the appendix reads: column -> dotted path (record_frame)
PROVENANCE_FIELDS = {
    **{k: f"provenance.{k}" for k in SUMMARY_KEYS}, "hostname": "provenance.hostname",
    "cpu_count": "provenance.cpu_count", "slots": "provenance.placement.of",
    "code_matches_commit": "published.code_matches_commit",
}


def provenance_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record: where and with what it ran (None where its provenance does not say)."""
    return record_frame(records, PROVENANCE_FIELDS, exact=True)


def provenance_summary(records: list[dict]) -> dict:
    df = provenance_frame(records)
    # each value in the order first seen; a value missing on some records (e.g. no GPU for the
    # CPU-side cells) is shown only when no record has one
    out = {k: ", ".join(str(v) for v in dict.fromkeys(df[k]) if v is not None) or "–" for k in SUMMARY_KEYS}
    out["model"] = _model_provenance(records)
    out["commits"] = _commits(records)
    out["hosts"] = _hosts(records)
    out["unclean"] = unclean_records(records)
    return out


def unclean_records(records: list[dict]) -> dict | None:
    """How many records do not come from one clean commit: no commit named, uncommitted changes,
    or code whose hash differs from the commit's (found by publish); None where all do."""
    df = provenance_frame(records)
    commits = set(df["git_commit"]) - {None}
    counts = {
        "no_commit": sum(not commit for commit in df["git_commit"]),
        "dirty": sum(dirty is True for dirty in df["git_dirty"]),
        "code_differs": sum(same is False for same in df["code_matches_commit"]),
        "commits": len(commits),
    }
    parts = [f"{counts['no_commit']} result(s) name no commit" if counts["no_commit"] else "",
             f"{counts['dirty']} ran with uncommitted changes" if counts["dirty"] else "",
             f"{counts['code_differs']} ran code that differs from the commit they name" if counts["code_differs"] else "",
             f"the results name {len(commits)} commits" if len(commits) > 1 else ""]
    if not any(parts):
        return None
    counts["text"] = ("Not from one clean commit: " + "; ".join(p for p in parts if p)
                      + ". These numbers cannot be reproduced from one commit of the code.")
    return counts


def _hosts(records: list[dict]) -> list[str]:
    """Each machine the records ran on, told apart by its name and core count (two lent machines may
    share a name), with its GPU slots and, where there are several, how many records it made, the most
    first."""
    hosts: dict = {}
    for p in provenance_frame(records).itertuples():
        key, slots = (p.hostname or "unknown", p.cpu_count), p.slots
        entry = hosts.setdefault(key, {"n": 0, "slots": 0})
        entry["n"] += 1
        entry["slots"] = max(entry["slots"], int(slots or 0))
    parts = []
    for (name, cores), e in sorted(hosts.items(), key=lambda kv: -kv[1]["n"]):
        shape = ", ".join(x for x in (f"{cores} cores" if cores else "",
                                      f"{e['slots']} GPU slot{'s' if e['slots'] != 1 else ''}" if e["slots"] else "") if x)
        label = f"{name} ({shape})" if shape else name
        parts.append(f"{label}: {e['n']} record{'s' if e['n'] != 1 else ''}" if len(hosts) > 1 else label)
    return parts


def _commits(records: list[dict]) -> str:
    """Each commit the records name, with how many records and whether its tree had uncommitted changes."""
    states: dict = {}
    cards: dict = {}  # per commit: card -> the experiments its records there are of
    for r, p in zip(records, provenance_frame(records).itertuples()):
        if p.gpu:
            cards.setdefault(p.git_commit, {}).setdefault(p.gpu, set()).add(r.get("experiment"))
        dirty = p.git_dirty
        # a tree copied to a GPU node has no .git to ask; publish compared its code with the commit's
        if dirty is None and p.code_matches_commit is not None:
            dirty = "same" if p.code_matches_commit else True
        states.setdefault(p.git_commit, []).append(dirty)
    parts = []
    for commit, dirty in sorted(states.items(), key=lambda kv: (kv[0] is None, -len(kv[1]))):
        n = len(dirty)
        if commit is None:
            parts.append(f"not recorded ({n} record{'s' if n != 1 else ''})")
            continue
        changed, unknown = sum(d is True for d in dirty), sum(d is None for d in dirty)
        state = ("uncommitted changes unknown" if unknown == n else "with uncommitted changes" if changed == n
                 else "code as committed, checked by publish" if all(d == "same" for d in dirty)
                 else "no uncommitted changes" if changed == 0 and unknown == 0
                 else f"{changed} with uncommitted changes" + (f", {unknown} unknown" if unknown else ""))
        # where the records name several cards, each commit says which card ran which experiments
        if len({gpu for per in cards.values() for gpu in per}) > 1:
            state += "".join(f"; {gpu}: {', '.join(sorted(e for e in exps if e))}"
                             for gpu, exps in sorted(cards.get(commit, {}).items()))
        parts.append(f"{commit} ({n} record{'s' if n != 1 else ''}, {state})")
    return "; ".join(parts) or "–"


def _model_provenance(records: list[dict]) -> dict:
    """The model(s) the results ran (``data.model`` of build_model) and parameter counts per size."""
    models: dict[tuple, dict] = {}
    params: dict[str, dict] = {}
    for r in records:
        raw = r["data"].get("model")
        if not isinstance(raw, dict):
            continue
        info = read_as(ModelInfo, raw)
        package = info.package or {}
        key = (info.kind, info.object, info.sha256_16, package.get("sha256_16"), info.implementation)
        models.setdefault(key, {
            "kind": info.kind, "object": info.object, "factory": info.factory, "implementation": info.implementation,
            "file": portable_path(info.file, (info.object or "").split(":")[0] or None) or "unknown",
            "sha256_16": info.sha256_16 or "unknown", "package": package or None,
            "functions": {role: f.get("path") for role, f in (info.functions or {}).items()},
        })
        # the model's own counts, else those of the record's data (records written before they moved)
        counts = {**r["data"], **raw}
        measured, expected = (counts[k] if k in counts else None for k in ("params", "params_expected"))
        size = read_as(StepConfig, r["config"]).size
        if size is None or measured is None or expected is None or size in params:
            continue
        diff = measured - expected
        params[size] = {"size": size, "measured": measured, "expected": expected, "match": diff == 0,
                        "measured_text": f"{measured:,}", "expected_text": f"{expected:,}",
                        "diff_text": f"{diff:+,} ({100 * diff / expected:+.1f}%)" if expected else f"{diff:+,}"}
    rows = sorted(params.values(), key=lambda p: p["expected"])
    return {"models": list(models.values()), "params": rows, "mismatch": any(not p["match"] for p in rows)}


def _config_text(cell: dict) -> str:
    """A cell's settings in one line (the model's shape is named by its size)."""
    skip = {"model", "model_source", "device"}
    return ", ".join(f"{k}={v}" for k, v in sorted(cell.items()) if k not in skip and not isinstance(v, (dict, list)))


def experiments_table(records: list[dict], expected: dict[str, dict] | None = None,
              coverage: dict[str, dict] | None = None) -> Table:
    entries = [(r["experiment"], r["cell"], r) for r in records]
    for name, cov in (coverage or {}).items():  # configured cells with no result: listed as not run
        entries += [(name, cell, None) for cell in cov["missing"]]
    rows = []
    for experiment, cell, r in sorted(entries, key=lambda e: (e[0], e[1])):
        if r is None:
            rows.append([Cell(experiment), Cell(cell), Cell("not run", "not_run"), Cell("–"), Cell(""),
                         Cell(_config_text(expected[experiment][cell] or {}) or "–"), Cell("–")])
            continue
        status = status_cell(record_status(r))
        rows.append([Cell(r["experiment"]), Cell(r["cell"]), status, Cell(f"{r.get('wall_s', 0):.1f}"),
                     Cell(r.get("error") or ""), Cell(_config_text(r["config"])), Cell(r["_path"])])
    return Table(title="Experiments", columns=["rule", "cell", "status", "wall time", "error", "config", "result file"],
                 units=["", "", "", "s", "", "", ""], rows=rows, sources=[r["_path"] for r in records])
