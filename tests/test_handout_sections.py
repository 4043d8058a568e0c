"""The sections answered by the handout's tests alone: each builds its problem's part of the
handout_tests records through handout_tests.build_problem, and shares its not-run reason and
headline."""

from cs336report.report import handout_tests
from cs336report.report.render import RenderContext
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import SECTIONS

TESTS = [
    {"id": "a", "name": "test_forward_pytorch", "problem": "flash_forward", "subquestion": "a", "outcome": "passed",
     "seconds": 0.5, "message": "", "max_abs_error": 2.5e-07},
    {"id": "b", "name": "test_forward_triton", "problem": "flash_forward", "subquestion": "b", "outcome": "failed",
     "seconds": 0.1, "message": "AssertionError: not close", "max_abs_error": None},
    {"id": "c", "name": "test_ddp[ToyModel]", "problem": "naive_ddp", "subquestion": "", "outcome": "passed",
     "seconds": 1.0, "message": "", "max_abs_error": None},
]


def _ctx(tmp_path, records):
    return RenderContext(records, RenderSettings.from_config({"_device": "cpu", "_grid": "cpu"}), tmp_path)


def _record(tests):
    return {"experiment": handout_tests.EXPERIMENT, "cell": "suite", "status": "ok", "config": {},
            "data": {"tests": tests}, "_path": "results/handout_tests/suite.json"}


def test_every_handout_test_section_builds_its_problems_part(tmp_path):
    sections = {m.ID: m for m in SECTIONS if m.EXPERIMENTS == (handout_tests.EXPERIMENT,)}
    assert {"flash_forward", "flash_backward", "naive_ddp", "ddp_overlap_individual_parameters",
            "ddp_overlap_bucketed", "optimizer_state_sharding"} <= set(sections)
    ctx = _ctx(tmp_path, [_record(TESTS)])
    for section in sections.values():
        data = section.build(ctx)
        assert data["ran"] == (section.ID in ("flash_forward", "naive_ddp"))
        assert section.skip_reason(ctx) == "this run has no records of the handout's tests"
    forward = sections["flash_forward"].build(ctx)
    assert forward["subs"]["a"]["passed"] == 1 and forward["subs"]["b"]["failed"] == 1
    assert forward["subs"]["c"] is None
    assert sections["flash_forward"].headline(forward) == [  # each sub-question with tests, as its answer says it
        "Passed: the handout test of the tiled PyTorch forward",
        "0 of 1 handout tests of the Triton forward kernel passed, 1 failed"]
    assert sections["naive_ddp"].headline(sections["naive_ddp"].build(ctx))[0] == "Passed: the test of the naive DDP wrapper"
    assert sections["flash_backward"].headline(sections["flash_backward"].build(ctx)) == []
    sharded = sections["optimizer_state_sharding"].build(ctx)
    assert not sharded["ran"] and sharded["implementation"] == sections["optimizer_state_sharding"].IMPLEMENTATION


def test_the_naive_ddp_answer_says_what_was_checked_or_why_nothing_was(tmp_path):
    """The handout ships no test of naive DDP: with our suite's check recorded the answer gives its
    outcome; without it (a student's suite has none) it says so and names no command that would
    not change that."""
    from cs336report.report.render import environments

    section = {m.ID: m for m in SECTIONS}["naive_ddp"]
    info = {"id": section.ID, "title": section.TITLE, "rules": list(section.EXPERIMENTS)}
    naive = [{**TESTS[2], "id": f"n{i}", "name": f"test_naive_ddp[{m}]", "max_abs_error": 3e-08}
             for i, m in enumerate(("mlp", "tied"))]
    for tests, expected, absent in (
            (naive, "Passed: all 2 tests of the naive DDP wrapper", "handout has no test"),
            (TESTS[:2], "The handout has no test of naive DDP", "Passed")):
        data = section.build(_ctx(tmp_path, [_record([{**t, "implementation": "built-in", "source": "s"}
                                                       for t in tests])]))
        for mode in ("md", "html"):
            text = environments()[mode].get_template("answers/naive_ddp.j2").render(
                fmt_lib=f"_{mode}.j2", d=data, section=info)
            assert expected in text and absent not in text
            assert "Not run" not in text and "was recorded" not in text
