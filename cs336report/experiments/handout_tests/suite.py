"""handout_tests' run of one suite: pytest on the suite's test files, each test's outcome read from
the JUnit XML it writes (the package's docstring: :mod:`cs336report.experiments.handout_tests`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from ... import editions
from ...student.resolve import BUILTIN, PIECES, AdapterNotImplemented, checkout_paths
from . import (DEFAULT_EDITION, OUR_FILES_BY_EDITION, STUDENT_FILES, SUITE_PACKAGE, course as course_tests,
               edition_of, student_copies)

MESSAGE_CHARS = 300
STUDENT_COPIES = "the student's own copies of the handout's tests"


def classify(test_name: str, suite: str) -> tuple[str, str, str | None]:
    """(problem, sub-question, piece) a test grades, from its name (the handout's and ours read alike)."""
    name = test_name.lower()
    if "flash" in name or "attention" in name:
        triton = "triton" in name
        piece = "flash_triton" if triton else "flash_pytorch"
        if "backward" in name:
            return "flash_backward", "", piece
        if triton:
            return "flash_forward", "c" if "[true]" in name else "b", piece
        return "flash_forward", "a", piece
    if "individual" in name:
        return "ddp_overlap_individual_parameters", "", "ddp_individual_parameters"
    if "naive" in name:
        return "naive_ddp", "", None
    if "shard" in name:
        return "optimizer_state_sharding", "", "sharded_optimizer"
    if "ddp" in name or "dataparallel" in name or "bucket" in name:
        return "ddp_overlap_bucketed", "", "ddp_bucketed"
    return {"attention": ("flash_forward", "", None), "ddp": ("ddp_overlap_bucketed", "", "ddp_bucketed"),
            "sharded_optimizer": ("optimizer_state_sharding", "", "sharded_optimizer")}[suite]


def _short(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"


def _node_id(case: ET.Element) -> str:
    name = case.get("name", "")
    file = case.get("file")
    if not file:
        parts = case.get("classname", "").split(".")
        cls = [p for p in parts if p[:1].isupper()]
        file = "/".join(p for p in parts if p not in cls) + ".py"
        return "::".join([file, *cls, name])
    cls = case.get("classname", "").split(".")[-1]
    return "::".join([file, *([cls] if cls[:1].isupper() else []), name])


def _not_implemented_reason(text: str) -> bool:
    return "NotImplementedError" in text or "AdapterNotImplemented" in text


def adapter_name(piece: str | None, edition: int = DEFAULT_EDITION) -> str:
    """The adapter of ``piece`` in ``edition``'s tests/adapters.py (2026's DDP piece is ``get_ddp``)."""
    if not piece:
        return "its adapter"
    found = editions.get(edition).pieces.get(piece)
    return found.adapter.name if found else PIECES[piece].adapter


def parse_junit(path: str | Path, suite: str, adapters: dict | None = None,
                cases: dict[str, tuple[str, str, str | None]] | None = None,
                edition: int = DEFAULT_EDITION) -> list[dict]:
    """Each <testcase> of a JUnit XML file as a test entry of the record.

    ``adapters``: the check's verdicts by piece (:func:`_verdicts`); a test of a piece found not
    implemented there is ``not_implemented``, also where it passed (a pass never stands for an
    adapter that raises NotImplementedError). ``cases``: (problem, sub-question, piece) by test name,
    from the edition registry, or by test function (the name before its parameters); a test it does
    not name is classified by its name. ``edition``: whose adapter names the messages use.
    """
    tests, cases = [], cases or {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        problem, subquestion, piece = cases.get(name) or cases.get(name.split("[")[0]) or classify(name, suite)
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = found.get("message") or (found.text or "")
                full = f"{message}\n{found.text or ''}"
                verdict = (adapters or {}).get(piece) or {}
                adapter = adapter_name(piece, edition)
                if tag != "skipped" and _not_implemented_reason(full):
                    raised = (f"what {adapter} returned ({verdict['class']})" if verdict.get("status") == "implemented"
                              and verdict.get("class") else adapter)  # e.g. a forward-only function's backward
                    outcome, message = "not_implemented", f"{raised} raises NotImplementedError"
                elif tag != "skipped" and verdict.get("status") == "not_implemented":
                    outcome, message = "not_implemented", f"{adapter}: {verdict.get('reason', '')}"
                break
        error = next((p.get("value") for p in case.iter("property") if p.get("name") == "max_abs_error"), None)
        verdict = (adapters or {}).get(piece) or {}
        if outcome == "passed" and verdict.get("status") == "not_implemented":
            outcome = "not_implemented"
            message = (f"{adapter_name(piece, edition)}: {verdict.get('reason', '')} (the test passed; a pass does not "
                       f"stand for an adapter that is not implemented)")
        tests.append({"id": _node_id(case), "name": name, "problem": problem, "subquestion": subquestion,
                      "outcome": outcome, "seconds": float(case.get("time") or 0.0), "message": _short(message),
                      "max_abs_error": float(error) if error is not None else None})
    return tests


# ----------------------------------------------------------------------------- the cells


def student_release(cell: dict) -> tuple[str | None, str]:
    """The release of the student's checkout (the newest heading of its CHANGELOG.md, else
    pyproject.toml's version; None where neither says) and the known release whose tests the
    registry describes for it (the newest known where the release is unknown or of no known tests)."""
    edition = editions.get(edition_of(cell))
    release, _ = editions.read_release(cell["student"]["checkout"])
    try:
        return release, edition.tests_release(release)
    except ValueError:  # no release, one of another edition, or one older than every known release
        return release, edition.tests_release()


def tests_source(cell: dict) -> dict:
    """Whose tests a cell runs, and how the record and the report name them: the course clone's
    (``course``), the student's own copies (``student_copies``) or cs336report's suite (``own_suite``).
    Beside a 2025 cell's fields, a cell of another edition names it, and for the student's copies
    the checkout's release and the release whose tests the registry describes."""
    course, student = cell.get("course"), cell.get("student")
    extra = {"edition": cell["edition"]} if "edition" in cell else {}
    if course:
        return {"kind": "course", "label": course["label"], "release": course["release"],
                "tests_release": course["tests_release"], "checkout": course["checkout"], **extra}
    if student:
        label = STUDENT_COPIES
        if extra:
            release, tests_release = student_release(cell)
            extra.update(release=release, tests_release=tests_release)
            label += f" (release {release or 'not stated'}, graded as the tests of {tests_release})"
        return {"kind": "student_copies", "label": label, "checkout": student["checkout"], **extra}
    return {"kind": "own_suite", "label": "cs336report's re-written suite of the handout's tests",
            "checkout": None, **extra}


def student_files(cell: dict) -> list[str]:
    """The handout's test files of the cell's suite, as a student's checkout holds them (2025: the
    names of every 1.0.x release; another edition: its registry's, at the checkout's release)."""
    if edition_of(cell) == DEFAULT_EDITION:
        return STUDENT_FILES[cell["suite"]]
    return [f.file for f in editions.get(edition_of(cell)).suite(cell["suite"], student_release(cell)[1]).files]


def registry_cases(cell: dict) -> dict[str, tuple[str, str, str | None]] | None:
    """(problem, sub-question, piece) of the cell's tests from the edition registry, by JUnit name and
    by test function where all of a function's cases grade the same: the course clone's at its
    release, a student's copies at theirs, our suite at the newest known; None for a 2025 cell
    without a clone (its tests are classified by name)."""
    if cell.get("course"):
        return course_tests.cases(cell)
    edition = edition_of(cell)
    if edition == DEFAULT_EDITION:
        return None
    release = student_release(cell)[1] if cell.get("student") else None
    found = editions.get(edition).suite(cell["suite"], release).cases
    out = {c.name: (c.problem, c.subquestion, c.piece) for c in found}
    for test in {c.test for c in found}:
        graded = {(c.problem, c.subquestion, c.piece) for c in found if c.test == test}
        if len(graded) == 1:
            out.setdefault(test, graded.pop())
    return out


def edition_verdicts(verdicts: dict | None, edition: int) -> dict | None:
    """The check's verdicts of the pieces whose adapter ``edition`` names alike (a verdict on 2025's
    ``get_ddp_individual_parameters`` says nothing of 2026's ``get_ddp``)."""
    if verdicts is None or edition == DEFAULT_EDITION:
        return verdicts
    return {piece: v for piece, v in verdicts.items() if v.get("adapter") == adapter_name(piece, edition)}


def command(cell: dict, junitxml: Path, workdir: Path | None = None) -> tuple[list[str], Path, dict]:
    """The pytest command line of a suite, its working directory and environment. With a course
    clone the clone's tests run from ``workdir``, a temporary folder (:mod:`.course`)."""
    env = dict(os.environ)
    student = cell.get("student")
    ours = str(SUITE_PACKAGE.parent.parent)
    options = []
    if cell.get("course"):
        root = workdir
        files = course_tests.prepare(cell, workdir)
        paths = checkout_paths(student["checkout"]) if student else course_tests.model_paths(cell)
        options = course_tests.pytest_options(workdir)
    elif student:  # the student's copies, from a copy of their tests/ in workdir (:mod:`.student_copies`)
        root = workdir
        files = student_copies.prepare(Path(student["checkout"]), workdir, student_files(cell))
        paths = checkout_paths(student["checkout"])
        options = course_tests.pytest_options(workdir)
    else:
        root = SUITE_PACKAGE.parent.parent
        files = [str(SUITE_PACKAGE / f) for f in OUR_FILES_BY_EDITION[edition_of(cell)][cell["suite"]]]
        paths = []
    if not files:  # a student checkout without its copies of the tests
        names = ", ".join(f"tests/{f}" for f in student_files(cell))
        raise FileNotFoundError(f"{student['checkout']} has none of {names}, the handout's tests of suite "
                                f"{cell['suite']}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, ours, env.get("PYTHONPATH")]))
    if not cell["device"].startswith("cuda"):
        env["TRITON_INTERPRET"] = "1"
    # The handout's PyTorch FlashAttention tests run on CPU tensors, also beside a GPU: compiling our
    # backward for them is an Inductor C++ build (34-55 s on H200 hosts) that nothing measures.
    env["CS336_FLASH_BACKWARD"] = "eager"
    options = options or ["--rootdir", str(root), "--confcutdir", str(root)]
    argv = [sys.executable, "-m", "pytest", *files, f"--junitxml={junitxml}", "-o", "junit_family=xunit1",
            "-p", "no:cacheprovider", *options, "-q", "-rN"]
    return argv, root, env


def run(cell: dict) -> dict:
    """Run one suite with pytest; the record's data: each test's outcome and the run's settings."""
    junitxml = Path(cell["junitxml"]).resolve()
    junitxml.parent.mkdir(parents=True, exist_ok=True)
    junitxml.unlink(missing_ok=True)
    try:
        return _run(cell, junitxml)
    finally:
        if not junitxml.is_file():  # the rule's second output, also when pytest never ran
            junitxml.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites name="not run" tests="0"/>\n')


def _verdicts(student: dict | None, device: str) -> dict | None:
    """Each piece's verdict of the student's checkout (implemented or not, and why), from the probes
    the check_student rule ran first (:func:`cs336report.student.check.check_pieces`)."""
    if not student:
        return None
    if "adapters" in student:
        return student["adapters"]
    from ...student.check import check_pieces

    return check_pieces(student, device)


def registry_suite(cell: dict) -> editions.TestSuite:
    """The edition's description of the cell's suite: at the course clone's release, else (the
    student's copies) the edition the config resolved, at its newest release."""
    if cell.get("course"):
        return course_tests.suite(cell)
    return editions.get(edition_of(cell)).suite(cell["suite"])


def _set_apart(cell: dict, data: dict) -> None:
    """The student's side of a record: their conftest (its outcome-changing hooks; conftest code runs
    with the user's rights) and their tests that are not the handout's, apart from ``tests``:
    cases and files the edition does not have, or, with a course clone, copies that differ from it."""
    checkout = Path(cell["student"]["checkout"])
    known = registry_suite(cell)
    if cell.get("course"):
        data["conftest"] = student_copies.conftest_entry(checkout, course=True)
        data["student_tests"] = {**student_copies.differing_files(checkout, Path(cell["course"]["checkout"])),
                                 "extra": []}
        return
    data["conftest"] = student_copies.conftest_entry(checkout, course=False)
    data["tests"], extra = student_copies.split_extra(data["tests"], {c.name for c in known.cases})
    all_files = {f.file for s in editions.get(edition_of(cell)).test_suites() for f in s.files}
    data["student_tests"] = {"extra": extra, "extra_files": student_copies.extra_files(checkout, all_files),
                             "modified_files": []}


def _run(cell: dict, junitxml: Path) -> dict:
    isolated = cell.get("course") or cell.get("student")
    workdir = Path(tempfile.mkdtemp(prefix="cs336report-handout-tests-")) if isolated else None
    try:
        return _run_in(cell, junitxml, workdir)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def _run_in(cell: dict, junitxml: Path, workdir: Path | None) -> dict:
    argv, root, env = command(cell, junitxml, workdir)
    student = cell.get("student")
    data = {"suite": cell["suite"], "implementation": student["name"] if student else BUILTIN,
            "checkout": student["checkout"] if student else None, "tests_source": tests_source(cell),
            "command": argv[1:],
            "environment": {k: env[k] for k in ("TRITON_INTERPRET", "CS336_FLASH_BACKWARD") if k in env}}
    try:
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=cell["timeout_s"])
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"pytest ran past timeout_s = {cell['timeout_s']} s") from None
    sys.stderr.write(done.stdout[-20000:] + done.stderr[-5000:])
    data["pytest_exit_code"] = done.returncode
    if not junitxml.is_file() or junitxml.stat().st_size == 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"pytest exited {done.returncode} without a JUnit XML: {' | '.join(tail)}")
    edition = edition_of(cell)
    verdicts = edition_verdicts(_verdicts(student, cell["device"]), edition)
    data["tests"] = parse_junit(junitxml, cell["suite"], verdicts, registry_cases(cell), edition)
    if student:
        _set_apart(cell, data)
        data["classes"] = {piece: v["class"] for piece, v in (verdicts or {}).items()
                           if v.get("class")}  # what the student's adapters return, named in the answers
    data["outcomes"] = {o: sum(t["outcome"] == o for t in data["tests"]) for o in
                        ("passed", "failed", "skipped", "error", "not_implemented")}
    if done.returncode > 1 and not data["tests"]:  # usage or collection error: nothing ran
        tail = (done.stdout or done.stderr).splitlines()[-3:]
        raise RuntimeError(f"pytest exited {done.returncode}: {' | '.join(tail)}")
    if data["tests"] and all(t["outcome"] == "not_implemented" for t in data["tests"]):
        exc = AdapterNotImplemented(", ".join(sorted({t["message"] for t in data["tests"]})))
        exc.partial_data = data
        raise exc
    return data


