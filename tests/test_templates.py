"""The templates read as prose a reviewer can follow: one sentence a line, no line too long.

Every template under templates/ is held to two rules, line by line:

- no line is over 200 characters once its ``{% ... %}`` and ``{# ... #}`` tags are taken out
  (expressions, ``{{ ... }}``, count: they stand for words of the sentence);
- no line holds two sentences of plain prose. The check is a heuristic: with the tags taken out and
  each expression written as ``X`` (it may start a sentence), a full stop followed by a space and a
  capital letter (or an expression) starts a second sentence, unless the word before the stop is an
  abbreviation of :data:`ABBREVIATIONS`; closing emphasis, quotes or brackets may stand between the
  stop and the space. String literals inside expressions are not read.


A paragraph macro (``fmt.p()``) and a list item (``fmt.li()``) join the lines of their body with
one space, so a sentence a line in the template is still one line of Markdown and one paragraph.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cs336report.report.render import TEMPLATES, environments

MAX_CHARS = 200
TAG = re.compile(r"\{[%#].*?[%#]\}")
EXPRESSION = re.compile(r"\{\{.*?\}\}")
# A sentence's end: a full stop (closing emphasis, quotes or brackets may follow it), then a space,
# then a capital letter or an expression (X).
SECOND_SENTENCE = re.compile(r"(\S*)\.[*_\"”')]* +[A-Z]")
ABBREVIATIONS = ("e.g", "i.e", "cf", "vs", "et al")


def template_files() -> list[Path]:
    return sorted(TEMPLATES.rglob("*.j2"))


def text_length(line: str) -> int:
    """Characters of a line outside its ``{% %}`` and ``{# #}`` tags."""
    return len(TAG.sub("", line))


def second_sentence(line: str) -> str | None:
    """The start of a second sentence of plain prose on the line, or None."""
    prose = EXPRESSION.sub("X", TAG.sub("", line))
    for match in SECOND_SENTENCE.finditer(prose):
        word = match.group(1)
        if not any(word.endswith(abbreviation) for abbreviation in ABBREVIATIONS):
            return prose[match.start():match.end() + 20]
    return None


def offending_lines(check) -> list[str]:
    found = []
    for path in template_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            what = check(line)
            if what:
                found.append(f"{path.relative_to(TEMPLATES)}:{number}: {what}")
    return found


def test_the_checks_find_what_they_look_for():
    assert text_length("{% if x %}" + "a" * 150 + "{# note #}") == 150
    assert text_length("{{ x }}" + "a" * 195) == 202
    assert second_sentence("It is fast. It is small.")
    assert second_sentence("It takes {{ t }}. {{ n }} cells vary more.")
    assert second_sentence("{% if a %}First.{% endif %} Then second.")
    assert second_sentence("*Not run: {{ why }}.* Run it with {{ command }}.")
    assert not second_sentence("It is fast, e.g. Triton's kernel at {{ x }}.")
    assert not second_sentence("A 2.7B model at context {{ c }}; {{ d }}. ")
    assert not second_sentence('{{ fmt.note("One. Two.") }}')
    assert template_files(), "no template found"


def test_no_template_line_is_over_200_characters_outside_tags():
    long = offending_lines(lambda line: text_length(line) > MAX_CHARS and f"{text_length(line)} characters")
    assert not long, "\n".join(long)


def test_no_template_line_holds_two_sentences():
    found = offending_lines(second_sentence)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("kind", ["md", "html"])
def test_a_paragraph_written_over_several_lines_is_one_line(kind):
    source = (
        '{% import fmt_lib as fmt %}\n'
        '{% macro maybe(x) %}\n{% if x %}\nThird {{ x }}.\n{% endif %}\n{% endmacro %}\n'
        '{% call fmt.p() %}\nFirst.\n  Second, {{ "a<b" }}.\n{{ maybe(0) }}\n{{ maybe(3) }}\n{% endcall %}\n'
        '{% call fmt.ul() %}\n{% call fmt.li() %}\nOne.\nTwo.\n{% endcall %}\n{% endcall %}\n'
    )
    lines = environments()[kind].from_string(source).render(fmt_lib=f"_{kind}.j2").splitlines()
    paragraph, item = {"md": ("{}", "- {}"), "html": ("<p>{}</p>", "<li>{}</li>")}[kind]
    assert paragraph.format("First. Second, a&lt;b. Third 3.") in lines
    assert item.format("One. Two.") in "\n".join(lines).replace("<ul>", "\n").splitlines()


# A path of this repository that a template names for the reader to open (the student's
# ``tests/adapters.py`` is their checkout's file, not ours).
REPO_PATH = re.compile(r"\b(?:cs336report|workflow|templates|docs)/[A-Za-z0-9_./-]+\.(?:py|smk|j2|yaml|md)\b")


def test_every_file_a_template_names_exists():
    root = TEMPLATES.parent
    named = {(path.relative_to(TEMPLATES).as_posix(), m.group(0))
             for path in TEMPLATES.rglob("*.j2") for m in REPO_PATH.finditer(path.read_text())}
    assert named, "no template names a file of the repository"
    missing = sorted((template, name) for template, name in named if not (root / name).exists())
    assert not missing, missing
