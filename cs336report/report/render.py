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
import os
import re
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import jinja2
import yaml
from markupsafe import Markup, escape

from .. import editions
from ..names.handout import RERUN_HOST, RERUN_OPTIONS, RerunHost, grid_option, rerun_command, snakemake_command
from ..records.coverage import coverage as cell_coverage, gpus_short, not_run_reason
from ..records.shapes import Provenance, read_as
from ..records.store import load, record_status, write_atomic
from .appendix.cost import cost_of
from .appendix.provenance import experiments_table, provenance_summary
from .checks import cut_down_grid
from .notes import attach as attach_notes
from .sections import section as section_of
from .settings import RenderSettings
from .tables import MD_SOURCES_INLINE, source_of
from .targets import COST_TARGET_GPUS, targets_table

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"
EXPERIMENT_RULES = "workflow/rules"


@dataclass
class Figure:
    name: str
    path: str  # relative to the report folder
    data_uri: str
    caption: str
    alt: str


def _no_html(text: str) -> str:
    """&, < and > escaped, so that no data makes HTML in Markdown; quotes open no markup in
    Markdown text, so they stay readable."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_cell(value) -> Markup:
    """A data string safe inside a GitHub Markdown table cell: no raw HTML (:func:`_no_html`), pipes
    escaped, one line."""
    text = _no_html(str(value))
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


# A table cell that reads as one quantity (a number, with its unit, sign, ± or range): never wrapped.
_QUANTITY = r"[-+−]?[\d.,]+\s?[^\s\d()]{0,5}"
_NUMERIC = re.compile(rf"^[~≈<>≤≥]?\s?{_QUANTITY}(\s?(±|–|to|/|×)\s?{_QUANTITY})*(\s\([^()]{{0,24}}\))?$")


def is_numeric(text) -> bool:
    return bool(_NUMERIC.match(str(text).strip())) and any(ch.isdigit() for ch in str(text))


def record_href(path: str, base: Path | None) -> str:
    """A link to a record file (or folder), relative to the report folder ``base`` where given,
    percent-encoded so that any character of the path is safe in Markdown and in an attribute."""
    href = os.path.relpath(os.path.abspath(path), os.path.abspath(base)) if base else path
    return quote(href.replace(os.sep, "/"))


def md_record_link(value, base: Path | None = None) -> Markup:
    """A value as a Markdown link to the record it came from (its text escaped as a table cell's),
    or as the plain value where it has no record."""
    source = source_of(value)
    if not source:
        return value
    return Markup(f"[{md_cell(value)}]({record_href(source, base)})")


def html_record_link(value, base: Path | None = None):
    """A value as an HTML link to the record it came from (text and address escaped), or as the
    plain value where it has no record."""
    source = source_of(value)
    if not source:
        return value
    return Markup('<a class="rec" href="{}">{}</a>').format(record_href(source, base), str(value))


def heading_of(section, letter: str) -> str:
    """A sub-question's heading: the section's (``headings``, from the edition the report answers), or,
    for a section dict made without them (a partial rendered alone), the default edition's."""
    headings = section.get("headings") if isinstance(section, dict) else None
    if headings and letter in headings:
        return headings[letter]
    edition = editions.get(editions.DEFAULT)
    problem = section.get("id") if isinstance(section, dict) else None
    if problem in edition.order:
        return next((p.heading for p in edition.problem(problem).parts if p.letter == letter), letter)
    return letter


class _CompiledTemplates(jinja2.BytecodeCache):
    """Each template compiled once a process: both environments generate the same code from it (the
    same options; their finalize and filters are looked up when a template runs), and a later render
    reuses it. Jinja keys it by the template's name and checks its source's checksum."""

    def __init__(self):
        self._compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self._compiled:
            bucket.bytecode_from_string(self._compiled[bucket.key])

    def dump_bytecode(self, bucket):
        self._compiled[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _CompiledTemplates()


def environments(links_from: Path | None = None) -> dict[str, jinja2.Environment]:
    """Both environments escape every value; Markdown's filters add Markdown's own escaping. A value
    that carries its record (a :class:`~.tables.Num`) is written as a link to that record's file,
    relative to ``links_from`` (the folder the pages are read from)."""
    loader = jinja2.FileSystemLoader(str(TEMPLATES))
    options = dict(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                   undefined=jinja2.StrictUndefined, bytecode_cache=_COMPILED)

    def md_link(value):
        return md_record_link(value, links_from)

    def md_value(value):
        # a plain string in Markdown text: autoescape would write its quotes as &#39; and &#34;
        if source_of(value) or isinstance(value, Markup) or not isinstance(value, str):
            return md_link(value)
        return Markup(_no_html(value))

    def html_link(value):
        return html_record_link(value, links_from)

    def linked(plain, link):
        return lambda value: link(value) if source_of(value) else plain(value)

    envs = {"html": jinja2.Environment(**options, finalize=html_link),
            "md": jinja2.Environment(**options, finalize=md_value)}
    envs["md"].filters.update(mdcell=linked(md_cell, md_link), mdtext=linked(md_cell, md_link), mdcode=md_code,
                              fence=md_fence)
    envs["md"].globals["md_sources_inline"] = MD_SOURCES_INLINE
    for env in envs.values():
        env.tests["numeric"] = is_numeric
        env.globals["rerun"] = rerun_command
        env.globals["snakemake"] = snakemake_command
        env.globals["heading_of"] = heading_of
    envs["html"].filters.update(mdcell=linked(escape, html_link), mdtext=linked(escape, html_link), mdcode=escape,
                                fence=escape)
    return envs


class RenderContext:
    """What a section builder sees: the loaded results, the render's settings (its grid, device,
    edition, configured cells and config: :class:`~.settings.RenderSettings`), the edition of the
    handout it answers, a figure saver."""

    def __init__(self, records: list[dict], settings: RenderSettings, figures_dir: Path, draw: bool = True):
        self.render_settings = settings
        self.device = settings.device
        self.edition = editions.get(settings.edition)
        self.figures_dir = figures_dir
        self.draw = draw  # False: figures are built but not drawn or saved (the text alone is wanted)
        self._by_experiment: dict[str, list[dict]] = defaultdict(list)
        for r in records:
            self._by_experiment[r["experiment"]].append(r)
        # the cards the records name, most records first: where there are several, each answer's record
        # folders of another card than the first say theirs
        counts = Counter(gpu for r in records if (gpu := (r.get("provenance") or {}).get("gpu")))
        self.cards = [gpu for gpu, _ in counts.most_common()]

    def records(self, experiment: str) -> list[dict]:
        return sorted(self._by_experiment.get(experiment, []), key=lambda r: r["cell"])

    def figure(self, name: str, fig, caption: str, alt: str | None = None) -> Figure:
        """Save ``fig``. It is laid out here, once, and only when drawn: by the layout engine its
        builder set (a rect leaving room for a figure legend), else by tight layout, which makes room
        for the labels and for legends beside the axes."""
        import matplotlib.pyplot as plt
        from matplotlib.layout_engine import TightLayoutEngine

        png = b""  # undrawn: no file, and an empty image in the HTML
        if self.draw:
            (fig.get_layout_engine() or TightLayoutEngine()).execute(fig)
            fig.set_layout_engine(None)  # laid out: with no engine left (nor bbox_inches), savefig draws once
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110)
            png = buf.getvalue()
            write_atomic(self.figures_dir / f"{name}.png", png)
        plt.close(fig)
        return Figure(name=name, path=f"figures/{name}.png", caption=caption, alt=alt or caption,
                      data_uri="data:image/png;base64," + base64.b64encode(png).decode())

    def settings(self, experiment: str, handout: dict | None = None) -> list[dict]:
        """The run settings of ``experiment``'s cells, flagged where they differ from ``handout``
        (default: the benchmarking settings the edition's handout fixes, ``Edition.benchmarking``)."""
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
            expected = (self.edition.benchmarking if handout is None else handout).get(key)
            differs = expected is not None and values != [str(expected)]
            out.append({"label": label, "value": ", ".join(values),
                        "handout": str(expected) if expected is not None else "", "differs": differs})
        return out


def _skip_reason(module, ctx: RenderContext) -> str:
    """Why a section has no results: not configured for this device, or configured but not run."""
    configured = [e for e in module.EXPERIMENTS if ctx.render_settings.grid_of(e)]
    if configured:
        return (f"its grid ({', '.join(configured)}) is configured, but this run produced no results for it; "
                f"the cost appendix lists what ran")
    return getattr(module, "skip_reason", lambda c: "no results configured")(ctx)


def _record_folders(ctx: RenderContext, experiments, out_dir: Path | None) -> list[dict]:
    """The folders of a section's records, as links relative to the report folder where possible; where
    the report's records name more than one card, each folder whose records are not all of the card of
    most records with the cards its records name."""
    folders, cards = {}, {}
    for e in experiments:
        for r in ctx.records(e):
            folder = os.path.dirname(r["_path"])
            if folder not in folders:
                folders[folder] = {"path": folder + "/", "href": record_href(folder, out_dir) + "/", "cards": ""}
                cards[folder] = set()
            if gpu := (r.get("provenance") or {}).get("gpu"):
                cards[folder].add(gpu)
    if len(ctx.cards) > 1:
        for folder, names in cards.items():
            if names != {ctx.cards[0]}:
                folders[folder]["cards"] = ", ".join(sorted(names))
    return list(folders.values())


def _section(problem: editions.Problem, module, ctx: RenderContext, coverage: dict, out_dir: Path | None) -> dict:
    """One handout problem: its answer and evidence partials with their data, or why it did not run."""
    base = {"id": problem.id, "number": problem.number, "points": problem.points,
            "subquestions": list(problem.subquestions), "command": rerun_command(problem.rule),
            "headings": {part.letter: part.heading for part in problem.parts if part.letter},
            "title": f"{problem.number}. {problem.id}", "evidence_id": f"evidence-{problem.id}",
            # sub-questions a section answers without records, shown where its cells did not run
            "analytic": getattr(module, "ANALYTIC", {})}
    if module is None:
        return {**base, "ran": False, "has_module": False, "rules": [], "not_run": [], "records": [],
                "skip_reason": "this version of the report does not answer it yet (no section is built for it)",
                "data": None, "headline": None,
                "headline_clauses": [],
                "template": None, "answer_template": None}
    # a section whose every record says "not run" (a distributed cell on a host of too few GPUs) is not answered
    records = [r for e in module.EXPERIMENTS for r in ctx.records(e)]
    present = any(r["status"] != "not_run" for r in records)
    not_run = [{"rule": e, **coverage[e]} for e in module.EXPERIMENTS if coverage.get(e, {}).get("missing")]
    data = module.build(ctx) if present else None
    template = getattr(module, "TEMPLATE", problem.id)  # the partials: the problem's own, or a shared pair
    from . import headlines

    headline = getattr(module, "headline", None) or getattr(headlines, problem.id, None)
    # the summary's line: its answer's claims, quoted (cs336report.report.headlines)
    clauses = list(headline(data)) if present and headline else []
    section = {**base, "ran": present, "has_module": True, "rules": list(module.EXPERIMENTS),
            # a section with no rule of its own names what it needs instead (COMMAND)
            "command": getattr(module, "COMMAND", None) or (rerun_command(*module.EXPERIMENTS)
                                                           if problem.rule == problem.id else base["command"]),
            "template": f"sections/{template}.j2", "answer_template": f"answers/{template}.j2",
            "not_run": not_run if present else [], "records": _record_folders(ctx, module.EXPERIMENTS, out_dir),
            "skip_reason": None if present else (not_run_reason(records) or _skip_reason(module, ctx)), "data": data,
            "headline": "; ".join(clauses) or None, "headline_clauses": clauses,
            # answered, but a configured cell of it is missing or its record failed
            "gaps": {"missing": sum(len(n["missing"]) for n in not_run),
                     "failed": sum(r["status"] == "error" for r in records),
                     "not_run": sum(r["status"] == "not_run" for r in records)} if present else None}
    # the evidence partial's own view of the section: its heading is the evidence block's anchor
    section["ev"] = {**section, "id": base["evidence_id"], "title": problem.title}
    return section


def _run_line(records: list[dict], provenance: dict) -> dict:
    """The run in one line: the card, torch, and the commit most records ran at."""
    commits = Counter(c for c in (read_as(Provenance, r["provenance"]).git_commit for r in records) if c)
    top = commits.most_common(1)[0][0] if commits else None
    gpu = provenance["gpu"] if provenance["gpu"] != "–" else f"CPU ({provenance['cpu']})"
    return {"card": gpu, "torch": provenance["torch"], "commit": (top or "not recorded")[:10],
            "n_commits": len(commits), "n_records": len(records)}


def rerun_host(records: list[dict], settings: RenderSettings) -> RerunHost | None:
    """What the report's grid and machine can run, for its "not run" commands (None where the
    configured cells are not known)."""
    if settings.expected is None:
        return None
    return RerunHost(grid=settings.grid, device=settings.device,
                     cells={name: len(cells) for name, cells in settings.expected.items()},
                     gpu_grid=dict(settings.gpu_grid), short_of=gpus_short(records))


def build_context(records: list[dict], settings: RenderSettings, figures_dir: Path, links_from: Path | None = None,
                  draw: bool = True) -> dict:
    """The templates' context; record links are relative to ``links_from`` (default: the report folder);
    ``draw``: False leaves the figures undrawn (their captions and the text are the same)."""
    ctx = RenderContext(records, settings, figures_dir, draw)
    expected = settings.expected
    coverage = cell_coverage(((r["experiment"], r["cell"]) for r in records), expected)
    sections = [_section(p, section_of(p), ctx, coverage, links_from or figures_dir.parent)
                for p in ctx.edition.problems]
    attach_notes(sections, dict(settings.config), ctx.edition)
    device = settings.device
    provenance, cost = provenance_summary(records), cost_of(records, gpu_run=settings.cuda,
                                                   host_gpus=COST_TARGET_GPUS.get(settings.grid, 1),
                                                   edition=ctx.edition)
    n_not_run = sum(len(c["missing"]) for c in coverage.values())
    targets = (targets_table({s["id"]: s["data"] for s in sections}, cost, provenance["gpu"],
                             n_not_run if expected else None, cut_down_grid(settings), settings.grid)
               if settings.cuda else None)
    return {
        "title": "CS336 Assignment 2 (Systems): profiling and benchmarking",
        "handout": {"name": ctx.edition.name, "problems": len(ctx.edition.problems), "points": ctx.edition.points},
        "generated_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device, "cpu_only": not settings.cuda, "grid": settings.grid,
        "provenance": provenance, "run": _run_line(records, provenance), "sections": sections, "targets": targets,
        # a user's model (kind "user"), named by the sentences that would otherwise describe the built-ins
        "user_model": next((m for m in provenance["model"]["models"] if m["kind"] == "user"), None),
        "points": {"total": sum(s["points"] for s in sections),
                   "answered": sum(s["points"] for s in sections if s["ran"]),
                   "with_gaps": [{"number": s["number"], "points": s["points"], **s["gaps"]} for s in sections
                                 if s["ran"] and s["gaps"] and any(s["gaps"].values())]},
        "appendix_table": experiments_table(records, expected, coverage),
        "n_not_run": n_not_run,
        "cost": cost, "config_yaml": yaml.safe_dump(dict(settings.config), sort_keys=False),
        "n_results": len(records),
        "status_counts": {s: sum(r["status"] == s for r in records) for s in ("ok", "oom", "error", "skipped", "not_run", "not_implemented")},
        "n_oom_shared": sum(record_status(r) == "oom_shared" for r in records),
    }


def render_report(result_paths: list[str], config: dict, out_dir: str | Path,
                  links_from: str | Path | None = None, draw: bool = True,
                  expected: dict[str, dict] | None = None) -> dict:
    """Render every page into ``out_dir``; ``links_from`` is the folder the pages' links to record
    folders start from, where the pages will be read (default: ``out_dir``); ``draw``: False skips
    drawing the figures (no PNG is written, the HTML's images are empty), for a check of the text alone.
    ``expected``: the configured cells with their settings, where the caller resolved them
    (:meth:`~.settings.RenderSettings.from_config`; else those ``config`` names, else None)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = out_dir / "figures"
    shutil.rmtree(figures, ignore_errors=True)
    figures.mkdir()
    records = [load(p) for p in result_paths]
    settings = RenderSettings.from_config(config, expected)
    # the report's commands rerun its own grid, and name the machine a result needs where this one cannot run it
    token = RERUN_OPTIONS.set(grid_option(settings.grid, settings.device, settings.edition))
    host = RERUN_HOST.set(rerun_host(records, settings))
    try:
        context = build_context(records, settings, figures, Path(links_from) if links_from else None, draw)
        envs = environments(Path(links_from) if links_from else out_dir)
        pages = {"index.html": ("html", "report.html.j2"), "report.md": ("md", "report.md.j2"),
                 "answers.md": ("md", "answers.md.j2"), "evidence.md": ("md", "evidence.md.j2")}
        for name, (kind, template) in pages.items():
            text = envs[kind].get_template(template).render(fmt_lib=f"_{kind}.j2", page=name, **context)
            write_atomic(out_dir / name, text.encode())
    finally:
        RERUN_HOST.reset(host)
        RERUN_OPTIONS.reset(token)
    return context
