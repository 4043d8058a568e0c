"""nsys_profile answered from training-step profiles alone: the forward pass is their forward range."""

from pathlib import Path

import pytest

from cs336report.config import DEFAULT_CONFIG, Config, load_files
from cs336report.records.store import load
from cs336report.report.render import RenderContext, environments
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import nsys_profile as section
from cs336report.report.sections.nsys_profile.frames import forward_source

FIXTURE = Path(__file__).parent / "fixtures" / "nsys_step_h200"


def _build(tmp_path, modes: tuple[str, ...]) -> dict:
    cfg = Config.from_dict(load_files([DEFAULT_CONFIG]), cuda_available=True)
    records = [load(p) for p in sorted(FIXTURE.glob("*/*.json.gz"))]
    records = [r for r in records if r["experiment"] != "nsys_profile" or r["config"]["mode"] in modes]
    figures = tmp_path / "-".join(modes)
    figures.mkdir()
    return section.build(RenderContext(records, RenderSettings.from_config({**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}), figures))


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("nsys")
    return _build(tmp, ("forward", "train_step")), _build(tmp, ("train_step",))


def test_the_training_steps_forward_range_gives_the_forward_only_answers(both):
    full, step = both
    assert not full["timing"]["from_step"] and step["timing"]["from_step"]
    assert step["timing"]["range"]["n"] == full["timing"]["range"]["n"] == 4
    assert step["top"]["names"] == full["top"]["names"] and step["top"]["n_gemm"] == full["top"]["n_gemm"]
    assert step["ref"] == full["ref"]
    assert [k["name"] for k in step["non_gemm"][:3]] == [k["name"] for k in full["non_gemm"][:3]]
    # the GEMM share of the forward pass: the range inside a step against a forward-only run, same kernels
    assert step["shift"]["n"] == full["shift"]["n"] == 4 and step["shift"]["train"] == full["shift"]["train"]
    lo = lambda s: float(s["fwd"].split(" ")[0])  # noqa: E731
    assert lo(step["shift"]) == pytest.approx(lo(full["shift"]), abs=1.0)
    assert step["attention"] and full["attention"]


def test_the_tables_name_the_forward_range_they_read(both):
    full, step = both
    assert "GEMM, forward range of the step" in step["shift_table"].columns
    assert "GEMM, forward only" in full["shift_table"].columns
    assert "share, forward range of the step" in step["gain_table"].columns


def test_a_training_step_gives_no_launch_count_per_forward(both):
    _, step = both
    assert "launches" not in step["timing"]["slowdown"]
    launches = step["profiling_table"].columns.index("kernel launches per forward")
    assert {str(row[launches].text) for row in step["profiling_table"].rows} == {"–"}


@pytest.mark.parametrize("mode", ["md", "html"])
def test_the_answer_says_where_the_forward_pass_came_from(both, mode):
    full, step = both
    info = {"id": "nsys_profile", "title": "nsys_profile", "rules": list(section.EXPERIMENTS), "command": "x"}
    render = lambda d: environments()[mode].get_template("answers/nsys_profile.j2").render(  # noqa: E731
        fmt_lib=f"_{mode}.j2", d=d, section=info)
    text, plain = render(step), render(full)
    assert "NVTX range of each profiled training step" in text and "Not run" not in text
    assert "NVTX range of each profiled training step" not in plain


def test_forward_source_prefers_forward_only_cells():
    import pandas as pd

    assert forward_source(pd.DataFrame({"mode": ["train_step", "forward"]})) == "forward"
    assert forward_source(pd.DataFrame({"mode": ["train_step"]})) == "train_step"
    assert forward_source(pd.DataFrame()) == "train_step"
    # forward cells that all failed leave the steps' forward range to answer, as in the kernel frame
    assert forward_source(pd.DataFrame({"mode": ["forward", "train_step"], "status": ["oom", "ok"]})) == "train_step"


def test_the_class_figure_draws_the_forward_range_of_the_steps(tmp_path):
    from cs336report.report.sections.nsys_profile.frames import cell_frame, class_frame
    from cs336report.report.sections.nsys_profile.kernels import class_figure

    records = [load(p) for p in sorted((FIXTURE / "nsys_profile").glob("*train_step.json.gz"))]
    fig = class_figure(class_frame(records), cell_frame(records, []))
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [
        "forward pass (its forward range)", "training step"]
    forward, step = (ax for ax in fig.axes if ax.get_title())
    assert len(forward.patches) == len(step.patches) > 0
