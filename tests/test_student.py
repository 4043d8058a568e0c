"""The student's own code through the handout's adapters: our adapters, the resolver, the check of a checkout.

Fixtures: tests/fixtures/student_repo (flash PyTorch and per-parameter DDP implemented with code of
its own, Triton and bucketed DDP raising, the sharded optimizer returning the wrong kind) and
tests/fixtures/course_repo (every adapter raising, as the assignment hands it out).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

from cs336report.config import DEFAULT_CONFIG, Config, ConfigError
from cs336report.experiments import flash_benchmarking
from cs336report.experiments.flash_benchmarking import timing as flash_benchmarking_timing
from cs336report.run.runner import run_cell
from cs336report.student import adapters, resolve as student

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STUDENT_REPO = FIXTURES / "student_repo"
COURSE_REPO = FIXTURES / "course_repo"


@pytest.fixture(autouse=True)
def fresh_imports():
    """Each test imports a checkout's packages afresh: one process normally sees one checkout, these
    tests see several under the same package names (cs336_basics, cs336_systems)."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("cs336_basics", "cs336_systems")
                 or m.startswith("cs336report_student_adapters")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not ("student_repo" in p or "course_repo" in p)]
    student.load_adapters.cache_clear()
    yield


def raw_config(checkout=None, **model) -> dict:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    if checkout is not None:
        raw["student"] = {"checkout": str(checkout)}
    if model:
        raw["model"] = model
    return raw


@pytest.fixture
def student_cfg() -> Config:
    return Config.from_dict(raw_config(STUDENT_REPO), cuda_available=False)


def checked(raw: dict) -> dict:
    """The probes of a config's checkout and model, as check-config and the check_student rule run them
    after the config loaded (which imports none of their code)."""
    from cs336report.student.check import check_config

    cfg = Config.from_dict(raw, cuda_available=False)
    return check_config(cfg.data.get("student"), cfg.model_source, cfg.device, "config")


def entry(checkout: Path) -> dict:
    return {"checkout": str(checkout), "name": checkout.name}


def copy_repo(tmp_path: Path, source: Path = STUDENT_REPO) -> Path:
    dest = tmp_path / source.name
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def edit_adapter(repo: Path, old: str, new: str) -> None:
    path = repo / "tests" / "adapters.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


# ------------------------------------------------------------------ our adapters and the resolver


def test_builtin_adapters_return_our_functions():
    from cs336report.flash import FlashAttention2PyTorch
    from cs336report.flash.triton_kernels import FlashAttention2Triton

    assert adapters.get_flashattention_autograd_function_pytorch() is FlashAttention2PyTorch
    assert adapters.get_flashattention_autograd_function_triton() is FlashAttention2Triton
    pieces = student.PIECES.values()
    assert set(adapters.NAMES) == {p.adapter for p in pieces} | {h for p in pieces for h in p.hooks}
    for name in adapters.NAMES:
        assert callable(getattr(adapters, name)), name


def test_builtin_adapter_of_a_missing_module_is_not_implemented():
    with pytest.raises(NotImplementedError, match="get_ddp_bucketed: cs336report.no_such_module.X"):
        adapters._load("..no_such_module", "X", "get_ddp_bucketed")


def test_resolver_without_a_checkout_gives_ours():
    from cs336report.flash import FlashAttention2PyTorch

    function, provenance = student.implementation("flash_pytorch")
    assert function is FlashAttention2PyTorch and provenance == student.BUILTIN


def test_resolver_gives_the_students_or_names_the_missing_adapter():
    found = student.implementation("flash_pytorch", entry(STUDENT_REPO))
    function, provenance = found
    assert function.__name__ == "TiledAttention" and function.__module__ == "cs336_systems.flash"
    assert provenance == "student_repo:get_flashattention_autograd_function_pytorch"
    missing = student.implementation("flash_triton", entry(STUDENT_REPO))
    assert not missing and missing.adapter == "get_flashattention_autograd_function_triton"
    assert "NotImplementedError" in missing.reason
    with pytest.raises(student.AdapterNotImplemented, match="get_flashattention_autograd_function_triton"):
        raise missing.error()
    sharded = student.implementation("sharded_optimizer", entry(STUDENT_REPO))
    with pytest.raises(student.AdapterNotImplemented, match="get_sharded_optimizer returned type"):
        student.call(sharded, [torch.nn.Parameter(torch.zeros(2))], torch.optim.SGD, lr=0.1)


def test_resolver_rejects_an_instance_where_a_class_is_due(tmp_path):
    repo = copy_repo(tmp_path)
    edit_adapter(repo, "    return TiledAttention\n", "    return TiledAttention()\n")
    found = student.implementation("flash_pytorch", entry(repo))
    assert not found and "not a torch.autograd.Function subclass" in found.reason


# ------------------------------------------------------------------ the check of a checkout


def test_the_config_names_the_checkout_without_importing_it(student_cfg):
    assert student_cfg.student == {"checkout": str(STUDENT_REPO), "name": "student_repo",
                                   "sha256_16": student.source_hash(STUDENT_REPO)}
    assert not [m for m in sys.modules if m.split(".")[0] in ("cs336_basics", "cs336_systems")
                or m.startswith("cs336report_student_adapters")]
    source = student_cfg.model_source  # the handout model's functions, where the checkout may have them
    assert source["optional_roles"] == ["attention", "softmax"] and len(source["sha256_16"]) == 16


def test_the_check_probes_the_student_checkout():
    found = checked(raw_config(STUDENT_REPO))["student"]
    verdicts = {name: v["status"] for name, v in found["adapters"].items()}
    assert verdicts == {"flash_pytorch": "implemented", "flash_triton": "not_implemented",
                        "ddp_individual_parameters": "implemented", "ddp_bucketed": "not_implemented",
                        "sharded_optimizer": "not_implemented"}
    flash = found["adapters"]["flash_pytorch"]
    assert flash["backward"] is True and flash["probe"] == "ran" and "max_abs_error" not in flash
    assert "returned type" in found["adapters"]["sharded_optimizer"]["reason"]
    assert found["name"] == "student_repo" and len(found["sha256_16"]) == 16


def test_editing_the_students_code_changes_every_cell_that_runs_it(tmp_path):
    """The student's code reaches the rules that run it through their cells: each carries the
    checkout's source hash, and the workflow passes a cell as a settings file named by its content
    (a param), so an edited checkout reruns those cells and no other."""
    import json

    from cs336report import experiments

    repo = copy_repo(tmp_path)

    def cells() -> dict[str, str]:
        student.load_adapters.cache_clear()
        cfg = Config.from_dict(raw_config(repo), cuda_available=False)
        return {f"{name}/{cell}": json.dumps(c, sort_keys=True)
                for name in experiments.names() for cell, c in experiments.cells(name, cfg).items()}

    before = cells()
    flash = repo / "cs336_systems" / "flash.py"
    flash.write_text(flash.read_text() + "\n# edited\n")
    after = cells()
    assert before.keys() == after.keys()
    changed = {key.split("/")[0] for key in before if before[key] != after[key]}
    carries = {key.split("/")[0] for key, text in before.items() if json.loads(text).get("student")}
    assert "handout_tests" in changed and changed == carries, (changed, carries)


def test_model_comes_from_the_checkout_unless_a_factory_is_named(student_cfg, tmp_path):
    source = checked(raw_config(STUDENT_REPO))["model_source"]
    assert source["factory"] == student.DEFAULT_FACTORY
    # its attention is in a profiler range; it has no nn_utils.softmax, so none is named
    assert source["attention"] == "cs336_basics.model:scaled_dot_product_attention" and "softmax" not in source
    assert "optional_roles" not in source
    assert str(STUDENT_REPO / "cs336-basics") in source["paths"]
    import cs336_basics

    assert Path(cs336_basics.__file__).resolve().is_relative_to(STUDENT_REPO)
    repo = copy_repo(tmp_path)
    shutil.rmtree(repo / "cs336-basics")
    sys.path[:] = [p for p in sys.path if "student_repo" not in p]  # nor installed: no model is found
    missing = Config.from_dict(raw_config(repo), cuda_available=False).model_source["missing"]
    assert missing.startswith("not run: no model found") and str(repo / "cs336-basics") in missing


def test_a_model_that_does_not_call_the_handouts_attention_runs_without_its_range(tmp_path):
    repo = copy_repo(tmp_path)
    model = repo / "cs336-basics" / "cs336_basics" / "model.py"
    call = "self.output_proj(scaled_dot_product_attention(q, k, v, mask)"
    assert call in model.read_text()
    model.write_text(model.read_text().replace(call, "self.output_proj(nn.functional.scaled_dot_product_attention("
                                                     "q, k, v, mask)"))
    source = checked(raw_config(repo))["model_source"]
    assert source["factory"] == student.DEFAULT_FACTORY and "attention" not in source


def test_course_repository_as_handed_out_is_all_not_implemented():
    found = checked(raw_config(COURSE_REPO))["student"]
    assert {v["status"] for v in found["adapters"].values()} == {"not_implemented"}


@pytest.mark.parametrize("edit, message", [
    (None, ".*nowhere. is not a folder"),
    (("def get_ddp_bucketed(module: torch.nn.Module, bucket_size_mb: float)", "def get_ddp_bucketed(module)"),
     "adapter get_ddp_bucketed .*restore the handout's signature"),
    (("import torch\n", "import torch\nimport no_such_package\n"), "importing .*no_such_package.*install"),
])
def test_a_broken_checkout_stops_the_config_or_its_check_naming_key_and_adapter(tmp_path, edit, message):
    repo = copy_repo(tmp_path)
    if edit is None:  # no folder: the config itself stops
        with pytest.raises(ConfigError, match=f"key 'student.checkout': {message}"):
            Config.from_dict(raw_config(tmp_path / "nowhere"), cuda_available=False)
        return
    edit_adapter(repo, *edit)
    Config.from_dict(raw_config(repo), cuda_available=False)  # it loads: its code is not run here
    with pytest.raises(ConfigError, match=f"key 'student.checkout': {message}"):
        checked(raw_config(repo))


# ------------------------------------------------------------------ experiments ask the resolver


def test_flash_benchmarking_runs_the_students_beside_ours_or_records_not_implemented(student_cfg, tmp_path):
    cells = flash_benchmarking.cells(student_cfg)  # the CPU grid runs flash_pytorch_eager: the student's row is added
    assert "student_pytorch-fp32" in cells and "student_triton-fp32" not in cells
    assert cells["flash_pytorch_eager-fp32"].get("student") is None  # ours: the reference row
    cell = {**cells["student_pytorch-fp32"], "seqs": [64], "d_heads": [16], "warmup_ms": 1, "rep_ms": 1}
    assert cell["student"] == student_cfg.student
    record = run_cell("flash_benchmarking", "student_pytorch-fp32", cell, tmp_path / "a.json")
    assert record["status"] == "ok"
    assert record["data"]["provenance"] == "student_repo:get_flashattention_autograd_function_pytorch"
    assert record["data"]["shapes"][0]["passes"]["forward_backward"]["status"] == "ok"
    ours = run_cell("flash_benchmarking", "flash_pytorch_eager-fp32", {**cell, "implementation": "flash_pytorch_eager",
                                                                       "student": None}, tmp_path / "b.json")
    assert ours["status"] == "ok" and ours["data"]["provenance"] == "built-in"
    cell = {**cell, "implementation": "student_triton"}
    record = run_cell("flash_benchmarking", "student_triton-fp32", cell, tmp_path / "c.json")
    assert record["status"] == "not_implemented"
    assert "get_flashattention_autograd_function_triton" in record["error"]


def test_without_a_checkout_no_student_rows():
    cfg = Config.from_dict(raw_config(), cuda_available=False)
    assert not [name for name in flash_benchmarking.cells(cfg) if name.startswith("student_")]


# ------------------------------------------------------------------ the workflow

REPO = Path(__file__).resolve().parent.parent


def dry_run(*configfiles: str) -> str:
    from conftest import snakemake

    # every job listed (--forceall), whatever results this checkout holds
    run = snakemake(REPO, "-n", "--forceall", "--nolock", "report", "--configfile", "workflow/config/default.yaml",
                    *configfiles)
    return run.returncode, run.stdout + run.stderr


def test_the_workflow_runs_the_students_code_with_one_config_line():
    code, output = dry_run("tests/fixtures/student_config.yaml")
    assert code == 0, output[-2000:]
    assert "results/flash_benchmarking/student_pytorch-fp32.json" in output
    for suite in ("attention", "ddp", "sharded_optimizer"):
        assert f"results/handout_tests/{suite}.xml" in output


def test_a_broken_checkout_stops_snakemake_before_any_job(tmp_path):
    from conftest import snakemake

    repo = copy_repo(tmp_path)
    edit_adapter(repo, "def get_sharded_optimizer(params, optimizer_cls", "def get_sharded_optimizer(optimizer_cls")
    config = tmp_path / "broken.yaml"
    config.write_text(f"student:\n  checkout: {repo}\n")
    code, output = dry_run(str(config))
    assert code == 0 and "rule check_student:" in output  # the DAG builds: the checkout's code is not run there
    # the first rule runs the checkout's code; every cell waits for it, so none starts
    run = snakemake(REPO, "--nolock", "report", "--configfile", "workflow/config/default.yaml", str(config))
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "failed: check_student" in output
    assert "key 'student.checkout'" in output and "adapter get_sharded_optimizer" in output
    assert "restore the handout's signature" in output and "Finished jobid" not in output


def test_leaderboard_entry_is_the_students_triton_and_not_implemented_is_a_row_status(student_cfg):
    from cs336report.experiments import flash_benchmarking as flash_leaderboard
    from cs336report.experiments.flash_benchmarking import leaderboard as flash_leaderboard_leaderboard

    raw = raw_config(STUDENT_REPO)
    cfg = Config.from_dict(raw, cuda_available=True)  # the GPU grid's cells (nothing runs here)
    cell = flash_leaderboard.leaderboard_cells(cfg)["leaderboard"]
    assert cell["implementations"][:2] == ["student_triton", "triton"] and cell["student"] == cfg.student
    assert flash_benchmarking_timing.classify(student.AdapterNotImplemented("x")) == "not_implemented"
    row = flash_benchmarking_timing._attempt(lambda: flash_leaderboard_leaderboard._leaderboard_row("student_triton", cell, torch.zeros(3, 1, 16, 16)),
                                       "cpu")
    assert row["status"] == "not_implemented" and "get_flashattention_autograd_function_triton" in row["error"]
