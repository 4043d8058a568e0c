"""The problems answered by the handout's tests alone: one shared builder
(cs336report.report.sections.handout_tests) builds each one's part of the handout_tests records, with
its not-run reason and headline, and one template pair renders every one of them."""

import pytest

from cs336report import editions
from cs336report.report import handout_tests
from cs336report.report.render import RenderContext, environments
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import section as section_of

E2025 = editions.get(2025)
TESTED = [p for p in E2025.problems if p.answered_by_tests]

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
    sections = {p.id: section_of(p) for p in TESTED}
    assert set(sections) == {"flash_forward", "flash_backward", "naive_ddp", "ddp_overlap_individual_parameters",
                             "ddp_overlap_bucketed", "optimizer_state_sharding"}
    assert {s.TEMPLATE for s in sections.values()} == {"handout_tests"}  # one template pair for all six
    ctx = _ctx(tmp_path, [_record(TESTS)])
    for problem_id, section in sections.items():
        assert section.EXPERIMENTS == (handout_tests.EXPERIMENT,)
        data = section.build(ctx)
        assert data["id"] == problem_id
        assert data["ran"] == (problem_id in ("flash_forward", "naive_ddp"))
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
    assert not sharded["ran"] and sharded["ours"]["name"] == "cs336report.distributed.sharded_optimizer.ShardedOptimizer"


def test_a_problem_with_its_own_module_is_not_the_shared_builders():
    with pytest.raises(ValueError, match="not answered by the handout's tests alone"):
        from cs336report.report.sections import handout_tests as shared

        shared.section(E2025.problem("benchmarking_script"))


@pytest.mark.parametrize("problem", TESTED, ids=[p.id for p in TESTED])
def test_the_shared_templates_render_each_tested_problem(tmp_path, problem):
    """Each problem's answer has its registry sub-questions and outcome words, or its "not run" line, and
    its evidence its own heading and tests, in both outputs."""
    tests = [{"id": f"t{i}", "name": f"test_{problem.id}_{letter or 'all'}", "problem": problem.id,
              "subquestion": letter, "outcome": "passed", "seconds": 0.2, "message": "", "max_abs_error": 1e-06}
             for i, letter in enumerate(problem.subquestions or ("",))]
    section = section_of(problem)
    info = {"id": problem.id, "title": f"{problem.number}. {problem.id}"}
    evidence = {"id": f"evidence-{problem.id}", "title": problem.title}
    for records, ran in (([_record(tests)], True), ([_record([])], False)):
        data = section.build(_ctx(tmp_path, records))
        assert data["ran"] is ran
        for mode in ("md", "html"):
            env = environments()[mode]
            answer = env.get_template(f"answers/{section.TEMPLATE}.j2").render(fmt_lib=f"_{mode}.j2", d=data,
                                                                                section=info)
            shown = env.get_template(f"sections/{section.TEMPLATE}.j2").render(fmt_lib=f"_{mode}.j2", d=data,
                                                                                section=evidence)
            for part in problem.parts:
                if part.letter:
                    assert f"({part.letter}) {part.heading}" in answer, (problem.id, part.letter)
            assert problem.title.replace("_", "\\_" if mode == "md" else "_") in shown
            if ran:
                words = data["parts"][0]["what"]
                assert f"of {words}" in answer and "Not run" not in answer and "not-run" not in answer
                assert tests[0]["name"].replace("_", "\\_" if mode == "md" else "_") in shown
            elif problem.id != "naive_ddp":  # the handout has no test of naive DDP: its answer says so instead
                assert f"no handout test of {problem.id}".replace("_", "\\_" if mode == "md" else "_") in answer \
                    or f"no handout test of {problem.id}" in answer
            else:
                assert "The handout has no test of naive DDP" in answer


def test_the_naive_ddp_answer_says_what_was_checked_or_why_nothing_was(tmp_path):
    """The handout ships no test of naive DDP: with our suite's check recorded the answer gives its
    outcome; without it (a student's suite has none) it says so and names no command that would
    not change that."""
    section = section_of(E2025.problem("naive_ddp"))
    info = {"id": "naive_ddp", "title": "12. naive_ddp", "rules": list(section.EXPERIMENTS)}
    naive = [{**TESTS[2], "id": f"n{i}", "name": f"test_naive_ddp[{m}]", "max_abs_error": 3e-08}
             for i, m in enumerate(("mlp", "tied"))]
    for tests, expected, absent in (
            (naive, "Passed: all 2 tests of the naive DDP wrapper", "handout has no test"),
            (TESTS[:2], "The handout has no test of naive DDP", "Passed")):
        data = section.build(_ctx(tmp_path, [_record([{**t, "implementation": "built-in", "source": "s"}
                                                       for t in tests])]))
        for mode in ("md", "html"):
            text = environments()[mode].get_template("answers/handout_tests.j2").render(
                fmt_lib=f"_{mode}.j2", d=data, section=info)
            assert expected in text and absent not in text
            assert "Not run" not in text and "was recorded" not in text


@pytest.mark.parametrize("mode", ["md", "html"])
def test_optimizer_state_sharding_without_test_records_says_not_run_and_how_to_run(tmp_path, mode):
    section = section_of(E2025.problem("optimizer_state_sharding"))
    data = section.build(RenderContext([], RenderSettings.from_config({"_device": "cpu", "_grid": "cpu"}), tmp_path))
    assert not data["ran"] and data["ours"]["name"].endswith("ShardedOptimizer")
    info = {"id": "optimizer_state_sharding", "title": "optimizer_state_sharding", "rules": list(section.EXPERIMENTS)}
    text = environments()[mode].get_template("answers/handout_tests.j2").render(
        fmt_lib=f"_{mode}.j2", d=data, section=info)
    assert "snakemake --cores 1 --forcerun handout_tests -- report" in text and "ShardedOptimizer" in text


def test_the_design_lines_name_our_code():
    """Every name the design lines set as code is in the implementation they describe (a file named
    there exists; any other name is in the source of cs336report/flash or cs336report/distributed), and
    each line is one sentence."""
    import re
    from pathlib import Path

    from cs336report.report.sections.handout_tests import DESIGN

    repo = Path(__file__).resolve().parent.parent
    source = "".join(f.read_text() for folder in ("flash", "distributed")
                     for f in sorted((repo / "cs336report" / folder).glob("*.py")))
    assert set(DESIGN) == {p.id for p in TESTED}
    for problem in TESTED:
        keys = {p.letter or "all" for p in problem.parts} | {"all"}
        assert set(DESIGN[problem.id]) <= keys, problem.id
    for problem, parts in DESIGN.items():
        for sentence in (s for lines in parts.values() for s in lines):
            assert sentence.count("`") % 2 == 0 and sentence.endswith("."), sentence
            assert not re.search(r"\. [A-Z]", sentence), sentence  # one sentence
            for name in sentence.split("`")[1::2]:
                assert (repo / name).exists() if "/" in name else name in source, (problem, name)


def test_the_design_lines_are_ours_and_left_out_for_a_students_code(tmp_path):
    """Our design lines stand under their sub-question; where the tests ran a student's code they are not shown."""
    from cs336report.report.sections.handout_tests import DESIGN

    forward = next(p for p in TESTED if p.id == "flash_forward")
    data = section_of(forward).build(_ctx(tmp_path, [_record(TESTS)]))
    template = environments()["md"].get_template("answers/handout_tests.j2")
    info = {"id": forward.id, "title": forward.title, "command": "snakemake"}
    text = template.render(fmt_lib="_md.j2", d=data, section=info)
    part_a, rest = text.split('id="flash_forward-b"')
    part_b = rest.split('id="flash_forward-c"')[0]
    assert "`flash_fwd_kernel`" in part_b and "FlashAttention2PyTorch" not in part_b
    assert "FlashAttention2PyTorch" in part_a and DESIGN["flash_forward"]["a"][0][-40:] in part_a
    student = template.render(fmt_lib="_md.j2", d={**data, "student": True}, section=info)
    assert "fwd_kernel" not in student and "FlashAttention2PyTorch" not in student and "Passed" in student
