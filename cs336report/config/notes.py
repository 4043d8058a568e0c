"""The student's own notes: a folder of Markdown files, each merged into the answer it names.

A note is ``<problem>.md`` (the whole problem) or ``<problem>-<sub>.md`` (one sub-question), the
problem named as the handout names it (``flash_forward.md``, ``memory_profiling-b.md``). The
config key ``notes`` names the folder; loading the config checks every file's name against the
edition's problems, so that a misspelt note stops the workflow before any cell runs, with the
file named. The report reads the notes as text (:func:`read_notes`): they are escaped where they
are rendered and marked as the student's.

    check_notes("notes", editions.get(2025))     # the notes' entry, or NotesError naming the file
    read_notes("notes", editions.get(2025))      # [Note(problem, sub, file, text), ...] in handout order
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from ..editions import Edition

KEY = "notes"
SUFFIX = ".md"


class NotesError(ValueError):
    """A notes folder or note that cannot be used; the message starts with the config key."""


@dataclass(frozen=True)
class Note:
    problem: str
    sub: str  # "" for the whole problem
    file: str  # the note's path as the config named its folder
    text: str


def note_name(problem: str, sub: str = "") -> str:
    """The file name of a note on ``problem`` (and its sub-question ``sub``)."""
    return f"{problem}-{sub}{SUFFIX}" if sub else f"{problem}{SUFFIX}"


def target(name: str, edition: Edition) -> tuple[str, str] | None:
    """(problem, sub-question) a note's file name names in ``edition``, or None where it names none."""
    stem = name[:-len(SUFFIX)] if name.endswith(SUFFIX) else None
    if not stem:
        return None
    if stem in edition.order:
        return stem, ""
    problem, _, sub = stem.rpartition("-")
    if problem in edition.order and sub and sub in edition.problem(problem).subquestions:
        return problem, sub
    return None


def _folder(folder: str | Path) -> Path:
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise NotesError(f"{KEY}: {str(folder)!r} is not a folder ({path.resolve()}); set it to the folder of your "
                         f"notes, one <problem>.md or <problem>-<sub>.md each")
    return path


def _unknown(file: Path, edition: Edition) -> str:
    stem = file.stem
    problem, _, sub = stem.rpartition("-")
    if problem in edition.order:
        subs = edition.problem(problem).subquestions
        has = f"its sub-questions are {', '.join(subs)}" if subs else "it has no sub-questions"
        return f"{KEY}: {file}: {problem} has no sub-question {sub!r} ({has})"
    near = difflib.get_close_matches(stem, edition.order, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}{SUFFIX}?" if near else f"the problems: {', '.join(edition.order)}"
    return (f"{KEY}: {file}: {stem!r} is no problem of the {edition.id} edition; a note is named <problem>.md or "
            f"<problem>-<sub>.md, the problem as the handout names it ({hint})")


def notes_files(folder: str | Path, edition: Edition) -> list[tuple[Path, str, str]]:
    """(file, problem, sub) of every note in ``folder``, in handout order; NotesError naming the first
    file whose name is no problem or sub-question of ``edition``. Other files than ``.md`` are left alone."""
    out = []
    for file in sorted(_folder(folder).glob(f"*{SUFFIX}")):
        found = target(file.name, edition)
        if found is None:
            raise NotesError(_unknown(file, edition))
        out.append((file, *found))
    order = {p: i for i, p in enumerate(edition.order)}
    return sorted(out, key=lambda t: (order[t[1]], t[2]))


def check_notes(folder: str | Path | None, edition: Edition) -> dict | None:
    """The ``notes`` entry of the resolved config (the folder and its notes' names), or None without a
    folder; NotesError naming the file or the folder that cannot be used."""
    if not folder:
        return None
    files = notes_files(folder, edition)
    for file, _, _ in files:
        try:
            file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise NotesError(f"{KEY}: {file}: cannot be read as UTF-8 text ({exc})") from None
    return {"folder": str(Path(folder).expanduser().resolve()), "files": [f.name for f, _, _ in files]}


def read_notes(folder: str | Path | None, edition: Edition) -> list[Note]:
    """Every note of ``folder`` with its text, in handout order (empty without a folder)."""
    if not folder:
        return []
    return [Note(problem, sub, str(file), file.read_text(encoding="utf-8").strip())
            for file, problem, sub in notes_files(folder, edition)]
