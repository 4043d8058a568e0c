"""A 2026 student checkout through the 2026 adapters: handout_tests' verdicts equal those of the
checkout's own tests run directly with pytest; the release comes from its changelog, and the record
says which release's tests ran. The checkout (tests/fixtures/student_repo_2026) is our own writing."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from checkout_fixtures import build_2026

from cs336report import editions
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments import handout_tests
from cs336report.experiments.handout_tests import suite as handout_tests_suite
from cs336report.run.runner import run_cell
from cs336report.student.check import check_checkout

SUITES = ("attention", "ddp", "fsdp", "sharded_optimizer")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return build_2026(tmp_path_factory.mktemp("student") / "student_repo_2026")


@pytest.fixture(scope="module")
def records(checkout, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("records")
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw.update(handout="auto", student={"checkout": str(checkout)})
    cfg = Config.from_dict(raw, cuda_available=False)
    assert cfg.edition == 2026
    cells = handout_tests.cells(cfg)
    assert tuple(cells) == SUITES and {c["edition"] for c in cells.values()} == {2026}
    student = check_checkout({"checkout": str(checkout)})
    return {name: run_cell("handout_tests", name, {**cell, "student": student, "junitxml": str(out / f"{name}.xml")},
                           out / f"{name}.json") for name, cell in cells.items()}


def _direct_outcomes(checkout: Path, tmp_path: Path) -> dict[str, str]:
    """Each test's outcome when the checkout's tests run with pytest in the checkout, a failure raised
    by NotImplementedError read as not implemented."""
    xml = tmp_path / "direct.xml"
    subprocess.run([sys.executable, "-m", "pytest", "tests", f"--junitxml={xml}", "-q", "-p", "no:cacheprovider"],
                   cwd=checkout, capture_output=True, text=True, timeout=600)
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                text = f"{found.get('message', '')} {found.text or ''}"
                outcome = "not_implemented" if tag != "skipped" and "NotImplementedError" in text else \
                    {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                break
        outcomes[case.get("name")] = outcome
    return outcomes


def test_verdicts_equal_the_checkouts_own_pytest_run(records, checkout, tmp_path):
    recorded = {t["name"]: t["outcome"] for r in records.values() for t in r["data"]["tests"]}
    assert recorded == _direct_outcomes(checkout, tmp_path)
    # the fixture has each kind: a pass, a wrong backward, an adapter raising NotImplementedError
    assert recorded["test_flash_forward_pass_pytorch"] == "passed"
    assert recorded["test_flash_backward_pytorch"] == "failed"
    assert recorded["test_sharded_optimizer[ToyModel]"] == "not_implemented"


def test_a_suite_of_adapters_raising_not_implemented_is_not_implemented(records):
    record = records["sharded_optimizer"]
    assert record["status"] == "not_implemented" and "get_sharded_optimizer" in record["error"]
    assert record["data"]["tests"][0]["message"] == "get_sharded_optimizer raises NotImplementedError"


def test_tests_are_graded_by_the_2026_registry(records):
    tests = {t["name"]: t for r in records.values() for t in r["data"]["tests"]}
    assert tests["test_DistributedDataParallel[ToyModel]"]["problem"] == "ddp_overlap_individual_parameters"
    assert {tests[f"test_fsdp_correctness[{d}]"]["problem"] for d in ("fp32", "fp16")} == {"fsdp"}
    assert records["ddp"]["status"] == records["fsdp"]["status"] == "ok"


def test_the_record_says_which_releases_tests_ran(records):
    source = records["fsdp"]["data"]["tests_source"]
    assert source["kind"] == "student_copies" and source["edition"] == 2026
    assert (source["release"], source["tests_release"]) == ("26.1.1", "26.1.1")
    assert source["label"] == "the student's own copies of the handout's tests (release 26.1.1, graded as the tests of 26.1.1)"


def test_the_tests_release_follows_the_changelog(tmp_path):
    root = build_2026(tmp_path / "repo")
    cell = {"suite": "fsdp", "edition": 2026, "student": {"checkout": str(root)}}
    newest = editions.get(2026).releases[-1]
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [26.9.9] - later\n")
    assert handout_tests_suite.student_release(cell) == ("26.9.9", newest)  # newer than known: the newest known
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [26.1.0] - earlier\n")
    assert handout_tests_suite.student_release(cell) == ("26.1.0", "26.1.0")
    (root / "CHANGELOG.md").unlink()
    assert handout_tests_suite.student_release(cell) == ("26.1.1", "26.1.1")  # pyproject.toml's version
