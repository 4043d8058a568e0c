"""The student's own notes in the answers: each section's notes, and the placeholder where an
implementation problem of a student's checkout has none.

The notes are read from the folder the config's ``notes`` key names (:mod:`cs336report.config.notes`,
which also checked their names when the config was loaded). A note is text: the templates escape it
(HTML) or keep its Markdown as Markdown text with no raw HTML, and mark it as the student's. For a
problem answered only by the handout's tests (the implementations), the design lines are the
student's to write: with ``student.checkout`` and no note on such a problem, the answer shows a
placeholder naming the file to write.

    attach(sections, config)       # each section gets "notes" and "note_placeholder"
"""

from __future__ import annotations

from pathlib import Path

from .. import editions
from ..config import edition_id
from ..config.notes import KEY, note_name, read_notes


def placeholder(problem: str, folder: str | None) -> dict:
    """Where the note on ``problem`` goes: the file in the configured folder, or the key to set first."""
    file = note_name(problem)
    return {"file": str(Path(folder) / file) if folder else file, "key": KEY, "folder_set": bool(folder)}


def attach(sections: list[dict], config: dict, edition: editions.Edition | None = None) -> None:
    """Each section's notes (``notes``: problem, sub, file, text; the problem's own first, then by
    sub-question) and, for an implementation problem of a student's checkout without a note, its
    ``note_placeholder`` (else None). ``edition``: the one the report answers (default: the config's)."""
    edition = edition or editions.get(edition_id(config))
    folder = config.get("notes")
    notes = read_notes(folder, edition)
    checkout = (config.get("student") or {}).get("checkout")
    for s in sections:
        own = [vars(n) for n in notes if n.problem == s["id"]]
        s["notes"] = own
        implementation = s["id"] in edition.order and edition.problem(s["id"]).answered_by_tests
        s["note_placeholder"] = placeholder(s["id"], folder) if checkout and implementation and not own else None
