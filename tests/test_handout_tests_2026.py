"""handout_tests with the 2026 edition: our adapters of that edition, its cells and suites, and our
2026 DDP case run through ``get_ddp``."""

from __future__ import annotations

import inspect

import pytest
import yaml

from cs336report import editions
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments import handout_tests
from cs336report.experiments.handout_tests import suite as handout_tests_suite
from cs336report.run.runner import run_cell
from cs336report.student import adapters
from cs336report.student.check import check_signatures_of
from cs336report.student.resolve import PIECES, edition_pieces, implementation

E2026 = editions.get(2026)


def _cells(handout) -> dict:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["handout"] = handout
    return handout_tests.cells(Config.from_dict(raw, cuda_available=False))


def test_our_adapters_define_the_2026_adapters_with_the_tests_calls():
    assert tuple(a.name for a in E2026.adapters) == adapters.NAMES_2026
    check_signatures_of(adapters, 2026)  # raises naming the adapter whose call the tests could not make
    assert "compute_dtype" in inspect.signature(adapters.get_fsdp).parameters


def test_the_2026_pieces_name_the_2026_adapters():
    pieces = edition_pieces(2026)
    assert pieces["ddp_individual_parameters"].adapter == "get_ddp"
    assert pieces["ddp_individual_parameters"].hooks == ("ddp_on_after_backward",)
    assert pieces["fsdp"].hooks == ("fsdp_on_after_backward", "fsdp_gather_full_params")
    assert pieces["sharded_optimizer"] == PIECES["sharded_optimizer"]
    impl = implementation("fsdp", None, pieces["fsdp"])
    assert impl and impl.adapter == "get_fsdp" and set(impl.hooks) == set(pieces["fsdp"].hooks)


def test_cells_run_the_suites_the_edition_has():
    cells = _cells(2026)
    assert list(cells) == ["attention", "ddp", "fsdp", "sharded_optimizer"]
    assert {cell["edition"] for cell in cells.values()} == {2026}
    old = _cells(2025)  # a 2025 cell is as before: no fsdp, no edition key
    assert list(old) == ["attention", "ddp", "sharded_optimizer"]
    assert all("edition" not in cell for cell in old.values())


def test_registry_cases_grade_our_2026_suite_by_test_function():
    cases = handout_tests_suite.registry_cases({"suite": "ddp", "edition": 2026})
    assert cases["test_DistributedDataParallel"] == ("ddp_overlap_individual_parameters", "", "ddp_individual_parameters")
    cases = handout_tests_suite.registry_cases({"suite": "attention", "edition": 2026})
    assert "test_flash_forward_pass_triton" not in cases  # its two ids grade (b) and (c): by name only
    assert cases["test_flash_forward_pass_triton[True]"][:2] == ("flash_forward", "c")
    assert handout_tests_suite.registry_cases({"suite": "ddp"}) is None  # 2025: classified by name


def test_a_2026_verdict_on_another_adapter_name_is_left_out():
    verdicts = {"ddp_individual_parameters": {"adapter": "get_ddp_individual_parameters", "status": "not_implemented"},
                "sharded_optimizer": {"adapter": "get_sharded_optimizer", "status": "not_implemented"}}
    assert list(handout_tests_suite.edition_verdicts(verdicts, 2026)) == ["sharded_optimizer"]
    assert handout_tests_suite.edition_verdicts(verdicts, 2025) == verdicts


@pytest.mark.parametrize("suite", ["ddp"])
def test_our_2026_ddp_suite_runs_through_get_ddp(tmp_path, suite):
    cell = {**_cells(2026)[suite], "junitxml": str(tmp_path / f"{suite}.xml")}
    record = run_cell("handout_tests", suite, cell, tmp_path / f"{suite}.json")
    data = record["data"]
    assert record["status"] == "ok", record.get("error")
    assert data["tests_source"] == {"kind": "own_suite", "label": "cs336report's re-written suite of the handout's tests",
                                    "checkout": None, "edition": 2026}
    assert [t["name"] for t in data["tests"]] == ["test_DistributedDataParallel[mlp]", "test_DistributedDataParallel[tied]"]
    assert {(t["problem"], t["outcome"]) for t in data["tests"]} == {("ddp_overlap_individual_parameters", "passed")}
    assert all(t["max_abs_error"] <= 1e-5 for t in data["tests"])
