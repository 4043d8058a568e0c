"""Reading an edition's YAML file into an :class:`~cs336report.editions.entries.Edition`.

Three steps, each stopping at the first error with :class:`EditionError`, whose message names the
file and the field (``2026.yaml: problems[5].parts[1].form.sentences: ...``):

1. the YAML parses;
2. it has the shape of ``edition.schema.yaml`` (JSON schema: types, required and unknown keys);
3. the facts that span fields agree: problems numbered 1..N in order with unique ids, lettered
   sub-questions a, b, c... with a heading each, the stated totals of problems and points, every
   experiment of the handout grid read by a problem, one main adapter per piece, and every test
   case naming a problem, sub-question, piece and releases that exist.

    edition = load(Path("cs336report/editions/2025.yaml"))
"""

from __future__ import annotations

import string
from collections import Counter
from pathlib import Path

import jsonschema
import yaml

from .entries import (Adapter, Edition, Form, Model, Part, Problem, TestCase, TestFile, TestSuite, freeze,
                      release_key)

SCHEMA = Path(__file__).with_name("edition.schema.yaml")
TESTS_RULE = "handout_tests"  # the rule whose records answer the problems graded by the handout's tests


class EditionError(ValueError):
    """An edition file that cannot be used; the message starts with the file and the field."""


def field_path(parts) -> str:
    """``["problems", 3, "parts", 0]`` -> ``problems[3].parts[0]``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _error(path: Path, where, message: str) -> EditionError:
    where = where if isinstance(where, str) else field_path(where)
    return EditionError(f"{path}: {where}: {message}")


def read(path: Path) -> dict:
    """The file's YAML, checked against the schema."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise EditionError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise _error(path, [], f"expected a mapping, got {type(raw).__name__}")
    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(raw), key=lambda e: list(map(str, e.path)))
    if errors:
        err = errors[0]
        raise _error(path, list(err.absolute_path), err.message)
    return raw


# --------------------------------------------------------------------------- building the records


def _count(value) -> int | tuple[int, int] | None:
    return None if value is True else tuple(value) if isinstance(value, list) else value


def _problem(raw: dict) -> Problem:
    parts = tuple(Part(p["letter"], p.get("heading", ""), p["asks"],
                       tuple(Form(kind, _count(n)) for kind, n in p["form"].items())) for p in raw["parts"])
    return Problem(raw["id"], raw["number"], raw["title"], raw["points"], raw["section"], raw.get("rule", raw["id"]),
                   tuple(raw["experiments"]), tuple(raw.get("planned", ())), parts, tuple(raw.get("open", ())),
                   freeze(raw.get("fixed", {})))


def _suite(raw: dict) -> TestSuite:
    files = []
    for f in raw["files"]:
        cases = []
        for c in f["cases"]:
            for case_id in c.get("ids") or [None]:
                name = c["test"] if case_id is None else f"{c['test']}[{case_id}]"
                cases.append(TestCase(name, c["test"], f["file"], raw["name"], c["problem"], c.get("subquestion", ""),
                                      c.get("piece"), c.get("device", "cpu"), c["checks"], c.get("since"),
                                      c.get("until")))
        files.append(TestFile(f["file"], tuple(cases)))
    return TestSuite(raw["name"], tuple(files))


def build(raw: dict, path: Path) -> Edition:
    """The records of a file whose shape the schema has checked."""
    adapters = tuple(Adapter(a["name"], a["piece"], a["returns"], tuple(a.get("problems", ())),
                             tuple(a.get("positional", ())), tuple(a.get("keywords", ()))) for a in raw["adapters"])
    return Edition(raw["id"], raw["name"], raw["handout"], raw["repository"], raw["version_line"],
                   tuple(raw["releases"]), raw["vocab_size"], raw["batch_size"], raw["context_length"],
                   tuple(Model(**m) for m in raw["models"]), tuple(_problem(p) for p in raw["problems"]), adapters,
                   str(path), freeze(raw["benchmarking"]), freeze(raw["handout_grid"]),
                   tuple(_suite(s) for s in raw["test_suites"]))


# --------------------------------------------------------------------------- facts across fields


def _duplicates(values) -> list:
    return [v for v, n in Counter(values).items() if n > 1]


def _check_problems(edition: Edition, raw: dict, path: Path) -> None:
    for i, p in enumerate(edition.problems):
        at = ["problems", i]
        if p.number != i + 1:
            raise _error(path, at + ["number"], f"{p.id} is problem {i + 1} in the file's order, not {p.number}")
        letters = [part.letter for part in p.parts]
        want = [""] if letters == [""] else list(string.ascii_lowercase[:len(letters)])
        if letters != want:
            j = next(j for j, (a, b) in enumerate(zip(letters, want)) if a != b)
            raise _error(path, at + ["parts", j, "letter"], f"{p.id}'s sub-questions must be lettered "
                         f"{', '.join(want) or 'a, b, ...'} in order (or one part with an empty letter), got {letters}")
        for j, part in enumerate(p.parts):
            if part.letter and not part.heading:
                raise _error(path, at + ["parts", j], f"sub-question ({part.letter}) of {p.id} has no heading")
        if not p.experiments and not p.planned:
            raise _error(path, at + ["experiments"], f"{p.id} names no experiment, existing or planned")
        if set(p.experiments) & set(p.planned):
            raise _error(path, at + ["planned"], f"{sorted(set(p.experiments) & set(p.planned))} are both existing "
                                                 "and planned")
        if p.answered_by_tests != (p.rule == TESTS_RULE):
            raise _error(path, at + ["rule"], f"{p.id}: a problem is answered by the rule {TESTS_RULE} exactly "
                                              "when every part's form is tests")
    dup = _duplicates(edition.order)
    if dup:
        i = max(i for i, p in enumerate(edition.problems) if p.id == dup[0])
        raise _error(path, ["problems", i, "id"], f"{dup[0]} is listed twice")
    totals = raw["totals"]
    if len(edition.problems) != totals["problems"]:
        raise _error(path, "totals.problems", f"says {totals['problems']}, the file lists {len(edition.problems)}")
    if edition.points != totals["points"]:
        raise _error(path, "totals.points", f"says {totals['points']}, the problems' points add up to {edition.points}")


def _check_edition(edition: Edition, path: Path) -> None:
    dup = _duplicates(m.name for m in edition.models)
    if dup:
        raise _error(path, "models", f"size {dup[0]} is listed twice")
    for i, release in enumerate(edition.releases):
        if not edition.holds(release):
            raise _error(path, ["releases", i], f"{release} is not in the version line {edition.version_line}")
        if i and release_key(release) <= release_key(edition.releases[i - 1]):
            raise _error(path, ["releases", i], "releases must be listed oldest first")
    read_by = {e for p in edition.problems for e in (*p.experiments, *p.planned)}
    for name in edition.handout_grid:
        if name not in read_by:
            raise _error(path, f"handout_grid.{name}", "no problem reads this experiment")


def _check_adapters(edition: Edition, path: Path) -> None:
    names = [a.name for a in edition.adapters]
    dup = _duplicates(names)
    if dup:
        last = len(names) - 1 - names[::-1].index(dup[0])
        raise _error(path, ["adapters", last, "name"], f"{dup[0]} is listed twice")
    for i, a in enumerate(edition.adapters):
        builders = [b for b in edition.adapters if b.piece == a.piece and b.builds]
        if len(builders) != 1:
            raise _error(path, ["adapters", i, "piece"], f"piece {a.piece} has {len(builders)} main adapters (one "
                                                         "returning the implementation is needed)")
        if a.builds != bool(a.problems):
            raise _error(path, ["adapters", i, "problems"], "the main adapter of a piece, and only it, names the "
                                                            "problems whose tests call it")
        for problem in a.problems:
            if problem not in edition.order:
                raise _error(path, ["adapters", i, "problems"], f"no problem {problem}")


def _check_tests(edition: Edition, raw: dict, path: Path) -> None:
    dup = _duplicates(s["name"] for s in raw["test_suites"])
    if dup:
        raise _error(path, "test_suites", f"suite {dup[0]} is listed twice")
    pieces = edition.pieces
    for i, suite in enumerate(raw["test_suites"]):
        for j, f in enumerate(suite["files"]):
            for k, c in enumerate(f["cases"]):
                at = ["test_suites", i, "files", j, "cases", k]
                if c["problem"] not in edition.order:
                    raise _error(path, at + ["problem"], f"no problem {c['problem']}")
                problem = edition.problem(c["problem"])
                if c.get("subquestion", "") not in (problem.subquestions or ("",)):
                    raise _error(path, at + ["subquestion"], f"{problem.id} has sub-questions "
                                 f"{', '.join(problem.subquestions) or '(none)'}, not {c.get('subquestion', '')!r}")
                if c.get("piece") and c["piece"] not in pieces:
                    raise _error(path, at + ["piece"], f"no adapter serves piece {c['piece']}")
                for key in ("since", "until"):
                    if c.get(key) and c[key] not in edition.releases:
                        raise _error(path, at + [key], f"{c[key]} is not one of the releases listed")
    for release in edition.releases:
        names = [c.name for s in edition.test_suites(release) for c in s.cases]
        if _duplicates(names):
            raise _error(path, "test_suites", f"case {_duplicates(names)[0]} is listed twice for release {release}")
    grid_suites = (edition.handout_grid.get(TESTS_RULE) or {}).get("suites", [])
    for suite in grid_suites:
        if suite not in {s["name"] for s in raw["test_suites"]}:
            raise _error(path, f"handout_grid.{TESTS_RULE}.suites", f"no test suite {suite}")


def load(path: str | Path) -> Edition:
    """The edition in ``path``, or :class:`EditionError` naming the file and the field."""
    path = Path(path)
    raw = read(path)
    edition = build(raw, path)
    _check_problems(edition, raw, path)
    _check_edition(edition, path)
    _check_adapters(edition, path)
    _check_tests(edition, raw, path)
    return edition
