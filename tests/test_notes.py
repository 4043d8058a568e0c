"""The student's own notes (config ``notes``): checked with the config, merged into the answers
they name, escaped, marked as the student's; a placeholder where an implementation has none."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cs336report import editions
from cs336report.config import DEFAULT_CONFIG, Config, ConfigError
from cs336report.config.notes import NotesError, check_notes, read_notes, target
from cs336report.report import notes as report_notes
from cs336report.report.render import environments

EDITION = editions.get(2025)
STUDENT = Path(__file__).resolve().parent / "fixtures" / "student_repo"


def _load(tmp_path: Path, **keys) -> Config:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw.update(keys)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(keys))
    return Config.from_dict(raw, source=str(path), files=[str(path)], cuda_available=False)


@pytest.mark.parametrize("name, expected", [
    ("flash_forward.md", ("flash_forward", "")),
    ("flash_forward-c.md", ("flash_forward", "c")),
    ("memory_profiling-e.md", ("memory_profiling", "e")),
    ("flash_forward-d.md", None),        # flash_forward has (a) to (c)
    ("flash_backward-a.md", None),       # one deliverable, no sub-questions
    ("flash_fwd.md", None),
    ("flash_forward.txt", None),
])
def test_a_notes_name_is_a_problem_or_one_of_its_subquestions(name, expected):
    assert target(name, EDITION) == expected


def test_an_unknown_note_is_a_config_error_naming_the_file(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "flash_forward.md").write_text("Tiles of 16.")
    (folder / "flash_fwd.md").write_text("misspelt")
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, notes=str(folder))
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'mine.yaml'}: key 'notes': {folder / 'flash_fwd.md'}: ")
    assert "'flash_fwd' is no problem of the 2025 edition" in message
    assert "did you mean flash_forward.md?" in message
    (folder / "flash_fwd.md").rename(folder / "zzz.md")
    with pytest.raises(ConfigError, match=r"zzz.md: 'zzz' is no problem .*the problems: benchmarking_script, "):
        _load(tmp_path, notes=str(folder))


def test_an_unknown_subquestion_names_the_ones_there_are(tmp_path):
    (tmp_path / "flash_forward-d.md").write_text("x")
    with pytest.raises(NotesError, match=r"flash_forward-d.md: flash_forward has no sub-question 'd' "
                                         r"\(its sub-questions are a, b, c\)"):
        check_notes(tmp_path, EDITION)


def test_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"key 'notes': .*is not a folder"):
        _load(tmp_path, notes=str(tmp_path / "nowhere"))


def test_the_config_carries_the_checked_notes(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "memory_profiling-b.md").write_text("b")
    (folder / "flash_forward.md").write_text("f")
    (folder / "README.txt").write_text("not a note")
    cfg = _load(tmp_path, notes=str(folder))
    assert cfg.notes == {"folder": str(folder), "files": ["memory_profiling-b.md", "flash_forward.md"]}
    assert [(n.problem, n.sub, n.text) for n in read_notes(folder, EDITION)] == [
        ("memory_profiling", "b", "b"), ("flash_forward", "", "f")]
    assert _load(tmp_path).notes is None


NOTE = "Our tiles are **16 x 16**.\n\n<script>alert(1)</script> & a <b>bold</b> claim\n# not a heading of the report"


def _sections(*ids):
    return [{"id": i} for i in ids]


def _render(kind: str, section: dict) -> str:
    env = environments()[kind]
    return env.from_string('{% import fmt_lib as fmt %}{{ fmt.student_notes(s) }}').render(
        fmt_lib=f"_{kind}.j2", s=section)


def test_a_note_is_merged_into_its_answer_escaped_and_marked(tmp_path):
    (tmp_path / "flash_forward-b.md").write_text(NOTE)
    (tmp_path / "memory_profiling.md").write_text("Peaks were read at context 512.")
    sections = _sections("flash_forward", "memory_profiling", "nsys_profile")
    report_notes.attach(sections, {"notes": str(tmp_path)})
    flash, memory, nsys = sections
    assert [n["sub"] for n in flash["notes"]] == ["b"] and memory["notes"][0]["sub"] == ""
    assert nsys["notes"] == [] and nsys["note_placeholder"] is None

    html = _render("html", flash)
    assert "Student's note on (b)" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; a &lt;b&gt;bold&lt;/b&gt;" in html and "<script>" not in html
    assert "**16 x 16**" in html  # its Markdown kept as text

    md = _render("md", flash)
    assert "**Student's note on (b)** (`" + str(tmp_path / "flash_forward-b.md") + "`):" in md
    assert "> Our tiles are **16 x 16**." in md  # Markdown kept, quoted as the student's
    assert "> &lt;script&gt;alert(1)&lt;/script&gt; &amp; a &lt;b&gt;bold&lt;/b&gt; claim" in md
    assert "> # not a heading of the report" in md and "\n# not" not in md
    assert "**Student's note** (" in _render("md", memory)


def test_an_implementation_without_a_note_shows_where_to_write_it(tmp_path):
    (tmp_path / "naive_ddp.md").write_text("All-reduce after backward.")
    sections = _sections("flash_forward", "naive_ddp", "memory_profiling")
    config = {"notes": str(tmp_path), "student": {"checkout": str(STUDENT)}}
    report_notes.attach(sections, config)
    flash, naive, memory = sections
    assert flash["note_placeholder"]["file"] == str(tmp_path / "flash_forward.md")
    assert naive["note_placeholder"] is None  # it has its note
    assert memory["note_placeholder"] is None  # not an implementation problem
    md = _render("md", flash)
    assert "*Student's note: not written yet.*" in md and f"`{tmp_path / 'flash_forward.md'}`" in md
    assert "not written yet" in _render("html", flash)

    # without a notes folder the placeholder names the key to set; without a checkout there is none
    sections = _sections("optimizer_state_sharding")
    report_notes.attach(sections, {"student": {"checkout": str(STUDENT)}})
    assert "set the config key `notes` to a folder of notes and write it there in `optimizer_state_sharding.md`" \
        in _render("md", sections[0])
    sections = _sections("optimizer_state_sharding")
    report_notes.attach(sections, {})
    assert sections[0]["note_placeholder"] is None and _render("md", sections[0]).strip() == ""


def test_the_whole_report_carries_the_note_in_its_answer(tmp_path):
    from cs336report.report.render import render_report

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mixed_precision_accumulation.md").write_text("I <expected> fp16 to drift.")
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config.update(notes=str(notes), _device="cpu", _grid="cpu")
    render_report([], config, tmp_path / "out", draw=False)
    answers = (tmp_path / "out" / "answers.md").read_text()
    start = answers.index("mixed_precision_accumulation")
    assert "**Student's note** (" in answers[start:] and "> I &lt;expected&gt; fp16 to drift." in answers
    assert "I &lt;expected&gt; fp16 to drift." in (tmp_path / "out" / "index.html").read_text()
