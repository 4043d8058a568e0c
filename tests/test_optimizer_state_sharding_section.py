"""optimizer_state_sharding's answer: without records of the handout's tests it says so and
gives the command that runs them (the section reads handout_tests records only)."""

import pytest

handout_tests = pytest.importorskip("cs336report.report.handout_tests")

from cs336report.report.render import RenderContext, environments  # noqa: E402

from cs336report.report.settings import RenderSettings
from cs336report.report.sections import optimizer_state_sharding as section  # noqa: E402


@pytest.mark.parametrize("mode", ["md", "html"])
def test_answer_without_test_records_says_not_run_and_how_to_run(tmp_path, mode):
    data = section.build(RenderContext([], RenderSettings.from_config({"_device": "cpu", "_grid": "cpu"}), tmp_path))
    assert not data["ran"] and data["implementation"].endswith("ShardedOptimizer")
    info = {"id": section.ID, "title": section.TITLE, "rules": list(section.EXPERIMENTS)}
    text = environments()[mode].get_template(f"answers/{section.ID}.j2").render(
        fmt_lib=f"_{mode}.j2", d=data, section=info)
    assert "snakemake --cores 1 --forcerun handout_tests -- report" in text and "ShardedOptimizer" in text
