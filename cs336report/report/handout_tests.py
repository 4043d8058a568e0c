"""The handout's test cases as the report reads them: records of the ``handout_tests`` experiment.

One record per test suite (``results/handout_tests/<suite>.json``), each listing its tests with
the handout problem and sub-question they check, their outcome, time and the largest absolute
error against the reference where the test measured one, and whose tests they are: the course's
own, from its clone ("the handout's tests (course release X)"), the student's own copies, or
cs336report's re-written suite (``data.tests_source``; a record older than that field is read
from whose checkout ran). A problem's answer says, per
sub-question, how many of its tests passed and the largest error; its evidence lists every test.
Every such problem is built by one shared builder, :mod:`cs336report.report.sections.handout_tests`,
from :func:`problem_part`, this module's ``skip_reason`` and ``headline_of``.
"""

from __future__ import annotations

import pandas as pd

from ..names.handout import rerun_command
from ..records.shapes import ConftestFile, StudentTests, read_as, typed
from .record_frame import record_frame
from .tables import Num, sig, table_from_frame

EXPERIMENT = "handout_tests"
OUTCOMES = ("passed", "failed", "error", "skipped", "not_implemented")


def fmt_error(x: float) -> str:
    """An absolute error in two significant digits (errors span many orders of magnitude)."""
    return "0" if x == 0 else f"{x:.2g}"


# A suite's fields a row holds: column -> dotted path (record_frame)
SUITE_FIELDS = {"suite": "cell", "implementation": "data.implementation", "cell_implementation": "config.implementation",
                "checkout": "data.checkout", "source": "_path"}
# A test's fields, and what a test that lacks one has there
TEST_DEFAULTS = {"id": "", "name": None, "problem": "", "subquestion": "", "outcome": "error", "seconds": None,
                 "message": "", "max_abs_error": None}
COLUMNS = ["suite", "implementation", "origin", "tests_kind", "tests_label", "source", *TEST_DEFAULTS]


# How the report names whose tests ran, where a record does not say (records written before it did).
LABELS = {"student_copies": "the student's own copies of the handout's tests",
          "own_suite": "cs336report's re-written suite of the handout's tests"}


def tests_source(record: dict) -> dict:
    """Whose tests a record ran (``kind``: course, student_copies or own_suite) and their ``label``."""
    data = typed(record)
    if data.tests_source:
        return data.tests_source
    kind = "student_copies" if data.checkout else "own_suite"
    return {"kind": kind, "label": LABELS[kind]}


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per test of every suite."""
    suites = record_frame(records, SUITE_FIELDS, defaults={"source": ""}, exact=True)
    suites["implementation"] = [mine or cell or "built-in"
                                for mine, cell in zip(suites["implementation"], suites["cell_implementation"])]
    suites["origin"] = ["checkout" if c else "cs336report" for c in suites["checkout"]]  # whose implementation ran
    sources = [tests_source(r) for r in records]
    suites["tests_kind"] = [s["kind"] for s in sources]
    suites["tests_label"] = [s["label"] for s in sources]
    tests = [pd.DataFrame(typed(r).tests or [], columns=list(TEST_DEFAULTS), dtype=object).assign(_suite=i)
             for i, r in enumerate(records)]
    if not tests:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.concat(tests, ignore_index=True).join(suites, on="_suite")
    df = df.where(df.notna(), None)
    for column, default in TEST_DEFAULTS.items():
        if default is not None:
            df[column] = [default if v is None else v for v in df[column]]
    df["name"] = [name or test_id for name, test_id in zip(df["name"], df["id"])]
    return pd.DataFrame(df[COLUMNS].to_dict("records"), columns=COLUMNS)


def _summary(g: pd.DataFrame) -> dict:
    counts = {o: int((g["outcome"] == o).sum()) for o in OUTCOMES}
    errors = pd.to_numeric(g["max_abs_error"], errors="coerce").dropna()
    bad = g[g["outcome"].isin(("failed", "error"))]
    skips = [m.splitlines()[0] for m in g.loc[g["outcome"] == "skipped", "message"] if m]
    return {"n": int(len(g)), **counts, "all_passed": counts["passed"] == len(g) and len(g) > 0,
            "all_skipped": counts["skipped"] == len(g) and len(g) > 0, "skip_reason": skips[0] if skips else None,
            "max_error": Num(fmt_error(float(errors.max())), g.loc[errors.idxmax(), "source"] or None)
            if len(errors) else None,
            "seconds": sig(float(pd.to_numeric(g["seconds"], errors="coerce").fillna(0).sum())),
            "names": list(g["name"]), "first_failure": (bad.iloc[0]["name"], bad.iloc[0]["message"].splitlines()[0]
                                                         if bad.iloc[0]["message"] else "") if len(bad) else None}


def problem_part(records: list[dict], problem: str, subquestions: tuple[str, ...]) -> dict:
    """Per sub-question (``""`` for a problem with one deliverable): its tests' outcome counts, the
    largest error and the first failure; the evidence table of every test of the problem."""
    df = frame(records)
    df = df[df["problem"] == problem]
    out = {"ran": not df.empty, "command": rerun_command("handout_tests"), "subs": {}, "table": None,
           "implementations": sorted(set(df["implementation"])), "sources": sorted(set(df["source"])),
           # without a course clone or a student's checkout the cases are cs336report's own, written from the handout
           "own_suite": bool(len(df)) and bool((df["tests_kind"] == "own_suite").all())}
    if df.empty:
        return out
    kinds = list(dict.fromkeys(df["tests_kind"]))
    out.update(tests_kind=kinds[0] if len(kinds) == 1 else "mixed",
               tests_label="; ".join(dict.fromkeys(df["tests_label"])),
               student=bool((df["origin"] == "checkout").any()))
    for letter in subquestions or ("",):
        g = df[df["subquestion"] == letter] if subquestions else df
        out["subs"][letter or "all"] = _summary(g) if len(g) else None
    out["all"] = _summary(df)
    out["student_side"] = student_side(records, problem) if out["student"] else None
    out["classes"] = {piece: name for r in records for piece, name in (typed(r).classes or {}).items()}
    shown = pd.DataFrame({
        "test": df["name"], "sub-question": df["subquestion"].map(lambda s: f"({s})" if s else "–"),
        "outcome": df["outcome"].str.replace("_", " "),
        "time": [sig(float(s)) if s is not None and s == s else "–" for s in df["seconds"]],
        "max abs error": [fmt_error(float(e)) if e is not None and e == e else "–" for e in df["max_abs_error"]],
        "message": [m.splitlines()[0][:160] if m else "" for m in df["message"]],
        "_status": ["ok" if o == "passed" else ("not_run" if o in ("skipped", "not_implemented") else "error")
                    for o in df["outcome"]],
    })
    title = (f"Tests of {problem}, cs336report's own suite" if out["own_suite"]
             else f"Tests of {problem}: {out['tests_label']}")
    out["table"] = table_from_frame(shown, title, sources=out["sources"],
                                    units={"time": "s"}, status="_status",
                                    note="max abs error: the largest absolute difference from the reference "
                                         "the test compares against, where it records one")
    return out


COPIED = "copied test"  # what a test of the student's copies is called (never "handout test")


def student_side(records: list[dict], problem: str) -> dict:
    """What the answer says of the student's side of the tests: each conftest of the checkout that
    defines outcome-changing hooks (and whether it ran), whether any of its conftests ran, the student's extra tests of ``problem``
    (cases the edition does not have, with their outcome) and their own or edited test files."""
    conftests, extra, files, ran = {}, [], set(), False
    for record in records:
        data = typed(record)
        for entry in (data.conftest or {}).get("files") or []:
            conftest = read_as(ConftestFile, entry)
            ran = ran or bool(conftest.ran)
            if conftest.outcome_hooks:
                conftests[conftest.file] = entry
        side = read_as(StudentTests, data.student_tests)
        extra += [{"name": t["name"], "outcome": t["outcome"].replace("_", " ")}
                  for t in side.extra or [] if t["problem"] == problem]
        files.update([*(side.extra_files or []), *(side.modified_files or [])])
    return {"conftests": list(conftests.values()), "conftest_ran": ran, "extra": extra, "files": sorted(files)}


def skip_reason(ctx) -> str:
    """The "not run" reason of a problem answered by the handout's tests."""
    return "this run has no records of the handout's tests"


def outcome_clause(t: dict, what: str, noun: str = "handout test") -> str:
    """The answer's sentence on the tests of ``what`` (one sub-question's counts, :func:`_summary`), up to
    the tests' names: the words of the ``outcome`` macro of templates/answers/handout_tests.j2."""
    some = f"the {noun}" if t["n"] == 1 else f"all {t['n']} {noun}s"
    if t["all_skipped"]:
        return f"Skipped: {some} of {what}"
    if t["all_passed"]:
        return f"Passed: {some} of {what}"
    text = f"{t['passed']} of {t['n']} {noun}s of {what} passed"
    if t["failed"] or t["error"]:
        text += f", {t['failed'] + t['error']} failed"
    if t["not_implemented"]:
        text += f", {t['not_implemented']} not implemented"
    return text + (f", {t['skipped']} skipped" if t["skipped"] else "")


def headline_of(what: dict[str, str], noun: str = "handout test"):
    """The summary's clauses of a problem answered by the handout's tests: the outcome of each
    sub-question (``what``: its words by sub-question, "all" for a problem of one deliverable), and for
    one deliverable the largest error, as its answer words them."""

    def headline(part: dict) -> list[str]:
        subs = part.get("subs") or {}
        out = [outcome_clause(subs[key], words, noun) for key, words in what.items() if subs.get(key)]
        one = subs.get("all") if list(what) == ["all"] else None
        if one and one["max_error"] and not one["all_skipped"]:
            out.append(f"largest absolute error against the reference {one['max_error']}")
        return out

    return headline
