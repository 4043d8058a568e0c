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
from . import OUR_FILES, STUDENT_FILES, SUITE_PACKAGE, course as course_tests, student_copies

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


def parse_junit(path: str | Path, suite: str, adapters: dict | None = None,
                cases: dict[str, tuple[str, str, str | None]] | None = None) -> list[dict]:
    """Each <testcase> of a JUnit XML file as a test entry of the record.

    ``adapters``: the check's verdicts by piece (:func:`_verdicts`); a test of a piece found not
    implemented there is ``not_implemented``, also where it passed (a pass never stands for an
    adapter that raises NotImplementedError). ``cases``: (problem, sub-question,
    piece) by test name, from the edition registry; a test it does not name is classified by its name.
    """
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        problem, subquestion, piece = (cases or {}).get(name) or classify(name, suite)
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = found.get("message") or (found.text or "")
                full = f"{message}\n{found.text or ''}"
                verdict = (adapters or {}).get(piece) or {}
                adapter = PIECES[piece].adapter if piece else "its adapter"
                if tag != "skipped" and _not_implemented_reason(full):
                    outcome, message = "not_implemented", f"{adapter} raises NotImplementedError"
                elif tag != "skipped" and verdict.get("status") == "not_implemented":
                    outcome, message = "not_implemented", f"{adapter}: {verdict.get('reason', '')}"
                break
        error = next((p.get("value") for p in case.iter("property") if p.get("name") == "max_abs_error"), None)
        verdict = (adapters or {}).get(piece) or {}
        if outcome == "passed" and verdict.get("status") == "not_implemented":
            outcome = "not_implemented"
            message = (f"{PIECES[piece].adapter}: {verdict.get('reason', '')} (the test passed; a pass does not "
                       f"stand for an adapter that is not implemented)")
        tests.append({"id": _node_id(case), "name": name, "problem": problem, "subquestion": subquestion,
                      "outcome": outcome, "seconds": float(case.get("time") or 0.0), "message": _short(message),
                      "max_abs_error": float(error) if error is not None else None})
    return tests


# ----------------------------------------------------------------------------- the cells


def tests_source(cell: dict) -> dict:
    """Whose tests a cell runs, and how the record and the report name them: the course clone's
    (``course``), the student's own copies (``student_copies``) or cs336report's suite (``own_suite``)."""
    course, student = cell.get("course"), cell.get("student")
    if course:
        return {"kind": "course", "label": course["label"], "release": course["release"],
                "tests_release": course["tests_release"], "checkout": course["checkout"]}
    if student:
        return {"kind": "student_copies", "label": STUDENT_COPIES, "checkout": student["checkout"]}
    return {"kind": "own_suite", "label": "cs336report's re-written suite of the handout's tests",
            "checkout": None}


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
        paths = checkout_paths(student["checkout"]) if student else []
        options = course_tests.pytest_options(workdir)
    elif student:  # the student's copies, from a copy of their tests/ in workdir (:mod:`.student_copies`)
        root = workdir
        files = student_copies.prepare(Path(student["checkout"]), workdir, STUDENT_FILES[cell["suite"]])
        paths = checkout_paths(student["checkout"])
        options = course_tests.pytest_options(workdir)
    else:
        root = SUITE_PACKAGE.parent.parent
        files = [str(SUITE_PACKAGE / f) for f in OUR_FILES[cell["suite"]]]
        paths = []
    if not files:  # a student checkout without its copies of the tests
        names = ", ".join(f"tests/{f}" for f in STUDENT_FILES[cell["suite"]])
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
    return editions.get(cell.get("edition") or editions.DEFAULT).suite(cell["suite"])


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
    all_files = {f.file for s in editions.get(cell.get("edition") or editions.DEFAULT).test_suites() for f in s.files}
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
    verdicts = _verdicts(student, cell["device"])
    data["tests"] = parse_junit(junitxml, cell["suite"], verdicts,
                                course_tests.cases(cell) if cell.get("course") else None)
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


