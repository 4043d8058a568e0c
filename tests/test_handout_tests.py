"""handout_tests: the handout's cases run with pytest, each outcome read back from the JUnit XML.

The suites run for real in a child pytest (a few seconds each on the fixtures' checkouts); the
built-in attention suite, which runs our Triton kernels under the interpreter, is marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments import handout_tests
from cs336report.experiments.handout_tests import suite as handout_tests_suite
from cs336report.run.runner import run_cell
from cs336report.student.check import check_checkout

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIELDS = {"id", "name", "problem", "subquestion", "outcome", "seconds", "message", "max_abs_error"}

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.test_attention" name="test_flash_forward_pass_pytorch" file="tests/test_attention.py" time="0.5">
  <properties><property name="max_abs_error" value="2.5e-07"/></properties></testcase>
<testcase classname="tests.test_attention" name="test_flash_forward_pass_triton[True]" file="tests/test_attention.py" time="0.1">
  <failure message="NotImplementedError">raise NotImplementedError</failure></testcase>
<testcase classname="tests.test_attention" name="test_flash_backward_triton[False]" file="tests/test_attention.py" time="0.0">
  <skipped message="A GPU must be available to run Triton kernels"/></testcase>
<testcase classname="tests.test_attention" name="test_flash_backward_pytorch" file="tests/test_attention.py" time="0.2">
  <failure message="AssertionError: Tensor-likes are not close!">Mismatched elements: 3 / 10</failure></testcase>
<testcase classname="tests.test_sharded_optimizer" name="test_sharded_optimizer[tied]" time="1.0">
  <failure message="TypeError: zero_grad() missing 1 required positional argument">...</failure></testcase>
</testsuite></testsuites>"""


def test_parse_junit_reads_each_test(tmp_path):
    path = tmp_path / "suite.xml"
    path.write_text(JUNIT)
    verdicts = {"sharded_optimizer": {"status": "not_implemented", "reason": "returned type, not an optimizer"}}
    tests = handout_tests_suite.parse_junit(path, "attention", verdicts)
    assert all(set(t) == FIELDS for t in tests)
    by_name = {t["name"]: t for t in tests}
    first = by_name["test_flash_forward_pass_pytorch"]
    assert (first["id"], first["problem"], first["subquestion"], first["outcome"]) == (
        "tests/test_attention.py::test_flash_forward_pass_pytorch", "flash_forward", "a", "passed")
    assert first["max_abs_error"] == 2.5e-07 and first["seconds"] == 0.5
    causal = by_name["test_flash_forward_pass_triton[True]"]
    assert (causal["subquestion"], causal["outcome"]) == ("c", "not_implemented")
    assert causal["message"] == "get_flashattention_autograd_function_triton raises NotImplementedError"
    assert by_name["test_flash_backward_triton[False]"]["outcome"] == "skipped"
    wrong = by_name["test_flash_backward_pytorch"]
    assert (wrong["problem"], wrong["outcome"], wrong["max_abs_error"]) == ("flash_backward", "failed", None)
    assert wrong["message"].startswith("AssertionError")
    sharded = by_name["test_sharded_optimizer[tied]"]
    assert sharded["id"] == "tests/test_sharded_optimizer.py::test_sharded_optimizer[tied]"
    assert (sharded["problem"], sharded["outcome"]) == ("optimizer_state_sharding", "not_implemented")
    assert "returned type" in sharded["message"]


@pytest.mark.parametrize("name, suite, expected", [
    ("test_flash_forward_pass_triton[False]", "attention", ("flash_forward", "b")),
    ("test_DistributedDataParallelIndividualParameters[ToyModel]", "ddp", ("ddp_overlap_individual_parameters", "")),
    ("test_DistributedDataParallelCPU[0.0016-ToyModel]", "ddp", ("ddp_overlap_bucketed", "")),
    ("test_ddp_bucketed[1.0-mlp]", "ddp", ("ddp_overlap_bucketed", "")),
    ("test_naive_ddp[tied]", "ddp", ("naive_ddp", "")),
    ("test_sharded_optimizer[ToyModel]", "sharded_optimizer", ("optimizer_state_sharding", "")),
])
def test_tests_map_to_the_problems_they_grade(name, suite, expected):
    assert handout_tests_suite.classify(name, suite)[:2] == expected


def _cells(checkout: Path | None, tmp_path: Path) -> dict:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    cfg = Config.from_dict(raw, cuda_available=False)
    cells = handout_tests.cells(cfg)
    assert set(cells) == {"attention", "ddp", "sharded_optimizer"}
    student = check_checkout({"checkout": str(checkout)}) if checkout else None
    return {name: {**cell, "student": student, "junitxml": str(tmp_path / f"{name}.xml")} for name, cell in cells.items()}


def _run(cells: dict, suite: str, tmp_path: Path) -> dict:
    record = run_cell("handout_tests", suite, cells[suite], tmp_path / f"{suite}.json")
    assert Path(cells[suite]["junitxml"]).is_file()
    assert json.loads((tmp_path / f"{suite}.json").read_text()) == record
    return record


def test_the_students_own_suite_runs_on_their_adapters(tmp_path):
    cells = _cells(FIXTURES / "student_repo", tmp_path)
    record = _run(cells, "attention", tmp_path)
    assert record["status"] == "ok" and record["data"]["implementation"] == "student_repo"
    outcomes = {t["name"]: t["outcome"] for t in record["data"]["tests"]}
    assert outcomes["test_flash_forward_pass_pytorch"] == outcomes["test_flash_backward_pytorch"] == "passed"
    for causal in ("False", "True"):  # Triton raises NotImplementedError (run under the interpreter on a CPU)
        assert outcomes[f"test_flash_forward_pass_triton[{causal}]"] == "not_implemented"
    passed = [t for t in record["data"]["tests"] if t["outcome"] == "passed"]
    assert all(0 <= t["max_abs_error"] < 1e-4 for t in passed)


def test_a_wrong_result_fails_with_its_error(tmp_path):
    repo = tmp_path / "student_repo"
    shutil.copytree(FIXTURES / "student_repo", repo, ignore=shutil.ignore_patterns("__pycache__"))
    flash = repo / "cs336_systems" / "flash.py"
    flash.write_text(flash.read_text().replace("scale = 1 / math.sqrt(d)", "scale = 1.5 / math.sqrt(d)"))
    cells = _cells(repo, tmp_path)
    tests = {t["name"]: t for t in _run(cells, "attention", tmp_path)["data"]["tests"]}
    forward = tests["test_flash_forward_pass_pytorch"]
    assert forward["outcome"] == "failed" and forward["max_abs_error"] > 1e-2
    assert "not close" in forward["message"]


def test_the_course_repository_as_handed_out_is_not_implemented(tmp_path):
    cells = _cells(FIXTURES / "course_repo", tmp_path)
    record = _run(cells, "sharded_optimizer", tmp_path)
    assert record["status"] == "not_implemented" and "get_sharded_optimizer" in record["error"]
    assert {t["outcome"] for t in record["data"]["tests"]} == {"not_implemented"}
    assert record["data"]["implementation"] == "course_repo"


def test_ddp_suite_on_the_student_checkout(tmp_path):
    cells = _cells(FIXTURES / "student_repo", tmp_path)
    tests = _run(cells, "ddp", tmp_path)["data"]["tests"]
    outcome = {t["problem"]: set() for t in tests}
    for t in tests:
        outcome[t["problem"]].add(t["outcome"])
    assert outcome == {"ddp_overlap_individual_parameters": {"passed"}, "ddp_overlap_bucketed": {"not_implemented"}}


def test_a_checkout_without_the_suite_is_an_error_with_an_empty_junit(tmp_path):
    repo = tmp_path / "student_repo"
    shutil.copytree(FIXTURES / "student_repo", repo, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "tests" / "test_sharded_optimizer.py").unlink()
    cells = _cells(repo, tmp_path)
    record = _run(cells, "sharded_optimizer", tmp_path)
    assert record["status"] == "error" and "tests/test_sharded_optimizer.py" in record["error"]


@pytest.mark.slow
def test_our_suite_passes_on_the_builtin_attention(tmp_path):
    cells = _cells(None, tmp_path)
    record = _run(cells, "attention", tmp_path)
    assert record["status"] == "ok" and record["data"]["implementation"] == "built-in"
    assert record["data"]["environment"] == {"TRITON_INTERPRET": "1", "CS336_FLASH_BACKWARD": "eager"}
    tests = record["data"]["tests"]
    assert len(tests) == 6 and {t["outcome"] for t in tests} == {"passed"}
    assert {(t["problem"], t["subquestion"]) for t in tests} == {
        ("flash_forward", "a"), ("flash_forward", "b"), ("flash_forward", "c"), ("flash_backward", "")}
    assert all(t["max_abs_error"] < 1e-4 for t in tests)


def test_the_naive_ddp_check_fails_a_wrapper_that_does_not_average_gradients(tmp_path, monkeypatch):
    """The naive DDP case of our suite (the handout describes the check but ships no test): the
    built-in wrapper matches one process trained on the whole batch; one that sums the gradients
    without dividing by the world size does not."""
    from cs336report.distributed import ddp
    from cs336report.handout_suite._distributed import run_ranks
    from cs336report.handout_suite.test_ddp import ATOL

    (tmp_path / "ok").mkdir(), (tmp_path / "summed").mkdir()
    assert run_ranks(tmp_path / "ok", "naive_ddp", "tied") <= ATOL

    def summed(self):
        for p in ddp.trainable(self.module):
            if p.grad is not None:
                torch.distributed.all_reduce(p.grad)

    monkeypatch.setattr(ddp.DDPNaive, "finish_gradient_synchronization", summed)  # the ranks fork from here
    assert run_ranks(tmp_path / "summed", "naive_ddp", "tied") > 100 * ATOL


def test_our_ddp_suite_answers_naive_ddp(tmp_path):
    cells = _cells(None, tmp_path)
    tests = _run(cells, "ddp", tmp_path)["data"]["tests"]
    naive = [t for t in tests if t["problem"] == "naive_ddp"]
    assert [t["name"] for t in naive] == ["test_naive_ddp[mlp]", "test_naive_ddp[tied]"]
    assert {t["outcome"] for t in naive} == {"passed"} and all(t["max_abs_error"] <= 1e-5 for t in naive)


def test_without_triton_the_triton_tests_are_skipped_and_the_answer_says_why(tmp_path):
    """A machine without Triton (a CPU install from the README) cannot run the Triton kernels: the
    suite skips those tests with the reason, and the answer gives it instead of a failure."""
    import subprocess
    import sys

    xml = tmp_path / "attention.xml"
    suite = Path(handout_tests.SUITE_PACKAGE) / "test_attention.py"
    code = ("import sys; sys.modules['triton'] = None\nimport pytest\n"
            f"sys.exit(pytest.main([{str(suite)!r}, '-q', '-p', 'no:cacheprovider', '--junitxml={xml}', "
            "'-o', 'junit_family=xunit1']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stdout[-2000:]
    tests = handout_tests_suite.parse_junit(xml, "attention")
    triton = [t for t in tests if "triton" in t["name"]]
    assert len(triton) == 4 and {t["outcome"] for t in triton} == {"skipped"}
    assert {t["message"] for t in triton} == {"Triton is not installed (pip install triton)"}
    assert {t["outcome"] for t in tests if "pytorch" in t["name"]} == {"passed"}
    record = {"experiment": "handout_tests", "cell": "attention", "status": "ok", "config": {},
              "data": {"tests": tests}, "_path": "results/handout_tests/attention.json"}
    part, text = _shared_answer("flash_forward", [record])
    assert "Skipped: the handout test of" in text and "Triton is not installed" in text
    assert text.count("test_flash_forward_pass_triton[False]") == 1  # named once, in its sentence
    assert "failed" not in text
    backward, text = _shared_answer("flash_backward", [record])
    assert "1 of 3 handout tests of the backward pass passed, 2 skipped: Triton is not installed" in text
    assert _headline("flash_forward", part) == ["Passed: the handout test of the tiled PyTorch forward",
                                                "Skipped: the handout test of the Triton forward kernel",
                                                "Skipped: the handout test of causal masking"]
    assert _headline("flash_backward", backward)[0] == "1 of 3 handout tests of the backward pass passed, 2 skipped"


def _shared_answer(problem: str, records: list[dict], page: str = "answers") -> tuple[dict, str]:
    """A test-only problem's data from the shared builder, and its answer (or evidence) in Markdown."""
    from cs336report import editions
    from cs336report.report.render import environments
    from cs336report.report.sections import handout_tests as shared

    class Ctx:  # the records and the edition the shared builder reads
        edition = editions.get(2025)

        def records(self, experiment):
            return records

    data = shared.build(Ctx(), editions.get(2025).problem(problem))
    section = {"id": problem, "title": problem, "command": "c"}
    text = environments()["md"].get_template(f"{page}/handout_tests.j2").render(fmt_lib="_md.j2", d=data,
                                                                                section=section)
    return data, text


def _headline(problem: str, data: dict) -> list[str]:
    from cs336report import editions
    from cs336report.report.sections import section

    return list(section(editions.get(2025).problem(problem)).headline(data))


def test_the_answer_says_whose_test_files_ran():
    """Without a student's checkout the cases are cs336report's own, written from the handout's
    description, and the answer says so; a checkout's own tests are named as the student's copies."""
    tests = [{"name": "test_flash_backward_pytorch", "problem": "flash_backward", "subquestion": "",
              "outcome": "passed", "seconds": 0.2, "message": "", "max_abs_error": 1e-6}]
    texts = {}
    for checkout in (None, "/home/student/assignment2"):
        record = {"experiment": "handout_tests", "cell": "attention", "status": "ok", "config": {},
                  "data": {"tests": tests, "checkout": checkout, "implementation": "built-in"},
                  "_path": "results/handout_tests/attention.json"}
        part, texts[checkout] = _shared_answer("flash_backward", [record])
        assert part["own_suite"] is (checkout is None)
    assert "cs336report's own versions of the handout's tests" in texts[None]
    assert "own versions" not in texts["/home/student/assignment2"]
    assert ("Implementation tested: built-in, by the student's own copies of the handout's tests"
            in texts["/home/student/assignment2"])
    # the evidence and its table say the same
    for checkout in (None, "/home/student/assignment2"):
        record = {"experiment": "handout_tests", "cell": "attention", "status": "ok", "config": {},
                  "data": {"tests": tests, "checkout": checkout, "implementation": "built-in"},
                  "_path": "results/handout_tests/attention.json"}
        part, evidence = _shared_answer("flash_backward", [record], page="sections")
        assert ("in cs336report's own suite" in evidence) is (checkout is None)
        noun = "handout test" if checkout is None else "copied test"  # the student's copies are not the handout's
        assert _headline("flash_backward", part) == [f"Passed: the {noun} of the backward pass",
                                                     "largest absolute error against the reference 1e-06"]
        assert part["table"].title == ("Tests of flash_backward, cs336report's own suite" if checkout is None
                                       else "Tests of flash_backward: the student's own copies of the handout's tests")


def test_the_answer_names_the_students_conftest_and_sets_their_own_tests_apart():
    tests = [{"name": "test_flash_backward_pytorch", "problem": "flash_backward", "subquestion": "",
              "outcome": "failed", "seconds": 0.2, "message": "AssertionError", "max_abs_error": None}]
    extra = [{**tests[0], "name": "test_flash_backward_pytorch_loose", "outcome": "passed"}]
    conftest = {"files": [{"file": "tests/conftest.py", "outcome_hooks": ["pytest_runtest_makereport"], "ran": True,
                           "hooks_removed": ["pytest_runtest_makereport"]}], "note": "..."}
    record = {"experiment": "handout_tests", "cell": "attention", "status": "ok", "config": {},
              "data": {"tests": tests, "checkout": "/home/student/a2", "implementation": "a2", "conftest": conftest,
                       "student_tests": {"extra": extra, "extra_files": ["test_mine.py"], "modified_files": []}},
              "_path": "results/handout_tests/attention.json"}
    part, text = _shared_answer("flash_backward", [record])
    assert "0 of 1 copied tests of the backward pass passed, 1 failed" in text and "handout test" not in text
    assert ("defines `pytest_runtest_makereport`, which can change a test's outcome: the copies ran without it."
            in text)
    assert "The checkout's conftest code runs with the rights of the user running the report." in text
    assert "the copies ran without it. The checkout's conftest code" in text  # two sentences, not run together
    assert "apart from the counts above: `test_flash_backward_pytorch_loose` passed." in text
    assert "not counted as the handout's tests: `test_mine.py`." in text
    # with a course clone the course's tests ran without the student's conftest
    conftest["files"][0].update(ran=False, hooks_removed=None)
    record["data"]["tests_source"] = {"kind": "course", "label": "the handout's tests (course release 1.0.4)"}
    _, text = _shared_answer("flash_backward", [record])
    assert "which can change a test's outcome: it did not run (the tests ran without the student's conftest)." in text
    assert "Conftest code (here the course's) runs with the rights of the user running the report." in text


def test_beside_a_gpu_our_pytorch_backward_runs_eagerly_and_triton_natively(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("CS336_FLASH_BACKWARD", raising=False)
    cells = _cells(None, tmp_path)
    argv, root, env = handout_tests_suite.command({**cells["attention"], "device": "cuda"}, tmp_path / "a.xml")
    assert "TRITON_INTERPRET" not in env and env["CS336_FLASH_BACKWARD"] == "eager"
    # the suite's processes see it: our backward is not compiled for the CPU tensors of its tests
    probe = "from cs336report.flash import backward_mode; print(backward_mode())"
    done = subprocess.run([argv[0], "-c", probe], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "eager"
    env.pop("CS336_FLASH_BACKWARD")
    done = subprocess.run([argv[0], "-c", probe], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "compile"


@pytest.mark.parametrize("problem, piece, ours", [
    ("ddp_overlap_bucketed", "ddp_bucketed", "DDPBucketed"),
    ("optimizer_state_sharding", "sharded_optimizer", "cs336report.distributed.sharded_optimizer.ShardedOptimizer")])
def test_the_answer_names_the_students_class_with_ours_as_the_reference(problem, piece, ours):
    tests = [{"name": "test_x", "problem": problem, "subquestion": "", "outcome": "passed", "seconds": 0.2,
              "message": "", "max_abs_error": None}]
    record = {"experiment": "handout_tests", "cell": "ddp", "status": "ok", "config": {},
              "data": {"tests": tests, "checkout": "/home/student/a2", "implementation": "a2",
                       "classes": {piece: "cs336_systems.mine.MyWrapper"}},
              "_path": "results/handout_tests/ddp.json"}
    part, text = _shared_answer(problem, [record])
    assert f"Your implementation: `cs336_systems.mine.MyWrapper` (from `get_{piece}`); ours, the reference: `{ours}`" \
        in text
    assert "Our implementation" not in text and "wraps any optimizer class" not in text


@pytest.mark.parametrize("problem, piece, ours", [
    ("ddp_overlap_bucketed", "ddp_bucketed", "DDPBucketed"),
    ("optimizer_state_sharding", "sharded_optimizer", "cs336report.distributed.sharded_optimizer.ShardedOptimizer")])
def test_a_checkout_without_a_class_of_its_own_is_not_described_by_ours(problem, piece, ours):
    """The check named no class of the student's (the adapter raises, or returns the wrong kind): the
    answer says so first, ours beside it as the reference, never ours as what the tests tested."""
    tests = [{"name": "test_x", "problem": problem, "subquestion": "", "outcome": "not_implemented", "seconds": 0.2,
              "message": f"get_{piece} raises NotImplementedError", "max_abs_error": None}]
    record = {"experiment": "handout_tests", "cell": "ddp", "status": "ok", "config": {},
              "data": {"tests": tests, "checkout": "/home/student/a2", "implementation": "a2",
                       "classes": {"flash_pytorch": "cs336_systems.flash.Mine"}},
              "_path": "results/handout_tests/ddp.json"}
    part, text = _shared_answer(problem, [record])
    assert (f"Your implementation: none that ran (`get_{piece}`: not implemented); ours, the reference: `{ours}`"
            in text)
    assert "Our implementation" not in text and "wraps any optimizer class" not in text
    assert "(tested: a2)" not in text
    tests[0].update(outcome="failed", message="AssertionError")  # ran and failed: the check named no class
    part, text = _shared_answer(problem, [record])
    assert f"Your implementation: from `get_{piece}` (the check's probe named no class); ours, the reference" in text
