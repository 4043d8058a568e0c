"""Fixture checkouts for the tests: the base student checkout with one case laid over it.

The base is tests/fixtures/student_repo. A case (a folder of tests/fixtures/checkouts) holds only
what differs from it: modules of its own, a pyproject.toml, a conftest, and ``adapters_override.py``,
whose functions replace the base's adapters of the same name in ``tests/adapters.py`` (its other
top-level statements, and functions the base lacks, follow the base's code).

    repo = build(tmp_path, "plain_wrappers")          # tmp_path/student_repo
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STUDENT_REPO = FIXTURES / "student_repo"
CASES = FIXTURES / "checkouts"
OVERRIDE = "adapters_override.py"


def override(base: str, changes: str) -> str:
    """``base`` (a module's source) with each top-level function of ``changes`` in place of the
    base's function of that name; the rest of ``changes`` appended in its order."""
    lines = base.splitlines(keepends=True)
    tree = ast.parse(base).body
    functions = {node.name: node for node in tree if isinstance(node, ast.FunctionDef)}
    present = {ast.get_source_segment(base, node) for node in tree}
    replaced, appended = [], []
    body = ast.parse(changes).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # its docstring
    for node in body:
        text = ast.get_source_segment(changes, node, padded=False)
        if isinstance(node, ast.FunctionDef) and node.name in functions:
            old = functions[node.name]
            start = min([old.lineno, *(d.lineno for d in old.decorator_list)]) - 1
            decorators = "".join(f"@{ast.get_source_segment(changes, d)}\n" for d in node.decorator_list)
            replaced.append((start, old.end_lineno, decorators + text + "\n"))
        elif text not in present:  # an import the base has already stays once
            appended.append(text)
    for start, end, text in sorted(replaced, reverse=True):
        lines[start:end] = [text]
    tail = "".join(f"\n\n{text}\n" for text in appended)
    return "".join(lines) + tail


def build(tmp_path: Path, case: str | None = None) -> Path:
    """A copy of the base checkout at ``tmp_path/student_repo`` with the files of ``case`` laid over it."""
    dest = tmp_path / "student_repo"
    skip = shutil.ignore_patterns("__pycache__", OVERRIDE)
    shutil.copytree(STUDENT_REPO, dest, ignore=skip)
    if case:
        shutil.copytree(CASES / case, dest, dirs_exist_ok=True, ignore=skip)
        changes = CASES / case / OVERRIDE
        if changes.is_file():
            adapters = dest / "tests" / "adapters.py"
            adapters.write_text(override(adapters.read_text(), changes.read_text()))
    return dest


STUDENT_REPO_2026 = FIXTURES / "student_repo_2026"


def build_2026(dest: Path) -> Path:
    """A copy of the 2026 checkout at ``dest``, with the base checkout's ``cs336-basics/`` (the same
    model package serves both editions' fixtures)."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(STUDENT_REPO_2026, dest, ignore=skip)
    shutil.copytree(STUDENT_REPO / "cs336-basics", dest / "cs336-basics", ignore=skip)
    return dest
