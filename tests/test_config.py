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


def test_unknown_key_is_named(raw):
    raw["run"]["warmup_stpes"] = 3
    with pytest.raises(ConfigError, match=r"key 'run'.*warmup_stpes"):
        Config.from_dict(raw, cuda_available=False)


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
