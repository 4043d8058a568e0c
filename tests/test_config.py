import copy

import pytest
import yaml

from cs336report.config import DEFAULT_CONFIG, Config, ConfigError


@pytest.fixture
def raw():
    with open(DEFAULT_CONFIG) as fh:
        return yaml.safe_load(fh)


def test_default_config_is_valid_and_fills_defaults(raw):
    del raw["run"]["seed"]
    cfg = Config.from_dict(raw, cuda_available=False)
    assert cfg.run["seed"] == 0
    assert cfg.grid("benchmarking")["precisions"] == ["fp32"]


def test_device_auto_picks_the_grid(raw):
    assert Config.from_dict(raw, cuda_available=True).grid_name == "gpu"
    cpu = Config.from_dict(raw, cuda_available=False)
    assert cpu.grid_name == "cpu" and cpu.report_dir == "report/cpu"
    assert set(cpu.grid("benchmarking")["sizes"]) <= {"tiny", "mini"}


def test_an_experiment_set_to_null_is_not_run_in_that_grid(raw):
    from cs336report import experiments

    assert experiments.cells("compiled_model", Config.from_dict(raw, cuda_available=False))
    raw["grids"]["cpu"]["compiled_model"] = None
    cpu = Config.from_dict(raw, cuda_available=False)
    assert cpu.grid("compiled_model") is None and experiments.cells("compiled_model", cpu) == {}
    assert experiments.cells("compiled_model", Config.from_dict(raw, cuda_available=True))  # the GPU grid keeps it


def test_unknown_key_is_named_with_the_nearest_valid_key_on_one_line(raw):
    raw["run"]["warmup_stpes"] = 3
    with pytest.raises(ConfigError) as err:
        Config.from_dict(raw, cuda_available=False)
    assert str(err.value) == "config: unknown key 'run.warmup_stpes'; did you mean 'warmup_steps'?"


def test_unknown_key_names_the_file_that_set_it(tmp_path):
    from cs336report.config import load_files

    mine = tmp_path / "mine.yaml"
    mine.write_text("grids:\n  cpu:\n    benchmarkin: {sizes: [tiny], contexts: [8]}\n")
    files = [str(DEFAULT_CONFIG), str(mine)]
    with pytest.raises(ConfigError) as err:
        Config.from_dict(load_files(files), files=files, cuda_available=False)
    message = str(err.value)
    assert message.startswith(f"{mine}: unknown key 'grids.cpu.benchmarkin'; did you mean 'benchmarking'")
    assert "\n" not in message


def test_unknown_key_far_from_any_lists_the_valid_ones(raw):
    raw["run"]["zzzz"] = 1
    with pytest.raises(ConfigError, match=r"unknown key 'run\.zzzz'; valid keys here: .*measured_steps"):
        Config.from_dict(raw, cuda_available=False)


def test_broken_yaml_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  warmup_steps: 3\n grids: [\n")
    with pytest.raises(ConfigError, match=rf"^{bad}: not valid YAML at line 3"):
        Config.from_file(bad, cuda_available=False)


def test_empty_config_file_names_the_file(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match=rf"^{empty}: the file is empty"):
        Config.from_file(empty, cuda_available=False)


def test_cuda_without_a_cuda_device_stops_at_validation(raw, monkeypatch):
    from cs336report.config import validation
    from cs336report.machine.cuda import CudaDevices

    raw["device"] = "cuda"
    monkeypatch.setattr(validation, "devices", lambda: CudaDevices(False, 0, "2.13.0+cpu", "a CPU-only build"))
    with pytest.raises(ConfigError, match=r"key 'device': 'cuda', but this machine has no usable CUDA device "
                                          r"\(torch 2.13.0\+cpu, a CPU-only build\)"):
        Config.from_dict(raw, require_cuda=True)
    assert Config.from_dict(raw).device == "cuda"  # jobs that run elsewhere: not checked here
    monkeypatch.setattr(validation, "devices", lambda: CudaDevices(True, 1, "2.13.0", "CUDA 12.8"))
    assert Config.from_dict(raw, require_cuda=True).device == "cuda"


def test_the_device_is_asked_without_importing_torch_and_a_host_without_a_driver_has_none(monkeypatch):
    import subprocess
    import sys

    from cs336report.machine import cuda

    cuda.devices.cache_clear()
    monkeypatch.setattr(cuda, "DRIVER_FILES", ())
    monkeypatch.setattr(cuda.shutil, "which", lambda name: None)
    monkeypatch.setattr(cuda.sys, "platform", "linux")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("no driver: torch is not asked"))
    try:
        found = cuda.devices()
    finally:
        cuda.devices.cache_clear()
    assert found.available is False and found.count == 0
    monkeypatch.undo()  # a fresh process asks, with or without a driver, and keeps torch out of itself
    code = "import sys, cs336report.machine.cuda as c; c.devices(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_check_config_merges_files_and_names_the_bad_one(tmp_path, capsys):
    from cs336report.cli import main

    mine = tmp_path / "mine.yaml"
    mine.write_text("run: {measured_stepz: 3}\n")
    assert main(["check-config", str(DEFAULT_CONFIG), str(mine)]) == 2
    assert capsys.readouterr().err == f"error: {mine}: unknown key 'run.measured_stepz'; did you mean 'measured_steps'?\n"
    mine.write_text("run: {measured_steps: 3}\n")
    assert main(["check-config", str(DEFAULT_CONFIG), str(mine)]) == 0


def test_the_command_line_answers_a_missing_file_or_an_unknown_name_in_one_line(tmp_path, capsys):
    from cs336report.cli import main

    missing = tmp_path / "nowhere.yaml"
    assert main(["check-config", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: {missing}: cannot read the config file (No such file or directory)\n"
    assert main(["cells", "benchmarking", "--config", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {missing}: cannot read")
    assert main(["cells", "benchmark"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown experiment 'benchmark'; known: ") and "benchmarking," in err
    assert len(err.splitlines()) == 1


def test_the_command_line_has_a_version_and_lists_the_users_commands_apart(capsys):
    from cs336report import __version__
    from cs336report.cli import USER_COMMANDS, main

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out == f"cs336report {__version__}\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    mine, steps = text.split("commands to type:")[1].split("steps of the workflow")
    assert all(f"  {c} " in mine for c in USER_COMMANDS) and "  run " not in mine
    assert "  run " in steps and "  render " in steps and "  check-config " not in steps


@pytest.mark.parametrize("key,text,expect", [
    ("model", "model: {factory: no_such_package.model:LM}\n", "key 'model.factory': cannot import module"),
    ("student", "student: {checkout: /no/such/checkout}\n", "key 'student.checkout': '/no/such/checkout' is not a folder"),
])
def test_a_bad_model_or_checkout_names_the_file_that_set_it(tmp_path, raw, key, text, expect):
    """Loading the config names a checkout that is not there; the check step (which imports the
    user's code, as the check_student rule does) names a model that does not import: both name the file."""
    from cs336report.config import load_files
    from cs336report.student.check import check_config

    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    files = [str(DEFAULT_CONFIG), str(mine)]
    with pytest.raises(ConfigError) as err:
        cfg = Config.from_dict(load_files(files), source="--config", files=files, cuda_available=False)
        check_config(cfg.data.get("student"), cfg.model_source, cfg.device, "--config", list(cfg.files))
    assert str(err.value).startswith(f"{mine}: {expect}"), err.value


def test_unknown_size_is_named(raw):
    raw["grids"]["gpu"]["benchmarking"]["sizes"].append("huge")
    with pytest.raises(ConfigError, match=r"grids\.gpu\.benchmarking\.sizes\[5\].*'huge'"):
        Config.from_dict(raw, cuda_available=False)


@pytest.mark.parametrize("value", [0, -128])
def test_non_positive_context_is_named(raw, value):
    raw["grids"]["cpu"]["benchmarking"]["contexts"][1] = value
    with pytest.raises(ConfigError, match=r"grids\.cpu\.benchmarking\.contexts\[1\]"):
        Config.from_dict(raw, cuda_available=False)


def test_bad_enum_and_type(raw):
    bad = copy.deepcopy(raw)
    bad["grids"]["cpu"]["benchmarking"]["modes"] = ["backward_only"]
    with pytest.raises(ConfigError, match="modes"):
        Config.from_dict(bad, cuda_available=False)
    raw["run"]["tf32"] = "yes"
    with pytest.raises(ConfigError, match=r"run\.tf32"):
        Config.from_dict(raw, cuda_available=False)


def test_a_snakemake_config_error_names_the_files_and_the_key():
    """A value no config file sets (here from --config) is named with the files merged, not "--config" alone."""
    import subprocess
    import sys

    repo = DEFAULT_CONFIG.parents[2]
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config", "grid=nosuchgrid"],
                         cwd=repo, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert ("the config merged from workflow/config/default.yaml and --config: key 'grid': 'nosuchgrid'"
            in run.stdout + run.stderr), (run.stdout + run.stderr)[-2000:]
