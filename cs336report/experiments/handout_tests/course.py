"""The handout's own tests, from the course's clone (config ``course.checkout``), run in isolation.

The clone's ``tests/`` folder is copied, as the course wrote it (its conftest, its data files),
into a temporary folder outside the student's checkout, and its ``adapters.py`` is replaced by the
adapters of the code under test: a two-line module re-exporting cs336report's adapters
(:mod:`cs336report.student.adapters`) for ours, or a copy of the student's ``tests/adapters.py``
for theirs (ours import the model the tests build, ``cs336_basics``, from the clone's
cs336-basics/ folder). pytest then runs there (cwd, rootdir and confcutdir that folder, an empty pytest.ini
of its own), so that neither the student's conftest nor their edited test copies decide the
verdict. The course's conftest runs with the rights of the user running the report.

Which files make a suite, and which problem and sub-question each test grades, come from the
edition registry (:meth:`cs336report.editions.Edition.test_suites`) at the clone's release.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ... import editions
from ...config.checkout import basics_folder

TESTS_DIR = "tests"
ADAPTERS = "adapters.py"
# The adapters module the clone's tests import (``from .adapters import ...``) when ours are tested.
OUR_ADAPTERS = ('"""Written by cs336report for this run: the handout\'s adapters, returning cs336report\'s '
                'implementations."""\n\nfrom cs336report.student.adapters import *  # noqa: F401,F403\n')


def suite(cell: dict) -> editions.TestSuite:
    """The registry's description of the cell's suite at the clone's release."""
    course = cell["course"]
    return editions.get(course["edition"]).suite(cell["suite"], course["tests_release"])


def cases(cell: dict) -> dict[str, tuple[str, str, str | None]]:
    """(problem, sub-question, piece) of each test of the suite, by its JUnit name."""
    return {c.name: (c.problem, c.subquestion, c.piece) for c in suite(cell).cases}


def prepare(cell: dict, workdir: Path) -> list[str]:
    """The clone's tests/ copied into ``workdir`` with the tested adapters in place; the suite's test
    files there (FileNotFoundError naming the clone where it has none of them)."""
    clone = Path(cell["course"]["checkout"])
    tests = workdir / TESTS_DIR
    shutil.copytree(clone / TESTS_DIR, tests, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    student = cell.get("student")
    if student:
        shutil.copyfile(Path(student["checkout"]) / TESTS_DIR / ADAPTERS, tests / ADAPTERS)
    else:
        (tests / ADAPTERS).write_text(OUR_ADAPTERS)
    (workdir / "pytest.ini").write_text("[pytest]\n")
    wanted = [f.file for f in suite(cell).files]
    files = [str(tests / f) for f in wanted if (tests / f).is_file()]
    if not files:
        raise FileNotFoundError(f"{clone / TESTS_DIR} has none of {', '.join(wanted)}, the handout's tests of "
                                f"suite {cell['suite']} at release {cell['course']['tests_release']}")
    return files


def model_paths(cell: dict) -> list[str]:
    """Where ours are tested: the clone's own cs336-basics/ folder, whose ``cs336_basics`` the 2026 tests
    build their models from (as the course's own test run resolves it); none where the clone has none."""
    found = basics_folder(cell["course"]["checkout"])
    return [str(found)] if found is not None and found != Path(cell["course"]["checkout"]).resolve() else []


def pytest_options(workdir: Path) -> list[str]:
    """pytest's options that keep the run inside ``workdir``."""
    return ["--rootdir", str(workdir), "-c", str(workdir / "pytest.ini"), "--confcutdir", str(workdir)]
