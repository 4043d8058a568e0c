"""Checkouts that differ from the staff layout or fail one probe still get a report.

Each case is a folder of tests/fixtures/checkouts laid over a copy of tests/fixtures/student_repo
by :func:`checkout_fixtures.build` (see the README there); all of it is our own writing.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from checkout_fixtures import FIXTURES, build

from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.student import resolve as student



@pytest.fixture(autouse=True)
def fresh_imports():
    """Each test imports its checkout's packages afresh (they share the names cs336_basics, cs336_systems)."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("cs336_basics", "cs336_systems")
                 or m.startswith("cs336report_student_adapters")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if "student_repo" not in p]
    student.load_adapters.cache_clear()
    yield


def checkout(tmp_path: Path, case: str | None = None) -> Path:
    """A copy of the fixture student's checkout with ``case`` laid over it."""
    return build(tmp_path, case)


def config(repo: Path, edition: int | None = None, **extra) -> Config:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["student"] = {"checkout": str(repo), **extra}
    if edition:
        raw["handout"] = edition
    return Config.from_dict(raw, cuda_available=False)


def checked(cfg: Config) -> dict:
    from cs336report.student.check import check_config

    return check_config(cfg.data.get("student"), cfg.model_source, cfg.device, "config")


# ------------------------------------------------------------------ one failing probe


def test_a_failing_probe_is_that_pieces_error_and_the_rest_is_checked(tmp_path):
    found = checked(config(checkout(tmp_path, "two_ranks_only")))["student"]["adapters"]
    assert found["sharded_optimizer"]["status"] == "error"
    assert "get_sharded_optimizer" in found["sharded_optimizer"]["message"]
    assert "ValueError: written for 2 ranks, got 1" in found["sharded_optimizer"]["message"]
    assert found["flash_pytorch"]["status"] == "implemented"  # checked all the same
    assert found["ddp_individual_parameters"]["status"] == "implemented"


def test_check_student_exits_0_and_records_the_error(tmp_path):
    from cs336report.cli import main

    cfg = config(checkout(tmp_path, "two_ranks_only"))
    given = tmp_path / "check.json"
    given.write_text(json.dumps({"student": cfg.data["student"], "model_source": cfg.model_source,
                                 "device": "cpu", "source": "config", "files": ["config"]}))
    out = tmp_path / "checkout.json"
    assert main(["check-student", "--check-json", f"@{given}", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["student"]["adapters"]["sharded_optimizer"]["status"] == "error"


def test_the_cells_of_a_failed_piece_are_errors_naming_the_probe(tmp_path, monkeypatch):
    from cs336report.records.store import save
    from cs336report.run.runner import run_cell
    from cs336report.experiments import optimizer_state_sharding_accounting as sharding

    cfg = config(checkout(tmp_path, "two_ranks_only"))
    monkeypatch.chdir(tmp_path)
    save(checked(cfg), tmp_path / student.CHECK_RECORD)  # as the check_student rule leaves it
    cells = sharding.cells(cfg)
    name = next(n for n, c in cells.items() if c.get("optimizer") == "student")
    record = run_cell("optimizer_state_sharding_accounting", name, cells[name], tmp_path / "out.json")
    assert record["status"] == "error"
    assert "ProbeFailed" in record["error"] and "written for 2 ranks, got 1" in record["error"]
    assert record["config"]["student"]["adapters"]["sharded_optimizer"]["status"] == "error"
    # a piece whose probe passed still runs the student's code
    found = student.implementation("flash_pytorch", record["config"]["student"])
    assert found and found.provenance.endswith("get_flashattention_autograd_function_pytorch")


def test_a_checkout_that_does_not_load_still_stops_naming_file_and_key(tmp_path):
    from cs336report.config import ConfigError

    repo = checkout(tmp_path, "two_ranks_only")
    adapters = repo / "tests" / "adapters.py"
    adapters.write_text("import no_such_package_anywhere\n" + adapters.read_text())
    with pytest.raises(ConfigError, match=r"key 'student.checkout': importing .*tests/adapters.py failed"):
        checked(config(repo))


# ------------------------------------------------------------------ wrappers that are not nn.Module


def test_a_plain_class_wrapper_is_implemented_as_the_handouts_tests_accept_it(tmp_path):
    found = checked(config(checkout(tmp_path, "plain_wrappers")))["student"]["adapters"]
    assert found["ddp_individual_parameters"] == {"adapter": "get_ddp_individual_parameters",
                                                  "status": "implemented", "probe": "ran",
                                                  "class": "cs336_systems.plain_ddp.PlainDDP"}
    assert found["flash_pytorch"]["class"] == "cs336_systems.flash.TiledAttention"  # named in the answers


def test_a_class_defined_in_the_adapters_is_named_as_the_students_tests_import_it(tmp_path):
    """Not by the module name the adapters are loaded under, which the student never sees."""
    import torch

    found = checked(config(checkout(tmp_path, "edited_tests")))["student"]["adapters"]
    assert found["flash_pytorch"]["class"] == "tests.adapters.get_flashattention_autograd_function_pytorch.<locals>.Doubled"
    repo = tmp_path / "student_repo"
    impl = student.implementation("flash_pytorch", {"checkout": str(repo), "name": repo.name})
    assert student.class_name(impl.obj) == found["flash_pytorch"]["class"]
    assert student.class_name(torch.nn.Linear(1, 1)) == "torch.nn.modules.linear.Linear"


def test_a_wrapper_without_what_the_tests_use_is_still_the_wrong_kind(tmp_path):
    import torch

    repo = checkout(tmp_path, "plain_wrappers")
    impl = student.implementation("ddp_individual_parameters", {"checkout": str(repo), "name": repo.name})
    assert student.acts_as_wrapper(torch.nn.Linear(2, 2))
    with pytest.raises(student.AdapterNotImplemented, match="returned object, not a wrapper"):
        student.call(student.Implementation(impl.piece, lambda module: object(), impl.provenance), torch.nn.Linear(2, 2))


def test_a_flash_function_that_raises_is_its_pieces_error(tmp_path):
    repo = checkout(tmp_path, "two_ranks_only")
    adapters = repo / "tests" / "adapters.py"
    adapters.write_text(adapters.read_text().replace(
        "    return TiledAttention\n",
        "    return type('Bad', (torch.autograd.Function,), {'forward': staticmethod(lambda ctx, q, k, v, c=False: 1 / 0)})\n"))
    found = checked(config(repo))["student"]["adapters"]["flash_pytorch"]
    assert found["status"] == "error" and "ZeroDivisionError" in found["message"]


# ------------------------------------------------------------------ time limits


def test_an_import_that_waits_stops_the_check_naming_the_file(tmp_path):
    import time

    from cs336report.config import ConfigError

    repo = checkout(tmp_path, "slow_import")
    assert config(repo).data["student"]["import_timeout_s"] == 60  # the default
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"key 'student.checkout': importing .*student_repo/tests/adapters.py ran "
                                          r"past its time limit of 1 s; .*student.import_timeout_s"):
        checked(config(repo, import_timeout_s=1))
    assert time.monotonic() - started < 30


def test_the_students_flash_cell_stops_at_its_time_limit(tmp_path):
    from cs336report.experiments import flash_benchmarking
    from cs336report.run.runner import run_cell

    cfg = config(checkout(tmp_path, "slow_flash"), flash_timeout_s=1)
    cells = flash_benchmarking.cells(cfg)
    assert cells["student_pytorch-fp32"]["timeout_s"] == 1
    assert "timeout_s" not in cells["flash_pytorch_eager-fp32"]  # ours runs as before
    cell = {**cells["student_pytorch-fp32"], "seqs": [16, 32], "d_heads": [16], "warmup_ms": 1, "rep_ms": 1}
    record = run_cell("flash_benchmarking", "student_pytorch-fp32", cell, tmp_path / "a.json")
    assert record["status"] == "error" and record["wall_s"] < 20
    assert "TimeLimitExceeded" in record["error"] and "student.flash_timeout_s" in record["error"]
    assert record["data"]["shapes"] == []  # no shape finished within the limit


# ------------------------------------------------------------------ syntax errors


def test_a_syntax_error_in_a_piece_names_its_file_and_line(tmp_path):
    repo = checkout(tmp_path, "syntax_error")
    found = checked(config(repo))["student"]["adapters"]
    assert found["flash_pytorch"]["status"] == "error"
    assert f"SyntaxError in {repo / 'cs336_systems' / 'flash.py'}, line 11" in found["flash_pytorch"]["message"]
    assert found["ddp_individual_parameters"]["status"] == "implemented"


def test_a_syntax_error_in_the_adapters_or_what_they_import_stops_naming_file_and_line(tmp_path):
    from cs336report.config import ConfigError

    repo = checkout(tmp_path, "syntax_error")
    adapters = repo / "tests" / "adapters.py"
    text = adapters.read_text()
    adapters.write_text(text + "def half_written(:\n")
    with pytest.raises(ConfigError, match=rf"{adapters}: line {len(text.splitlines()) + 1}: not valid Python"):
        config(repo)  # telling its edition parses the adapters when the config loads
    adapters.write_text(text.replace("import torch\n", "import torch\n\nimport cs336_systems.flash\n", 1))
    flash = repo / "cs336_systems" / "flash.py"
    with pytest.raises(ConfigError, match=rf"importing {adapters} failed: SyntaxError in {flash}, line 11: .*correct"):
        checked(config(repo))


# ------------------------------------------------------------------ the student's flash against the reference


def flash_cell(cfg: Config) -> dict:
    from cs336report.experiments import flash_benchmarking

    cell = flash_benchmarking.cells(cfg)["student_pytorch-fp32"]
    return {**cell, "seqs": [32], "d_heads": [16], "warmup_ms": 1, "rep_ms": 1}


@pytest.mark.parametrize("function, verdict", [("TiledAttention", "ok"), ("NoMask", "not_causal"),
                                               ("NoScale", "wrong")])
def test_the_students_flash_is_checked_against_the_reference_before_timing(tmp_path, function, verdict):
    from cs336report.run.runner import run_cell

    repo = checkout(tmp_path, "wrong_flash")
    if function != "NoMask":
        adapters = repo / "tests" / "adapters.py"
        module = "flash" if function == "TiledAttention" else "wrong_flash"
        adapters.write_text(adapters.read_text().replace("from cs336_systems.wrong_flash import NoMask\n\n    return NoMask",
                                                         f"from cs336_systems.{module} import {function}\n\n    return {function}"))
    record = run_cell("flash_benchmarking", "student_pytorch-fp32", flash_cell(config(repo)), tmp_path / "a.json")
    assert record["status"] == "ok"  # timed all the same
    check = record["data"]["reference_check"]
    assert check["status"] == verdict and (check["seq"], check["d"], check["causal"]) == (32, 16, True)
    assert (check["max_abs_error"] <= check["tolerance"]) == (verdict == "ok")


def test_a_row_that_fails_the_check_says_so_and_the_answer_sets_it_beside_ours(tmp_path):
    from cs336report.report.render import render_report
    from cs336report.run.runner import run_cell

    cell = flash_cell(config(checkout(tmp_path, "wrong_flash")))
    results = tmp_path / "results" / "flash_benchmarking"
    run_cell("flash_benchmarking", "student_pytorch-fp32", cell, results / "student_pytorch-fp32.json")
    for impl in ("flash_pytorch_eager", "naive"):  # ours, the reference, and the naive attention
        ours = {**cell, "implementation": impl, "student": None}
        ours.pop("timeout_s")
        run_cell("flash_benchmarking", f"{impl}-fp32", ours, results / f"{impl}-fp32.json")
    out = tmp_path / "report"
    render_report([str(p) for p in sorted(results.glob("*.json"))], {"_device": "cpu", "_grid": "cpu"}, out)
    md = (out / "report.md").read_text()
    section = md[md.index('<a id="flash_benchmarking">'):]
    assert ("checked against the reference before timing (fp32), it ignores is_causal: in causal cells its output "
            "matches attention without the causal mask, so its timings are not those of FlashAttention-2") in section
    answer = (out / "answers.md").read_text().split('<a id="flash_benchmarking"></a>', 1)[1].split("<a id=", 1)[0]
    assert "PyTorch FA2 (yours) (fp32) ignores is_causal" in answer and "at seq 32, d_head 16" in answer
    assert "tolerance 0.01); its timings below are of that function, not of FlashAttention-2." in answer
    # the student's row and class beside ours, the reference
    assert ("PyTorch FA2 (yours) is `cs336_systems.wrong_flash.NoMask`, from "
            "`get_flashattention_autograd_function_pytorch`") in answer
    reference = answer.split("The tables set it beside ", 1)[1].split(", ours, as the reference.", 1)[0]
    assert f"Latency, fp32: PyTorch FA2 (yours) beside {reference} (ours, the reference)" in answer
    header = next(line for line in answer.splitlines() if line.startswith("|") and "PyTorch FA2 (yours)" in line)
    assert header.index("fwd PyTorch FA2 (yours)") < header.index(f"fwd {reference}")




# ------------------------------------------------------------------ the model as the student's environment finds it


def test_the_model_comes_from_the_checkouts_uv_sources_path(tmp_path):
    repo = checkout(tmp_path, "own_a1_package")
    (repo / "a1" / "src").mkdir(parents=True)
    shutil.move(repo / "cs336-basics" / "cs336_basics", repo / "a1" / "src" / "cs336_basics")
    shutil.rmtree(repo / "cs336-basics")
    cfg = config(repo)
    assert cfg.model_source["factory"] == "cs336_basics.model:BasicsTransformerLM"
    assert cfg.model_source["paths"] == [str(repo), str(repo / "a1" / "src")]
    model = checked(cfg)["model_source"]
    assert model["factory"] == "cs336_basics.model:BasicsTransformerLM"
    assert sys.modules["cs336_basics"].__path__[0] == str(repo / "a1" / "src" / "cs336_basics")


def without_basics(tmp_path: Path) -> Path:
    """The base checkout without its cs336-basics/ (nor any A1 package of its own)."""
    repo = checkout(tmp_path)
    shutil.rmtree(repo / "cs336-basics")
    return repo


@pytest.fixture
def no_basics_imported(monkeypatch):
    """No cs336_basics imported in this process, nor on its path, before the test, and none imported
    after it: an earlier test's import or path entry would be found as installed (a workflow job is a
    fresh process)."""

    def forget():
        for name in [m for m in sys.modules if m == "cs336_basics" or m.startswith("cs336_basics.")]:
            del sys.modules[name]

    forget()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p or ".") / "cs336_basics").exists()])
    yield
    forget()


def test_the_model_comes_from_an_installed_distribution_where_the_checkout_has_none(tmp_path, monkeypatch,
                                                                                     no_basics_imported):
    site = tmp_path / "site-packages"
    shutil.copytree(FIXTURES / "student_repo" / "cs336-basics" / "cs336_basics", site / "cs336_basics",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(site))
    cfg = config(without_basics(tmp_path))
    assert cfg.model_source["factory"] == "cs336_basics.model:BasicsTransformerLM"
    assert cfg.model_source["installed"]["location"] == str(site / "cs336_basics")
    assert checked(cfg)["model_source"]["factory"] == "cs336_basics.model:BasicsTransformerLM"
    assert sys.modules["cs336_basics"].__path__[0] == str(site / "cs336_basics")


def test_without_a_model_the_rest_runs_and_model_cells_say_where_it_looked(tmp_path, no_basics_imported):
    from cs336report import experiments
    from cs336report.run.runner import run_cell

    repo = without_basics(tmp_path)
    cfg = config(repo)
    missing = cfg.model_source["missing"]
    assert missing.startswith("not run: no model found")
    assert "[tool.uv.sources]" in missing and "installed" in missing and str(repo / "cs336-basics") in missing
    entry = checked(cfg)  # the checkout's pieces are checked all the same
    assert entry["student"]["adapters"]["flash_pytorch"]["status"] == "implemented"
    assert "student_pytorch-fp32" in experiments.cells("flash_benchmarking", cfg)
    assert experiments.cells("handout_tests", cfg)
    name, cell = sorted(experiments.cells("benchmarking", cfg).items())[0]
    record = run_cell("benchmarking", name, cell, tmp_path / "b.json")
    assert (record["status"], record["error"]) == ("not_run", missing)


# ------------------------------------------------------------------ the student's copies of the tests


def test_the_students_copies_run_isolated_without_a_conftest_that_fakes_passes(tmp_path):
    from cs336report import experiments
    from cs336report.run.runner import run_cell

    repo = checkout(tmp_path, "edited_tests")
    cell = {**experiments.cells("handout_tests", config(repo))["attention"], "junitxml": str(tmp_path / "a.xml")}
    record = run_cell("handout_tests", "attention", cell, tmp_path / "attention.json")
    data = record["data"]
    outcomes = {t["name"]: t["outcome"] for t in data["tests"]}
    # the verdicts of the tests themselves: the doubled output fails, the Triton adapter raises
    assert outcomes["test_flash_forward_pass_pytorch"] == "failed"
    assert outcomes["test_flash_forward_pass_triton[True]"] == "not_implemented"
    assert str(repo) not in " ".join(data["command"][:data["command"].index("-p")])  # a copy ran, not the checkout
    assert data["tests_source"]["kind"] == "student_copies"
    conftest = data["conftest"]
    assert conftest["files"] == [{"file": "tests/conftest.py", "outcome_hooks": ["pytest_runtest_makereport"],
                                  "ran": True, "hooks_removed": ["pytest_runtest_makereport"]}]
    assert "rights of the user" in conftest["note"]
    # the student's added case and file are theirs, apart from the handout's
    assert "test_flash_forward_pass_pytorch_runs" not in outcomes
    assert [t["name"] for t in data["student_tests"]["extra"]] == ["test_flash_forward_pass_pytorch_runs"]
    assert data["student_tests"]["extra_files"] == ["test_mine.py"]


def test_with_a_course_clone_the_students_conftest_and_edited_copies_are_named_not_run(tmp_path):
    from cs336report.experiments.handout_tests import suite

    repo = checkout(tmp_path, "edited_tests")
    cell = {"suite": "attention", "student": {"checkout": str(repo)},
            "course": {"checkout": str(FIXTURES / "course_clone"), "edition": 2025, "tests_release": "1.0.0"}}
    data = {"tests": []}
    suite._set_apart(cell, data)
    assert data["conftest"]["files"][0]["ran"] is False
    assert data["conftest"]["files"][0]["outcome_hooks"] == ["pytest_runtest_makereport"]
    assert data["student_tests"]["modified_files"] == ["test_attention.py"]
    assert "test_mine.py" in data["student_tests"]["extra_files"]


def test_a_pass_never_stands_for_an_adapter_that_is_not_implemented(tmp_path):
    from cs336report.experiments.handout_tests.suite import parse_junit

    path = tmp_path / "a.xml"
    path.write_text('<testsuites><testsuite><testcase classname="tests.test_attention" '
                    'name="test_flash_forward_pass_triton[True]" time="0.1"/></testsuite></testsuites>')
    verdicts = {"flash_triton": {"status": "not_implemented", "reason": "raises NotImplementedError"}}
    [test] = parse_junit(path, "attention", verdicts)
    assert test["outcome"] == "not_implemented" and "the test passed" in test["message"]


def test_a_not_implemented_part_of_an_implemented_piece_is_not_called_its_adapters(tmp_path):
    """A forward-only FlashAttention (its backward raises NotImplementedError) is not implemented in the
    backward test, and the message says the code the adapter returned raised, not the adapter."""
    from cs336report.experiments.handout_tests.suite import parse_junit

    path = tmp_path / "a.xml"
    path.write_text('<testsuites><testsuite><testcase classname="tests.test_attention" name="test_flash_backward_pytorch"'
                    ' time="0.1"><failure message="NotImplementedError: You must implement either the backward or'
                    ' the vjp method">NotImplementedError</failure></testcase></testsuite></testsuites>')
    verdicts = {"flash_pytorch": {"status": "implemented", "class": "tests.adapters.Doubled"}}
    [test] = parse_junit(path, "attention", verdicts)
    assert test["outcome"] == "not_implemented"
    assert test["message"] == ("what get_flashattention_autograd_function_pytorch returned "
                               "(tests.adapters.Doubled) raises NotImplementedError")
    [test] = parse_junit(path, "attention", {"flash_pytorch": {"status": "not_implemented"}})
    assert test["message"] == "get_flashattention_autograd_function_pytorch raises NotImplementedError"
