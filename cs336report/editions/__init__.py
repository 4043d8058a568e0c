"""The registry of the handout's editions: one YAML file per year, read into frozen records.

An edition is data: its problems in handout order (id, number, title, points, section, the
sub-questions and the form each deliverable takes, the experiments whose records answer it), its
model table, the settings it fixes, the grid of cells it asks for, the adapters of its
``tests/adapters.py`` and its test cases per release of its code. Adding next year's edition is
adding ``<year>.yaml`` beside ``2025.yaml`` (shape: ``edition.schema.yaml``; docs/editions.md).
This package imports neither torch nor anything of the report, so the Snakefile can read it.

    from cs336report import editions
    editions.known()                              # (2025, 2026)
    e = editions.get(2026)
    e.problem("gradient_checkpointing").parts[1].form
    e.model("xl").d_model                         # 2560
    e.pieces["fsdp"].hooks                        # fsdp_on_after_backward, fsdp_gather_full_params
    e.test_suites("26.1.1")
    edition, release = editions.detect("../assignment2-systems")
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from .detect import DetectionError, detect_in, read_release
from .entries import (Adapter, Edition, Form, Model, Part, Piece, Problem, TestCase, TestFile, TestSuite,
                      release_key)
from .load import EditionError, load

__all__ = ["DEFAULT", "Adapter", "DetectionError", "Edition", "EditionError", "Form", "Model", "Part", "Piece", "Problem",
           "TestCase", "TestFile", "TestSuite", "detect", "get", "known", "load", "read_release", "release_key"]

FOLDER = Path(__file__).resolve().parent
# The edition of a run that names no student's checkout to tell it (config ``handout: auto``), and of
# a report's config from before the edition was a config key.
DEFAULT = 2025


def known() -> tuple[int, ...]:
    """The editions in the registry, oldest first."""
    return tuple(sorted(int(p.stem) for p in FOLDER.glob("*.yaml") if p.stem.isdigit()))


def get(edition: int | str) -> Edition:
    """The edition of year ``edition`` (2025, 2026), or KeyError naming the known ones."""
    year = int(edition)
    if year not in known():
        raise KeyError(f"no edition {edition!r} in the registry (known: {', '.join(map(str, known()))})")
    return _get(year)


@cache
def _get(year: int) -> Edition:
    loaded = load(FOLDER / f"{year}.yaml")
    if loaded.id != year:
        raise EditionError(f"{loaded.source}: id: says {loaded.id}, the file is named for {year}")
    return loaded


def detect(checkout: str | Path, expected: int | None = None) -> tuple[Edition, str | None]:
    """(edition, release) of a student's checkout: the edition from the adapters its
    tests/adapters.py defines, the release (``"26.1.1"``; None where unknown) from its CHANGELOG.md
    or pyproject.toml. Raises :class:`DetectionError`, naming the file, for a checkout that matches
    no edition, whose release belongs to another edition than its adapters, or (``expected``)
    whose edition is not the one the config names."""
    return detect_in(checkout, tuple(get(year) for year in known()), expected)
