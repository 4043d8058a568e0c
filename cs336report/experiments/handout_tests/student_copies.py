"""The student's copies of the handout's tests, and their conftest, run in isolation and set apart.

Without a course clone, a checkout's own ``tests/`` (its copies of the handout's tests, its
``adapters.py``, its conftest) is copied into a temporary working folder and pytest runs there
(cwd, rootdir and confcutdir that folder, an empty pytest.ini of its own), so nothing of the
checkout's root (its pyproject's pytest options, a root conftest.py) takes part. Its conftest code
runs with the rights of the user running the report; a conftest hook that can change outcomes
(:data:`OUTCOME_HOOKS`) is removed from the copy that runs and named in the record, so that the
verdicts are those of the tests themselves. With a course clone the course's tests run instead
(:mod:`.course`), without the student's conftest, and this module only names the student's
conftest and the copies that differ from the clone's.

Cases and files the edition's registry does not have (a test the student added, a file of their
own) are the student's extra tests: the record lists them apart (``student_tests.extra``), never
among the handout's.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

TESTS_DIR = "tests"
CONFTEST = "conftest.py"
# pytest hooks with which a conftest can turn a failure into a pass, or drop or reorder tests.
OUTCOME_HOOKS = ("pytest_runtest_makereport", "pytest_collection_modifyitems", "pytest_runtest_call",
                 "pytest_runtest_protocol", "pytest_pyfunc_call", "pytest_report_teststatus",
                 "pytest_runtest_logreport", "pytest_deselected", "pytest_collection_finish")
RIGHTS = "conftest code runs with the rights of the user running the report"


def outcome_hooks(source: str) -> list[str]:
    """The hooks of :data:`OUTCOME_HOOKS` that a conftest's source defines at its top level (a plugin
    class defining them counts too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in OUTCOME_HOOKS:
            found.append(node.name)
    return sorted(set(found))


def without_hooks(source: str) -> str:
    """A conftest's source with the top-level functions of :data:`OUTCOME_HOOKS` removed."""
    lines = source.splitlines(keepends=True)
    for node in reversed(ast.parse(source).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in OUTCOME_HOOKS:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            lines[start:node.end_lineno] = [f"# {node.name}: removed by cs336report (it can change outcomes)\n"]
    return "".join(lines)


def conftests(checkout: Path) -> list[dict]:
    """Each conftest.py of a checkout (its root and its tests/) with the outcome-changing hooks it defines."""
    found = []
    for path in (checkout / CONFTEST, checkout / TESTS_DIR / CONFTEST):
        if path.is_file():
            try:
                hooks = outcome_hooks(path.read_text())
            except SyntaxError:
                hooks = []
            found.append({"file": str(path.relative_to(checkout)), "outcome_hooks": hooks})
    return found


def conftest_entry(checkout: Path, course: bool) -> dict:
    """The record's ``conftest``: each conftest of the checkout, the outcome-changing hooks it defines,
    whether it ran (its tests/conftest.py does with its copies, without those hooks; none does
    with a course clone, nor a root conftest) and the note that conftest code runs with the user's rights."""
    found = conftests(checkout)
    for entry in found:
        entry["ran"] = not course and entry["file"] == f"{TESTS_DIR}/{CONFTEST}"
        if entry["ran"] and entry["outcome_hooks"]:
            entry["hooks_removed"] = entry["outcome_hooks"]
    return {"files": found, "note": RIGHTS}


def prepare(checkout: Path, workdir: Path, files: list[str]) -> list[str]:
    """The checkout's tests/ copied into ``workdir`` (its conftest without :data:`OUTCOME_HOOKS`), with
    an empty pytest.ini; the copies of ``files`` there."""
    tests = workdir / TESTS_DIR
    shutil.copytree(checkout / TESTS_DIR, tests, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    (workdir / "pytest.ini").write_text("[pytest]\n")
    conftest = tests / CONFTEST
    if conftest.is_file():
        try:
            conftest.write_text(without_hooks(conftest.read_text()))
        except SyntaxError:
            pass  # pytest reports it as the error it is
    return [str(tests / f) for f in files if (tests / f).is_file()]


def differing_files(checkout: Path, clone: Path) -> dict:
    """The checkout's test files compared with the course clone's: those it lacks in the clone
    (``extra_files``) and those whose content differs (``modified_files``)."""
    extra, modified = [], []
    for path in sorted((checkout / TESTS_DIR).glob("test_*.py")):
        theirs = clone / TESTS_DIR / path.name
        if not theirs.is_file():
            extra.append(path.name)
        elif theirs.read_bytes() != path.read_bytes():
            modified.append(path.name)
    return {"extra_files": extra, "modified_files": modified}


def split_extra(tests: list[dict], known: set[str]) -> tuple[list[dict], list[dict]]:
    """The record's tests split into the handout's (names in ``known``, the edition's cases) and the
    student's extra tests."""
    return [t for t in tests if t["name"] in known], [t for t in tests if t["name"] not in known]


def extra_files(checkout: Path, known_files: set[str]) -> list[str]:
    """The checkout's test files the edition's registry does not name (not run: the student's own)."""
    return sorted(p.name for p in (checkout / TESTS_DIR).glob("test_*.py") if p.name not in known_files)
