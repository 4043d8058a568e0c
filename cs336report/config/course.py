"""The course's own repository (a local clone of the assignment as the course publishes it) as the
config names it, resolved without importing or running it.

With ``course.checkout`` the handout_tests experiment runs the clone's ``tests/`` (the handout's
tests as the course wrote them) against ours and against a student's code; without it, the
fallbacks run (cs336report's re-written suite, or the student's own copies). Resolving tells the
clone's edition and release from its files (:func:`cs336report.editions.detect`) and hashes its
``tests/`` folder, which the handout_tests cells carry, so that checking out another release
reruns them. A clone of another edition than the config's is an error naming the key.

    course_entry({"checkout": "/tmp/assignment2-systems"}, 2025)
    # {"checkout": ..., "edition": 2025, "release": "1.0.5", "tests_release": "1.0.5", "sha256_16": ...}
"""

from __future__ import annotations

from pathlib import Path

from .. import editions
from .checkout import files_hash

KEY = "course.checkout"
TESTS_DIR = "tests"


class CourseError(ValueError):
    """A course clone that cannot be used; the message starts with the config key."""


def tests_hash(root: Path) -> str | None:
    """A hash over every file of the clone's tests/ folder (its data files included) and its changelog."""
    files = [(f.relative_to(root).as_posix(), f) for f in sorted((root / TESTS_DIR).rglob("*"))
             if f.is_file() and "__pycache__" not in f.parts]
    changelog = root / "CHANGELOG.md"
    return files_hash(files + ([("CHANGELOG.md", changelog)] if changelog.is_file() else []))


def label(release: str | None) -> str:
    """How the record and the report name the clone's tests."""
    return f"the handout's tests (course release {release or 'not stated'})"


def course_entry(course_config: dict | None, edition_id: int) -> dict | None:
    """The ``course`` entry the handout_tests cells carry, or None without a clone; CourseError
    where the folder is missing, is no checkout of the assignment, or is of an edition other than
    ``edition_id`` (the one the report answers)."""
    checkout = (course_config or {}).get("checkout")
    if not checkout:
        return None
    root = Path(checkout).expanduser().resolve()
    if not (root / TESTS_DIR).is_dir():
        raise CourseError(f"{KEY}: {checkout!r} ({root}) has no tests/ folder; set it to a clone of the course's "
                          f"assignment2-systems repository, checked out at the edition's release")
    try:
        edition, release = editions.detect(root)
    except editions.DetectionError as exc:
        raise CourseError(f"{KEY}: {exc}") from None
    if edition.id != edition_id:
        where = f"{root / 'CHANGELOG.md'} says {release}" if release else f"{root / 'tests' / 'adapters.py'}"
        raise CourseError(f"{KEY}: {where}: the clone is of the {edition.id} edition, but this config reports on "
                          f"the {edition_id} edition; check out a {edition_id} release in the clone "
                          f"(its releases: {editions.get(edition_id).version_line}.x)")
    return {"checkout": str(root), "name": root.name, "edition": edition.id, "release": release,
            "tests_release": edition.tests_release(release), "label": label(release), "sha256_16": tests_hash(root)}
