"""Render report/report.md and report/index.html from result files.

One Jinja2 loader, two environments: HTML autoescapes every value, Markdown escapes table
cells for GitHub. The same section partials serve both; each output mode brings its own
macros (``templates/_html.j2`` or ``templates/_md.j2``). Figures are saved as PNG under
``<out>/figures/`` (the Markdown links them) and embedded as data URIs in the HTML, so
index.html is one self-contained file.
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import os
import re
import shutil
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pandas as pd
import yaml
from markupsafe import Markup, escape

from ..coverage import coverage as cell_coverage, expected_cells
from ..results import load, portable_path, record_status
from .tables import MD_SOURCES_INLINE, Cell, Table, fmt_bytes, fmt_seconds, status_cell
from .sections import SECTIONS
from .checks import cut_down_grid
from .targets import COST_TARGET_S, targets_table

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"
HANDOUT = {"warmup_steps": 5, "measured_steps": 10, "batch_size": 4, "tf32": False}
EXPERIMENT_RULES = "workflow/rules"


@dataclass
class Figure:
    name: str
    path: str  # relative to the report folder
    data_uri: str
    caption: str
    alt: str


def md_cell(value) -> Markup:
    """A data string safe inside a GitHub Markdown table cell: no raw HTML (&, <, > escaped; quotes
    cannot open markup in Markdown text, so they stay readable), pipes escaped, one line."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    for char in "`*_[]":
        text = text.replace(char, "\\" + char)
    return Markup(re.sub(r"\s*\n\s*", " ", text))


def md_code(value) -> Markup:
    """A data string as a Markdown code span in running text (shown literally, so not HTML-escaped;
    a pipe needs no escape outside a table, and GitHub would show the backslash)."""
    text = re.sub(r"\s*\n\s*", " ", str(value)).replace("`", "'")
    return Markup(f"`{text}`")


def md_fence(value) -> Markup:
    """Text for a fenced code block: shown literally; a fence inside it cannot close the block."""
    return Markup(str(value).replace("`" * 3, "'" * 3))


def environments() -> dict[str, jinja2.Environment]:
    """Both environments escape every value; Markdown's filters add Markdown's own escaping."""
    loader = jinja2.FileSystemLoader(str(TEMPLATES))
    options = dict(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                   undefined=jinja2.StrictUndefined)
    envs = {"html": jinja2.Environment(**options), "md": jinja2.Environment(**options)}
    envs["md"].filters.update(mdcell=md_cell, mdtext=md_cell, mdcode=md_code, fence=md_fence)
    envs["md"].globals["md_sources_inline"] = MD_SOURCES_INLINE
    envs["html"].filters.update(mdcell=escape, mdtext=escape, mdcode=escape, fence=escape)
    return envs


class RenderContext:
    """What a section builder sees: the loaded results, the config, a figure saver."""

    def __init__(self, records: list[dict], config: dict, figures_dir: Path):
        self.config = config
        self.device = config.get("_device", "cpu")
        self.figures_dir = figures_dir
        self._by_experiment: dict[str, list[dict]] = defaultdict(list)
        for r in records:
            self._by_experiment[r["experiment"]].append(r)

    def records(self, experiment: str) -> list[dict]:
        return sorted(self._by_experiment.get(experiment, []), key=lambda r: r["cell"])

    def figure(self, name: str, fig, caption: str, alt: str | None = None) -> Figure:
        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        png = buf.getvalue()
        (self.figures_dir / f"{name}.png").write_bytes(png)
        return Figure(name=name, path=f"figures/{name}.png", caption=caption, alt=alt or caption,
                      data_uri="data:image/png;base64," + base64.b64encode(png).decode())

    def settings(self, experiment: str) -> list[dict]:
        """The run settings of ``experiment``'s cells, flagged where they differ from the handout."""
        cells = [r["config"] for r in self.records(experiment)]
        if not cells:
            return []
        out = []
        for key, label in (("warmup_steps", "warm-up steps"), ("measured_steps", "measured steps"),
                           ("batch_size", "batch size"), ("tf32", "TF32 matmuls"),
                           ("implementation", "implementation"), ("precision", "precision")):
            values = sorted({str(c[key]) for c in cells if key in c})
            if not values:
                continue
            expected = HANDOUT.get(key)
            differs = expected is not None and values != [str(expected)]
            out.append({"label": label, "value": ", ".join(values),
                        "handout": str(expected) if expected is not None else "", "differs": differs})
        return out


def _provenance(records: list[dict]) -> dict:
    keys = ("gpu", "driver", "cuda", "torch", "triton", "python", "platform", "cpu", "git_commit", "git_dirty", "hostname")
    seen: dict[str, list] = {k: [] for k in keys}
    for r in records:
        for k in keys:
            v = r["provenance"].get(k)
            if v not in seen[k]:
                seen[k].append(v)
    # a value missing on some records (e.g. no GPU for the CPU-side cells) is shown only when no record has one
    out = {k: ", ".join(str(v) for v in vals if v is not None) or "–" for k, vals in seen.items()}
    out["model"] = _model_provenance(records)
    out["commits"] = _commits(records)
    out["unclean"] = unclean_records(records)
    return out


def unclean_records(records: list[dict]) -> dict | None:
    """How many records do not come from one clean commit: no commit named, uncommitted changes,
    or code whose hash differs from the commit's (found by publish); None where all do."""
    commits = {(r.get("provenance") or {}).get("git_commit") for r in records} - {None}
    counts = {
        "no_commit": sum(not (r.get("provenance") or {}).get("git_commit") for r in records),
        "dirty": sum((r.get("provenance") or {}).get("git_dirty") is True for r in records),
        "code_differs": sum((r.get("published") or {}).get("code_matches_commit") is False for r in records),
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


def _commits(records: list[dict]) -> str:
    """Each commit the records name, with how many records and whether its tree had uncommitted changes."""
    states: dict = {}
    for r in records:
        p = r["provenance"]
        states.setdefault(p.get("git_commit"), []).append(p.get("git_dirty"))
    parts = []
    for commit, dirty in sorted(states.items(), key=lambda kv: (kv[0] is None, -len(kv[1]))):
        n = len(dirty)
        if commit is None:
            parts.append(f"not recorded ({n} record{'s' if n != 1 else ''})")
            continue
        changed, unknown = sum(d is True for d in dirty), sum(d is None for d in dirty)
        state = ("uncommitted changes unknown" if unknown == n else "with uncommitted changes" if changed == n
                 else "no uncommitted changes" if changed == 0 and unknown == 0
                 else f"{changed} with uncommitted changes" + (f", {unknown} unknown" if unknown else ""))
        parts.append(f"{commit} ({n} record{'s' if n != 1 else ''}, {state})")
    return "; ".join(parts) or "–"


def _model_provenance(records: list[dict]) -> dict:
    """The model(s) the results ran (``data.model`` of build_model) and parameter counts per size."""
    models: dict[tuple, dict] = {}
    params: dict[str, dict] = {}
    for r in records:
        info = (r.get("data") or {}).get("model")
        if not isinstance(info, dict):
            continue
        package = info.get("package") or {}
        key = (info.get("kind"), info.get("object"), info.get("sha256_16"), package.get("sha256_16"),
               info.get("implementation"))
        models.setdefault(key, {
            "kind": info.get("kind"), "object": info.get("object"), "factory": info.get("factory"),
            "implementation": info.get("implementation"), "file": portable_path(info.get("file")) or "unknown",
            "sha256_16": info.get("sha256_16") or "unknown", "package": package or None,
            "functions": {role: f.get("path") for role, f in (info.get("functions") or {}).items()},
        })
        measured = info.get("params", r["data"].get("params"))
        expected = info.get("params_expected", r["data"].get("params_expected"))
        size = r["config"].get("size")
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


def _appendix(records: list[dict], expected: dict[str, dict] | None = None,
              coverage: dict[str, dict] | None = None) -> Table:
    entries = [(r["experiment"], r["cell"], r) for r in records]
    for name, cov in (coverage or {}).items():  # configured cells with no result: listed as not run
        entries += [(name, cell, None) for cell in cov["missing"]]
    rows = []
    for experiment, cell, r in sorted(entries, key=lambda e: (e[0], e[1])):
        if r is None:
            rows.append([Cell(experiment), Cell(cell), Cell("not run", "not_run"), Cell("–"), Cell(""),
                         Cell(_config_text(expected[experiment][cell])), Cell("–")])
            continue
        status = status_cell(record_status(r))
        rows.append([Cell(r["experiment"]), Cell(r["cell"]), status, Cell(f"{r.get('wall_s', 0):.1f}"),
                     Cell(r.get("error") or ""), Cell(_config_text(r.get("config") or {})), Cell(r["_path"])])
    return Table(title="Experiments", columns=["rule", "cell", "status", "wall time", "error", "config", "result file"],
                 units=["", "", "", "s", "", "", ""], rows=rows, sources=[r["_path"] for r in records])


def _peak_bytes(record: dict) -> float | None:
    peak = (record.get("data") or {}).get("peak_memory")
    return peak.get("allocated_bytes") if isinstance(peak, dict) else None


# Lists of per-step or per-call seconds that results keep: warm-up and measured steps, and the
# per-call times of do_bench (flash). Per-phase splits of a step (``phases_s``) are parts of these.
SAMPLE_KEYS = ("warmup_s", "measured_s", "times_s")


def _timed_seconds(data) -> tuple[float, float]:
    """(seconds of timed warm-up and measured steps, seconds of first compiled calls) in a record's data."""
    steps = compiled = 0.0
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in SAMPLE_KEYS and isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
                    steps += float(sum(value))
                elif key == "first_call_s" and isinstance(value, (int, float)):
                    compiled += float(value)
                elif key not in ("phases_s", "earlier_first_calls"):  # parts of a step; other cells' calls
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return steps, compiled


def _section_cost_table(per_rule: pd.DataFrame, total: float, sources: list[str]) -> Table:
    """The rules' job time summed per report section, in the report's order."""
    per_section = per_rule.groupby("section", sort=False).agg(
        rules=("jobs", "size"), jobs=("jobs", "sum"), job_s=("job_s", "sum"), steps_s=("steps_s", "sum"),
        compile_s=("compile_s", "sum"))
    rows = [[Cell(section), Cell(str(int(r["rules"]))), Cell(str(int(r["jobs"]))), Cell(fmt_seconds(r["job_s"])),
             Cell(f"{100 * r['job_s'] / total:.0f}%" if total > 0 else "–"),
             Cell(fmt_seconds(r["steps_s"]) if r["steps_s"] > 0 else "–"),
             Cell(fmt_seconds(r["compile_s"]) if r["compile_s"] > 0 else "–")]
            for section, r in per_section.iterrows()]
    return Table(title="Cost per section",
                 columns=["section", "rules", "jobs", "job time", "share of all job time", "timed steps",
                          "first compiled calls"],
                 units=[""] * 7, rows=rows, sources=sources,
                 note="the rules of the table below, summed per section of this report; job time, timed steps "
                      "and first compiled calls as defined there")


def _cost(records: list[dict], gpu_run: bool = False) -> dict:
    """Wall time per rule and per section (Snakemake's benchmark of each job where present,
    else the cell's own wall time) and the largest GPU peak of each rule. On a ``gpu_run`` the
    floor (timed steps and first compiled calls) is checked against the report's time goal."""
    from ..publish import benchmark_of, job_of

    rows = []
    for i, r in enumerate(records):
        job = job_of(r)
        bench = r.get("benchmark") if "benchmark" in r else benchmark_of(r["_path"], job=job)
        steps, compiled = _timed_seconds(r.get("data"))
        rows.append({"rule": r["experiment"], "job": f"{r['experiment']}/{job}" if job else f"record {i}",
                     "job_s": (bench or {}).get("wall_s", r.get("wall_s", 0.0)),
                     "from_benchmark": bool(bench), "peak": _peak_bytes(r),
                     "warm": bool(((r.get("process") or {}).get("cells_before") or 0) > 0) and job is None,
                     "steps_s": steps, "compile_s": compiled})
    if not rows:
        return {"table": None, "total": "0 s"}
    df = pd.DataFrame(rows)
    # the cells of one job share its benchmark, which counts once (without one, each cell's own time counts)
    df.loc[df["from_benchmark"] & df.duplicated("job"), "job_s"] = 0.0
    per_rule = df.groupby("rule", sort=True).agg(jobs=("job", "nunique"), job_s=("job_s", "sum"),
                                                  peak=("peak", "max"), measured=("from_benchmark", "all"),
                                                  warm=("warm", "sum"), steps_s=("steps_s", "sum"),
                                                  compile_s=("compile_s", "sum"))
    section_of: dict[str, str] = {}
    for m in SECTIONS:  # an experiment shared by two sections belongs to the first (its own)
        for e in m.EXPERIMENTS:
            section_of.setdefault(e, m.TITLE)
    order = {m.TITLE: i for i, m in enumerate(SECTIONS)}
    per_rule["section"] = [section_of.get(rule, "–") for rule in per_rule.index]
    # the report's section order; a stable sort keeps the rules by name within a section
    per_rule = per_rule.sort_values("section", key=lambda s: s.map(order).fillna(len(order)), kind="stable")
    table_rows = []
    for rule, r in per_rule.iterrows():
        share = f"{100 * r['steps_s'] / r['job_s']:.0f}%" if r["job_s"] > 0 and r["steps_s"] > 0 else "–"
        table_rows.append([Cell(section_of.get(rule, "–")), Cell(rule), Cell(str(int(r["jobs"]))),
                           Cell(str(int(r["warm"]))), Cell(fmt_seconds(r["job_s"])),
                           Cell(fmt_seconds(r["steps_s"]) if r["steps_s"] > 0 else "–"), Cell(share),
                           Cell(fmt_seconds(r["compile_s"]) if r["compile_s"] > 0 else "–"),
                           Cell(fmt_bytes(r["peak"]) if r["peak"] == r["peak"] else "–")])
    total = df["job_s"].sum()
    steps, compiled = df["steps_s"].sum(), df["compile_s"].sum()
    note = ("job time is Snakemake's benchmark of each job (process start-up included)"
            if per_rule["measured"].all() else
            "job time is Snakemake's benchmark of each job where one was recorded, else the cell's own wall time")
    note += ("; a result made by a chain of jobs counts the whole chain (nsys_profile: the profiled run, its "
             "stats export and the parse)")
    note += ("; in a warm worker: jobs whose cell ran in a worker process that had run cells before it, so "
             "they paid no Python, torch or CUDA start-up")
    if df["job"].duplicated().any():
        note += "; a job that runs several cells in one process (compiled_model: one per size and context) counts once"
    note += ("; timed steps: the warm-up and measured steps (or do_bench calls) the results record, summed; "
             "first compiled calls: the compiling first call of torch.compile cells; the rest of a job is process "
             "start-up, building models and inputs, untimed passes (e.g. the fresh forward before each timed "
             "backward), memory probes, autotuning, profiling and exports")
    table = Table(title="Cost of this report",
                  columns=["section", "rule", "jobs", "in a warm worker", "job time", "timed steps",
                           "timed share", "first compiled calls", "largest GPU peak"],
                  units=[""] * 9, rows=table_rows, sources=sorted(r["_path"] for r in records), note=note)
    out = {"table": table, "total": fmt_seconds(total), "total_s": total,
           "section_table": _section_cost_table(per_rule, total, table.sources)}
    if total > 0:
        out["split"] = {"steps": fmt_seconds(steps), "steps_pct": f"{100 * steps / total:.0f}",
                        "compile": fmt_seconds(compiled), "compile_pct": f"{100 * compiled / total:.0f}",
                        "rest": fmt_seconds(max(total - steps - compiled, 0.0)),
                        "rest_pct": f"{100 * max(total - steps - compiled, 0.0) / total:.0f}"}
        # what no scheduling can remove: the measurements themselves and the compilations they time
        floor = per_rule["steps_s"] + per_rule["compile_s"]
        top = floor.idxmax()
        out["floor"] = {"s": float(floor.sum()), "text": fmt_seconds(floor.sum()), "rule": top,
                        "rule_text": fmt_seconds(floor[top]),
                        "rule_compile": fmt_seconds(per_rule.loc[top, "compile_s"]) if per_rule.loc[top, "compile_s"] > 0 else None,
                        "over_target": bool(gpu_run and floor.sum() > COST_TARGET_S), "target_min": COST_TARGET_S // 60}
    return out


def _skip_reason(module, ctx: RenderContext) -> str:
    """Why a section has no results: not configured for this device, or configured but not run."""
    grid = (ctx.config.get("grids") or {}).get(ctx.config.get("_grid", "cpu"), {})
    configured = [e for e in module.EXPERIMENTS if grid.get(e)]
    if configured:
        return (f"its grid ({', '.join(configured)}) is configured, but this run produced no results for it; "
                f"the cost appendix lists what ran")
    return getattr(module, "skip_reason", lambda c: "no results configured")(ctx)


def build_context(records: list[dict], config: dict, figures_dir: Path) -> dict:
    ctx = RenderContext(records, config, figures_dir)
    expected = expected_cells(config)
    coverage = cell_coverage(((r["experiment"], r["cell"]) for r in records), expected)
    sections = []
    for module in SECTIONS:
        present = any(ctx.records(e) for e in module.EXPERIMENTS)
        not_run = [{"rule": e, **coverage[e]} for e in module.EXPERIMENTS if coverage.get(e, {}).get("missing")]
        sections.append({
            "id": module.ID, "title": module.TITLE, "template": f"sections/{module.ID}.j2",
            "ran": present, "rules": list(module.EXPERIMENTS), "not_run": not_run if present else [],
            "skip_reason": None if present else _skip_reason(module, ctx),
            "data": module.build(ctx) if present else None,
        })
    device = config.get("_device", "cpu")
    provenance, cost = _provenance(records), _cost(records, gpu_run=device == "cuda")
    n_not_run = sum(len(c["missing"]) for c in coverage.values())
    targets = (targets_table({s["id"]: s["data"] for s in sections}, cost, provenance["gpu"],
                             n_not_run if expected else None, cut_down_grid(config)) if device == "cuda" else None)
    return {
        "title": "CS336 Assignment 2 (Systems): profiling and benchmarking",
        "generated_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device, "cpu_only": device != "cuda", "grid": config.get("_grid", "cpu"),
        "provenance": provenance, "sections": sections, "targets": targets,
        "appendix_table": _appendix(records, expected, coverage),
        "n_not_run": n_not_run,
        "cost": cost, "config_yaml": yaml.safe_dump(
            {k: v for k, v in config.items() if not k.startswith("_")}, sort_keys=False),
        "n_results": len(records),
        "status_counts": {s: sum(r["status"] == s for r in records) for s in ("ok", "oom", "error", "skipped")},
        "n_oom_shared": sum(record_status(r) == "oom_shared" for r in records),
    }


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def render_report(result_paths: list[str], config: dict, out_dir: str | Path) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = out_dir / "figures"
    shutil.rmtree(figures, ignore_errors=True)
    figures.mkdir()
    records = [load(p) for p in result_paths]
    context = build_context(records, config, figures)
    envs = environments()
    html = envs["html"].get_template("report.html.j2").render(fmt_lib="_html.j2", **context)
    md = envs["md"].get_template("report.md.j2").render(fmt_lib="_md.j2", **context)
    _write_atomic(out_dir / "index.html", html)
    _write_atomic(out_dir / "report.md", md)
    return context
