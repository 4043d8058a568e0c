"""The handout's own tests from a course clone (config ``course.checkout``), on a synthetic clone.

``tests/fixtures/course_clone`` has the layout of the course's repository (tests/ with the
handout's adapter names, a conftest, test files; a changelog with a release heading) and is our
own writing: the course's code is never needed here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from cs336report.config import DEFAULT_CONFIG, Config, ConfigError
from cs336report.config.course import course_entry
from cs336report.experiments import handout_tests
from cs336report.experiments.handout_tests import suite as handout_tests_suite
from cs336report.run.runner import run_cell

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CLONE = FIXTURES / "course_clone"


def _config(tmp_path: Path, **keys) -> tuple[dict, Path]:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw.update(keys)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(keys))
    return raw, path


def _cells(tmp_path: Path, clone: Path = CLONE, student: Path | None = None) -> dict:
    raw, _ = _config(tmp_path, course={"checkout": str(clone)},
                     **({"student": {"checkout": str(student)}} if student else {}))
    cfg = Config.from_dict(raw, cuda_available=False)
    cells = handout_tests.cells(cfg)
    for name, cell in cells.items():
        cell["junitxml"] = str(tmp_path / f"{name}.xml")
        if student:  # the check_student rule's verdicts, as the cells carry them after it
            cell["student"] = {**cell["student"], "adapters": {}}
    return cells


def test_the_clone_is_resolved_with_its_edition_and_release():
    entry = course_entry({"checkout": str(CLONE)}, 2025)
    assert (entry["edition"], entry["release"], entry["tests_release"]) == (2025, "1.0.5", "1.0.5")
    assert entry["label"] == "the handout's tests (course release 1.0.5)"
    assert course_entry(None, 2025) is None and course_entry({"checkout": None}, 2025) is None


def test_the_clones_tests_hash_follows_its_files(tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(CLONE, clone)
    before = course_entry({"checkout": str(clone)}, 2025)["sha256_16"]
    (clone / "tests" / "test_attention.py").write_text("# changed\n")
    assert course_entry({"checkout": str(clone)}, 2025)["sha256_16"] != before


def test_a_clone_of_another_edition_is_an_error_naming_the_file_and_the_key(tmp_path):
    raw, path = _config(tmp_path, course={"checkout": str(FIXTURES / "course_repo_2026")})
    with pytest.raises(ConfigError) as err:
        Config.from_dict(raw, source=str(path), files=[str(path)], cuda_available=False)
    message = str(err.value)
    assert message.startswith(f"{path}: key 'course.checkout': ")
    assert "course_repo_2026/CHANGELOG.md says 26." in message and "the 2026 edition" in message
    assert "2025 edition" in message


def test_a_changelog_of_another_edition_than_its_adapters_is_an_error(tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(CLONE, clone)
    (clone / "CHANGELOG.md").write_text("# Changelog\n\n## [26.1.1] - later\n")
    raw, path = _config(tmp_path, course={"checkout": str(clone)})
    with pytest.raises(ConfigError, match=r"key 'course.checkout': .*CHANGELOG.md says 26.1.1"):
        Config.from_dict(raw, source=str(path), files=[str(path)], cuda_available=False)


def test_a_folder_without_tests_is_an_error(tmp_path):
    raw, path = _config(tmp_path, course={"checkout": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"key 'course.checkout': .*has no tests/ folder"):
        Config.from_dict(raw, source=str(path), files=[str(path)], cuda_available=False)


def test_without_a_clone_the_cells_are_as_before(tmp_path):
    raw, _ = _config(tmp_path)
    cfg = Config.from_dict(raw, cuda_available=False)
    assert cfg.course is None
    assert all("course" not in cell for cell in handout_tests.cells(cfg).values())


def test_the_clones_tests_run_on_our_adapters_isolated(tmp_path, monkeypatch):
    marker = tmp_path / "conftest-ran"
    monkeypatch.setenv("FIXTURE_CONFTEST_MARKER", str(marker))
    cells = _cells(tmp_path)
    record = run_cell("handout_tests", "attention", cells["attention"], tmp_path / "attention.json")
    data = record["data"]
    assert record["status"] == "ok" and data["implementation"] == "built-in"
    assert data["tests_source"]["kind"] == "course"
    assert data["tests_source"]["label"] == "the handout's tests (course release 1.0.5)"
    tests = {t["name"]: t for t in data["tests"]}
    # JUnit's outcomes, each test graded as the registry says for release 1.0.5
    assert tests["test_flash_forward_pass_pytorch"]["outcome"] == "passed"
    assert tests["test_flash_backward_pytorch"]["outcome"] == "passed"
    assert (tests["test_flash_forward_pass_pytorch"]["problem"], tests["test_flash_forward_pass_pytorch"]["subquestion"]
            ) == ("flash_forward", "a")
    assert tests["test_flash_backward_pytorch"]["problem"] == "flash_backward"
    for causal, sub in (("False", "b"), ("True", "c")):
        case = tests[f"test_flash_forward_pass_triton[{causal}]"]
        assert case["outcome"] == "skipped" and (case["problem"], case["subquestion"]) == ("flash_forward", sub)
    # the course's conftest ran, in a temporary folder outside any checkout, which is gone afterwards
    workdir = Path(marker.read_text())
    assert workdir.name.startswith("cs336report-handout-tests-") and not workdir.exists()
    assert (CLONE / "tests" / "adapters.py").read_text().count("raise NotImplementedError") == 8


def test_the_clones_tests_run_on_the_students_adapters(tmp_path):
    cells = _cells(tmp_path, student=FIXTURES / "student_repo")
    record = run_cell("handout_tests", "attention", cells["attention"], tmp_path / "attention.json")
    data = record["data"]
    assert data["implementation"] == "student_repo" and data["tests_source"]["kind"] == "course"
    outcomes = {t["name"]: t["outcome"] for t in data["tests"]}
    assert outcomes["test_flash_forward_pass_pytorch"] == outcomes["test_flash_backward_pytorch"] == "passed"
    # the student's own test copies did not run: only the clone's four tests are in the record
    assert set(outcomes) == {"test_flash_forward_pass_pytorch", "test_flash_backward_pytorch",
                             "test_flash_forward_pass_triton[False]", "test_flash_forward_pass_triton[True]"}


def test_a_wrong_student_result_fails_the_clones_test(tmp_path):
    repo = tmp_path / "student_repo"
    shutil.copytree(FIXTURES / "student_repo", repo, ignore=shutil.ignore_patterns("__pycache__"))
    flash = repo / "cs336_systems" / "flash.py"
    flash.write_text(flash.read_text().replace("scale = 1 / math.sqrt(d)", "scale = 1.5 / math.sqrt(d)"))
    cells = _cells(tmp_path, student=repo)
    record = run_cell("handout_tests", "attention", cells["attention"], tmp_path / "attention.json")
    forward = next(t for t in record["data"]["tests"] if t["name"] == "test_flash_forward_pass_pytorch")
    assert forward["outcome"] == "failed" and "not close" in forward["message"]


def test_the_record_without_a_clone_names_the_fallback(tmp_path):
    cell = {"suite": "attention", "device": "cpu", "student": None}
    assert handout_tests_suite.tests_source(cell)["kind"] == "own_suite"
    student = {"checkout": "/x/assignment2", "name": "assignment2"}
    source = handout_tests_suite.tests_source({**cell, "student": student})
    assert source == {"kind": "student_copies", "label": "the student's own copies of the handout's tests",
                      "checkout": "/x/assignment2"}


def _record(kind: str | None, checkout: str | None) -> dict:
    tests = [{"name": "test_flash_backward_pytorch", "problem": "flash_backward", "subquestion": "",
              "outcome": "passed", "seconds": 0.2, "message": "", "max_abs_error": 1e-6}]
    data = {"tests": tests, "checkout": checkout, "implementation": "built-in" if not checkout else "mine"}
    if kind == "course":
        data["tests_source"] = {"kind": "course", "label": "the handout's tests (course release 1.0.5)"}
    return {"experiment": "handout_tests", "cell": "attention", "status": "ok", "config": {}, "data": data,
            "_path": "results/handout_tests/attention.json"}


@pytest.mark.parametrize("kind, checkout, says, title", [
    ("course", None, "by the handout's tests (course release 1.0.5), run from the course's repository through "
                     "cs336report's adapters", "Tests of flash_backward: the handout's tests (course release 1.0.5)"),
    ("course", "/x/mine", "by the handout's tests (course release 1.0.5), run from the course's repository through "
                          "the checkout's `tests/adapters.py`",
     "Tests of flash_backward: the handout's tests (course release 1.0.5)"),
    (None, "/x/mine", "by the student's own copies of the handout's tests",
     "Tests of flash_backward: the student's own copies of the handout's tests"),
    (None, None, "by cs336report's own versions of the handout's tests", "Tests of flash_backward, cs336report's own suite"),
])
def test_the_answer_and_its_table_cite_whose_tests_ran(kind, checkout, says, title):
    from cs336report import editions
    from cs336report.report.render import environments
    from cs336report.report.sections import handout_tests as shared

    class Ctx:  # the records and the edition the shared builder reads
        edition = editions.get(2025)

        def records(self, experiment):
            return [_record(kind, checkout)]

    part = shared.build(Ctx(), editions.get(2025).problem("flash_backward"))
    section = {"id": "flash_backward", "title": "flash_backward", "command": "c"}
    env = environments()["md"]
    answer = env.get_template("answers/handout_tests.j2").render(fmt_lib="_md.j2", d=part, section=section)
    assert says in answer
    assert part["table"].title == title
    evidence = env.get_template("sections/handout_tests.j2").render(fmt_lib="_md.j2", d=part, section=section)
    if kind == "course":
        assert "Every test of flash_backward in the handout's tests (course release 1.0.5)" in evidence
