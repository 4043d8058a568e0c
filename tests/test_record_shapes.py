"""Each experiment's data has a declared shape, checked when a record is saved and loaded; the render's
settings travel as one object, built from the config the report rule passes."""

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from cs336report.config import DEFAULT_CONFIG, reference_grids
from cs336report.records import shapes
from cs336report.records.store import SCHEMA, ResultError, load, save
from cs336report.report.checks import cut_down_grid
from cs336report.report.settings import RenderSettings

REPO = Path(__file__).resolve().parent.parent
PUBLISHED = sorted((REPO / "report/data").glob("*/*.json.gz"))


def _record(experiment="roofline", status="ok", **data):
    return {"schema": SCHEMA, "experiment": experiment, "cell": "c", "status": status, "error": None,
            "config": {}, "data": data, "provenance": {}}


def test_every_published_record_has_its_experiments_shape():
    assert PUBLISHED
    for path in PUBLISHED:
        record = load(path)  # raises on a record not of its shape
        typed = shapes.typed(record)
        assert isinstance(typed, shapes.SHAPES[record["experiment"]])


def test_every_experiment_of_the_published_records_is_declared():
    assert {p.parent.name for p in PUBLISHED} <= set(shapes.SHAPES)


def test_a_record_missing_a_required_field_is_not_saved_and_the_message_names_file_and_field(tmp_path):
    out = tmp_path / "roofline" / "c.json"
    with pytest.raises(ResultError, match=r"c\.json: data\.matmul: missing"):
        save(_record(copy={}), out)
    assert not out.exists()
    save(_record(copy={}, matmul={}), out)
    assert load(out)["data"] == {"copy": {}, "matmul": {}}


def test_a_field_of_the_wrong_type_or_undeclared_fails_on_load(tmp_path):
    import json

    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_record(copy={}, matmul=[1])))
    with pytest.raises(ResultError, match=r"bad\.json: data\.matmul: is list, expected dict"):
        load(path)
    path.write_text(json.dumps(_record(copy={}, matmul={}, extra=1)))
    with pytest.raises(ResultError, match=r"data\.extra: not a field of Roofline"):
        load(path)
    path.write_text(json.dumps(_record(experiment="not_an_experiment")))
    with pytest.raises(ResultError, match="no declared shape for experiment 'not_an_experiment'"):
        load(path)


def test_a_bool_is_not_an_int_and_an_int_is_a_float():
    with pytest.raises(shapes.ShapeError, match="n: is bool"):
        shapes.check("mixed_precision_accumulation", "error", {"n": True})
    shapes.check("mixed_precision_accumulation", "error", {"step": 1})


def test_a_failed_record_keeps_what_it_measured_and_requires_nothing(tmp_path):
    save(_record(experiment="pytorch_attention", status="oom", oom_phase="backward", matrix_bytes=4),
         tmp_path / "oom.json")
    typed = shapes.typed(load(tmp_path / "oom.json"))
    assert typed.oom_phase == "backward" and typed.matrix_bytes == 4 and typed.forward_s is None
    with pytest.raises(ResultError, match="data.oom_phase: is int"):
        save(_record(experiment="pytorch_attention", status="oom", oom_phase=3), tmp_path / "oom.json")


def test_optional_fields_are_those_an_older_record_may_lack():
    fields = {f.name: f.default is dataclasses.MISSING for f in dataclasses.fields(shapes.StepTimes)}
    assert fields["stats_s"] and not fields["repeats"]


def test_render_settings_are_read_from_the_config_the_rule_passes():
    config = {"_grid": "handout", "_device": "cuda", "_expected": {"roofline": ["a", "b"]},
              "_gpu_grid": {"naive_ddp_benchmarking": 2}, "grids": {"handout": {"roofline": {"x": 1}}}}
    settings = RenderSettings.from_config(config)
    assert (settings.grid, settings.device, settings.cuda) == ("handout", "cuda", True)
    assert settings.expected == {"roofline": {"a": None, "b": None}}
    assert dict(settings.gpu_grid) == {"naive_ddp_benchmarking": 2}
    assert settings.grid_of("roofline") == {"x": 1} and settings.grid_of("benchmarking") is None
    assert "_grid" not in settings.config and settings.config["grids"] == config["grids"]
    # no grid named: the device's own, as `grid: auto` picks it
    assert RenderSettings.from_config({"_device": "cuda"}).grid == "gpu"
    assert RenderSettings.from_config({}).grid == "cpu"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.grid = "cpu"


def test_a_cut_down_grid_is_told_from_the_settings_alone(monkeypatch, tmp_path):
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["_reference_grids"] = reference_grids()
    config["grids"]["gpu"]["benchmarking"]["contexts"] = [128]
    settings = RenderSettings.from_config(config)
    # the report reads no config file: the default grids came with the config
    monkeypatch.setattr("cs336report.config.grids.DEFAULT_CONFIG", tmp_path / "absent.yaml")
    assert cut_down_grid(settings) == ["benchmarking contexts: 1 of 4"]
