"""The edition registry wired in: the config's ``handout`` key resolves to an edition (from a named
checkout's adapters, or the year given, a contradiction an error naming the file and the keys), the
resolved edition reaches the renderer, which lays out that edition's problems, and no module of the
package states a problem's title, points or order beside the registry."""

import ast
import re
import shutil
from pathlib import Path

import pytest
import yaml

from cs336report import editions
from cs336report.config import DEFAULT_CONFIG, Config, ConfigError, load_files
from cs336report.report.render import render_report

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "cs336report"
FIXTURES = REPO / "tests" / "fixtures"
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())


def _checkout(tmp_path: Path, source: str) -> Path:
    """A copy of a fixture checkout, with the cs336-basics package folder the model resolution looks for."""
    dest = tmp_path / source
    shutil.copytree(FIXTURES / source, dest, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "cs336-basics" / "cs336_basics").mkdir(parents=True, exist_ok=True)
    return dest


def _config(tmp_path: Path, text: str) -> tuple[Config | None, Path]:
    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    files = [str(DEFAULT_CONFIG), str(mine)]
    return Config.from_dict(load_files(files), cuda_available=False, files=files), mine


# --------------------------------------------------------------------------- the config key


def test_the_schema_offers_auto_and_every_edition_of_the_registry():
    key = SCHEMA["properties"]["handout"]
    assert key["enum"] == ["auto", *editions.known()] and key["default"] == "auto"


def test_without_a_checkout_auto_is_the_default_edition_and_a_year_is_taken_as_given(tmp_path):
    assert _config(tmp_path, "grid: cpu\n")[0].edition == editions.DEFAULT == 2025
    assert _config(tmp_path, "handout: 2026\n")[0].edition == 2026
    with pytest.raises(ConfigError, match="mine.yaml: key 'handout'"):
        _config(tmp_path, "handout: 2024\n")


@pytest.mark.parametrize("source, year", [("student_repo", 2025), ("course_repo_2026", 2026)])
def test_auto_takes_the_edition_the_checkouts_adapters_tell(tmp_path, source, year):
    checkout = _checkout(tmp_path, source)
    cfg, _ = _config(tmp_path, f"student: {{checkout: {checkout}}}\n")
    assert cfg.edition == year
    assert _config(tmp_path, f"handout: {year}\nstudent: {{checkout: {checkout}}}\n")[0].edition == year


def test_a_year_the_checkout_contradicts_names_the_file_and_both_keys(tmp_path):
    checkout = _checkout(tmp_path, "course_repo_2026")
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, f"handout: 2025\nstudent: {{checkout: {checkout}}}\n")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'mine.yaml'}: key 'handout': 2025")
    assert "'student.checkout'" in message and str(checkout) in message and "2026 edition" in message


def test_the_checkout_set_in_another_file_than_the_year_is_named_too(tmp_path):
    checkout = _checkout(tmp_path, "course_repo_2026")
    theirs = tmp_path / "checkout.yaml"
    theirs.write_text(f"student: {{checkout: {checkout}}}\n")
    year = tmp_path / "year.yaml"
    year.write_text("handout: 2025\n")
    files = [str(DEFAULT_CONFIG), str(theirs), str(year)]
    with pytest.raises(ConfigError) as err:
        Config.from_dict(load_files(files), cuda_available=False, files=files)
    assert str(err.value).startswith(f"{year}: key 'handout'") and f"(set in {theirs})" in str(err.value)


def test_a_checkout_of_no_known_edition_is_an_error_naming_the_key(tmp_path):
    checkout = _checkout(tmp_path, "student_repo")
    (checkout / "tests" / "adapters.py").write_text("def get_something_else():\n    raise NotImplementedError\n")
    with pytest.raises(ConfigError, match=r"mine.yaml: key 'student.checkout': .*adapters.py"):
        _config(tmp_path, f"student: {{checkout: {checkout}}}\n")


# --------------------------------------------------------------------------- the renderer


def _answers(tmp_path: Path, config: dict) -> str:
    render_report([], {"_device": "cpu", "_expected": {}, **config}, tmp_path / "out", draw=False)
    return (tmp_path / "out" / "answers.md").read_text()


@pytest.mark.parametrize("year", editions.known())
def test_the_report_lays_out_the_edition_its_config_resolved(tmp_path, year):
    edition = editions.get(year)
    md = _answers(tmp_path, {"_handout": year})
    headings = [line for line in md.splitlines() if line.startswith("## ") and line[3].isdigit()]
    assert headings == [f"## {p.number}. {p.id.replace('_', chr(92) + '_')} ({p.points} pt{'s' if p.points != 1 else ''})"
                        for p in edition.problems]
    for p in edition.problems:  # every sub-question heading, the registry's letters
        for letter in p.subquestions:
            assert f'<a id="{p.id}-{letter}"></a>' in md, (p.id, letter)


def test_a_config_without_the_resolved_edition_is_the_default_one(tmp_path):
    assert _answers(tmp_path / "a", {}) == _answers(tmp_path / "b", {"_handout": editions.DEFAULT}).replace(
        str(tmp_path / "b"), str(tmp_path / "a"))


def test_every_2026_problem_has_a_builder(tmp_path):
    """No 2026 problem is left to "does not answer it yet": each has its section, or the shared one."""
    md = _answers(tmp_path, {"_handout": 2026})
    assert "does not answer it yet" not in md


# --------------------------------------------------------------------------- one place for the facts


def _package_modules():
    return [p for p in PACKAGE.rglob("*.py") if "editions" not in p.relative_to(PACKAGE).parts]


def _literals(tree: ast.AST):
    """Every literal tuple, list, set or dict of a module and every call's arguments: (whether it is a
    sequence, its elements in order)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List)):
            yield True, node.elts
        elif isinstance(node, ast.Set):
            yield False, node.elts
        elif isinstance(node, ast.Dict):
            yield False, [x for pair in zip(node.keys, node.values) for x in pair if x is not None]
        elif isinstance(node, ast.Call):
            yield True, node.args


def offences(source: str, where: str) -> list[str]:
    """What a module states that only the registry may: a section constant (ID, TITLE, POINTS,
    SUBQUESTIONS), a problem's name beside its points, a title the handout prints beside the name,
    or a sequence that lists five problems or more in an edition's order (a table keyed by problem,
    a dict, states no order)."""
    problems = {p.id for year in editions.known() for p in editions.get(year).problems}
    points = {(p.id, p.points) for year in editions.known() for p in editions.get(year).problems}
    titles = {p.title for year in editions.known() for p in editions.get(year).problems if p.title != p.id}
    orders = [editions.get(year).order for year in editions.known()]
    tree = ast.parse(source, where)
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            found += [f"{where}: {n} =" for n in names if n in ("ID", "TITLE", "POINTS", "SUBQUESTIONS")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in titles:
            found.append(f"{where}:{node.lineno}: the title {node.value!r}")
    for sequence, elements in _literals(tree):
        values = [e.value if isinstance(e, ast.Constant) else None for e in elements]
        found += [f"{where}: {a!r} beside its points {b}" for a, b in zip(values, values[1:]) if (a, b) in points]
        named = [v for v in values if isinstance(v, str) and v in problems]
        if sequence and any(len(named) >= 5 and all(v in order for v in named)
                            and named == sorted(named, key=order.index) for order in orders):
            found.append(f"{where}:{elements[0].lineno}: {len(named)} problems in the handout's order")
    return found


def test_no_module_of_the_package_states_a_problems_title_points_or_order():
    """The registry (cs336report/editions) is the one place that states them."""
    found = [o for path in _package_modules() for o in offences(path.read_text(), str(path.relative_to(REPO)))]
    assert found == []


def test_the_check_finds_what_the_package_stated_before_the_registry():
    """The check above can fail: 2025's problems as a section module and names/handout.py stated them."""
    section = 'ID = "flash_forward"\nTITLE = "flash_forward"\nPOINTS = 15\nSUBQUESTIONS = ("a", "b", "c")\n'
    assert offences(section, "section.py") == [f"section.py: {n} =" for n in ("ID", "TITLE", "POINTS", "SUBQUESTIONS")]
    table = ('HANDOUT = (\n    _problem(1, "benchmarking_script", 4, "abc"),\n    _problem(2, "nsys_profile", 5, "abcde"),\n'
             '    _problem(3, "mixed_precision_accumulation", 1),\n    _problem(4, "benchmarking_mixed_precision", 2, "abc"),\n'
             '    _problem(5, "memory_profiling", 4, "abcde"),\n)\n'
             'ORDER = tuple(p.id for p in HANDOUT)\n')
    found = offences(table, "handout.py")
    assert "handout.py: 'benchmarking_script' beside its points 4" in found and len(found) == 5
    listed = 'ORDER = ("benchmarking_script", "nsys_profile", "mixed_precision_accumulation", ' \
             '"benchmarking_mixed_precision", "memory_profiling")\n'
    assert offences(listed, "order.py") == ["order.py:1: 5 problems in the handout's order"]
    assert offences('TITLES = {"nsys_profile": "Nsight Systems Profiling"}\n', "t.py") == [
        "t.py:1: the title 'Nsight Systems Profiling'"]


def test_no_template_states_a_sub_questions_heading():
    """A sub-question's heading comes from the registry (the section's ``headings``): a template names
    only its letter."""
    stated = [f"{path.relative_to(REPO)}:{n}" for path in sorted((REPO / "templates").rglob("*.j2"))
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if re.search(r'fmt\.sub\(section, "[a-z]", "', line)]
    assert stated == []
    assert re.search(r'fmt\.sub\(section, "[a-z]", "', '{{ fmt.sub(section, "a", "Timings") }}')
