"""The edition registry (cs336report/editions): the 2025 entry states what the rest of the project
states beside it (the published report's problems and headings, the section modules' experiments,
the config's handout grid, sizes and run settings, the adapters, the handout test suites), the 2026
entry what the 2026 handout states, and a broken edition file is an error naming the file and the
field."""

import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from cs336report import editions
from cs336report.config import handout_grid
from cs336report.experiments import handout_tests
from cs336report.experiments.handout_tests.suite import classify
from cs336report.report.sections import section
from cs336report.student import adapters
from cs336report.student import resolve as student

REPO = Path(__file__).resolve().parent.parent
DEFAULT = yaml.safe_load((REPO / "workflow/config/default.yaml").read_text())
CONFIG_SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
E2025 = editions.get(2025)
E2026 = editions.get(2026)


def test_the_registry_knows_both_editions_and_names_the_others():
    assert editions.known() == (2025, 2026)
    assert editions.get("2026") is E2026
    with pytest.raises(KeyError, match="known: 2025, 2026"):
        editions.get(2024)


def test_totals_are_the_handouts():
    assert (len(E2025.problems), E2025.points) == (21, 107)
    assert (len(E2026.problems), E2026.points) == (27, 137)
    by_section = {}
    for p in E2026.problems:
        top = int(p.section.split(".")[0])
        by_section[top] = by_section.get(top, 0) + p.points
    assert by_section == {2: 16, 3: 4, 4: 29, 5: 21, 6: 20, 7: 20, 8: 17, 9: 10}
    dropped = set(E2025.order) - set(E2026.order)
    added = set(E2026.order) - set(E2025.order)
    assert dropped == {"ddp_overlap_bucketed", "ddp_bucketed_benchmarking", "communication_accounting"}
    assert sum(E2025.problem(p).points for p in dropped) == 21
    assert sum(E2026.problem(p).points for p in added) == 51


# --------------------------------------------------------------------------- 2025 against today's code


def test_2025_problems_are_the_published_reports_in_order():
    answers = (REPO / "report/answers.md").read_text()
    headings = re.findall(r"^## (\d+)\. (\S+) \((\d+) pts?\)$", answers, re.MULTILINE)
    assert [(int(n), name.replace("\\_", "_"), int(points)) for n, name, points in headings] == [
        (p.number, p.id, p.points) for p in E2025.problems]


def test_2025_problems_read_the_section_modules_experiments():
    for p in E2025.problems:
        module = section(p)
        assert tuple(module.EXPERIMENTS) == p.experiments, p.id


def test_2025_benchmarking_settings_are_the_configs_run_settings():
    run = DEFAULT["run"]
    assert E2025.benchmarking == {"warmup_steps": run["warmup_steps"], "measured_steps": run["measured_steps"],
                                  "batch_size": run["batch_size"], "tf32": run["tf32"]}


def test_2025_headings_are_the_published_reports():
    answers = (REPO / "report/answers.md").read_text()
    for p in E2025.problems:
        for part in p.parts:
            if part.letter:
                heading = part.heading.replace("_", "\\_")
                assert f"**({part.letter}) {heading}**" in answers, (p.id, part.letter)


def test_the_handout_grid_is_the_registrys_with_the_configs_changes():
    """The config's handout grid is the edition's (default.yaml states none of its own); a change laid
    over it replaces lists and drops an experiment set to null."""
    assert "handout" not in DEFAULT["grids"]
    for year in (2025, 2026):
        assert handout_grid(DEFAULT["grids"], year) == editions.get(year).handout_grid
    changed = handout_grid({"handout": {"roofline": None, "benchmarking": {"contexts": [128]}}}, 2026)
    assert changed["roofline"] is None and changed["benchmarking"]["contexts"] == [128]
    assert changed["benchmarking"]["sizes"] == ["small", "medium", "large", "xl", "10B"]


def test_the_configs_sizes_are_the_editions_table_and_the_small_models():
    from cs336report.config import edition_sizes

    assert set(DEFAULT["sizes"]) == {"tiny", "mini"}  # Table 1 comes from the registry
    for edition in (E2025, editions.get(2026)):
        sizes = edition_sizes(DEFAULT["sizes"], edition.id)
        assert list(sizes)[:5] == [m.name for m in edition.models]
        assert all(sizes[m.name] == m.as_config() for m in edition.models)
    override = edition_sizes({"xl": {"d_model": 8, "d_ff": 16, "num_layers": 1, "num_heads": 1}}, 2026)
    assert override["xl"]["d_model"] == 8 and override["10B"]["d_model"] == 4608


def test_2025_adapters_are_ours_and_the_resolvers_pieces():
    assert tuple(a.name for a in E2025.adapters) == adapters.NAMES
    pieces = E2025.pieces
    assert list(pieces) == list(student.PIECES)
    for name, piece in student.PIECES.items():
        ours = pieces[name]
        assert ours.adapter.name == piece.adapter
        assert ours.adapter.returns == piece.kind
        assert ours.problems[0] == piece.problem
        assert tuple(h.name for h in ours.hooks) == piece.hooks
        call = ours.adapter.positional + ours.adapter.keywords
        assert call[:len(piece.args)] == piece.args


def test_2025_test_suites_are_the_handout_tests_experiments():
    suites = E2025.test_suites()
    assert tuple(s.name for s in suites) == handout_tests.SUITES
    for s in suites:
        assert sorted(f.file for f in s.files) == sorted(handout_tests.STUDENT_FILES[s.name])
        for case in s.cases:
            assert classify(case.name, s.name) == (case.problem, case.subquestion, case.piece), case.name
    assert E2025.handout_grid["handout_tests"]["suites"] == [s.name for s in suites]


# --------------------------------------------------------------------------- both editions


@pytest.mark.parametrize("edition", [E2025, E2026], ids=["2025", "2026"])
def test_experiments_exist_and_planned_ones_do_not(edition):
    rules = set()
    for path in (REPO / "workflow/rules").glob("*.smk"):
        rules |= set(re.findall(r"^rule (\w+):", path.read_text(), re.MULTILINE))
    for p in edition.problems:
        assert set(p.experiments) <= rules, (p.id, set(p.experiments) - rules)
        assert not set(p.planned) & rules, (p.id, "planned but exists", set(p.planned) & rules)
    assert set(edition.handout_grid) <= rules


@pytest.mark.parametrize("edition", [E2025, E2026], ids=["2025", "2026"])
def test_handout_grid_has_the_configs_shape(edition):
    grid = edition.handout_grid
    if edition.id == 2026:  # the fsdp suite is new: the config's handout_tests knows three suites
        assert grid.pop("handout_tests")["suites"] == [s.name for s in edition.test_suites()]
    schema = {"$ref": "#/$defs/grid", "$defs": CONFIG_SCHEMA["$defs"]}
    jsonschema.validate(grid, schema, cls=jsonschema.Draft202012Validator)
    sizes = {m.name for m in edition.models}
    for name, cells in grid.items():
        named = cells.get("sizes", []) + ([cells["size"]] if "size" in cells else [])
        assert set(named) <= sizes, (name, set(named) - sizes)


@pytest.mark.parametrize("edition, counts", [
    (E2025, {"small": 128_625_408, "medium": 423_183_360, "large": 969_411_840, "xl": 1_998_235_200,
             "2.7B": 3_406_809_600}),
    (E2026, {"small": 128_625_408, "medium": 423_183_360, "large": 969_411_840, "xl": 3_406_809_600,
             "10B": 12_832_823_808}),
], ids=["2025", "2026"])
def test_model_tables_give_the_parameter_counts_worked_out_by_hand(edition, counts):
    def params(m):  # untied embedding and lm_head, attention, SwiGLU, two norms a block, a final norm
        d, f = m.d_model, m.d_ff
        return 2 * edition.vocab_size * d + m.num_layers * (4 * d * d + 3 * d * f + 2 * d) + d

    assert {m.name: params(m) for m in edition.models} == counts


def test_the_2026_leaderboard_model_is_the_8b_one():
    m = E2026.problem("leaderboard").fixed["model"]
    d, f, L, V = m["d_model"], m["d_ff"], m["num_layers"], m["vocab_size"]
    assert 2 * V * d + L * (4 * d * d + 3 * d * f + 2 * d) + d == 8_125_698_048


@pytest.mark.parametrize("edition", [E2025, E2026], ids=["2025", "2026"])
def test_sizes_a_problem_fixes_are_in_the_model_table(edition):
    sizes = {m.name for m in edition.models}
    for p in edition.problems:
        fixed = p.fixed
        named = fixed.get("sizes", []) + ([fixed["size"]] if "size" in fixed else [])
        assert set(named) <= sizes, (p.id, set(named) - sizes)


def test_2026_renames_sizes_and_its_xl_is_2025s_2_7b():
    assert E2026.model("xl").as_config() == E2025.model("2.7B").as_config()
    assert E2026.model("xl").as_config() != E2025.model("xl").as_config()
    assert E2026.model("xl").d_head == 80 and E2026.model("10B").d_head == 128
    with pytest.raises(KeyError, match="2.7B"):
        E2026.model("2.7B")
    assert E2026.context_length == 512 and E2025.context_length is None


def test_2026_answered_by_tests_and_pieces():
    tested = [p.id for p in E2026.problems if p.answered_by_tests]
    assert tested == ["flash_forward", "flash_backward", "naive_ddp", "ddp_overlap_individual_parameters",
                      "optimizer_state_sharding", "fsdp"]
    fsdp = E2026.pieces["fsdp"]
    assert fsdp.adapter.name == "get_fsdp" and fsdp.adapter.keywords == ("compute_dtype",)
    assert [h.name for h in fsdp.hooks] == ["fsdp_on_after_backward", "fsdp_gather_full_params"]
    assert E2026.pieces["ddp_individual_parameters"].adapter.name == "get_ddp"
    assert "ddp_bucketed" not in E2026.pieces


def test_shared_problems_keep_their_sub_questions_except_where_2026_changed_them():
    for p in E2026.problems:
        if p.id in E2025.order and p.id != "memory_profiling":
            assert p.subquestions == E2025.problem(p.id).subquestions, p.id
    assert E2026.problem("memory_profiling").subquestions == tuple("abcdef")
    assert str(E2026.problem("memory_profiling").part("f").form[1]) == "1-2 paragraphs"


def test_test_suites_by_release():
    names = lambda e, r: [c.name for s in e.test_suites(r) for c in s.cases]  # noqa: E731
    assert len(names(E2025, "1.0.0")) == 15 and "test_flash_forward_pass_triton" in names(E2025, "1.0.0")
    assert len(names(E2025, "1.0.1")) == 16 and "test_flash_forward_pass_triton[True]" in names(E2025, "1.0.5")
    assert E2025.tests_release("1.0.3") == "1.0.3"
    assert len(names(E2026, None)) == 14
    assert E2026.tests_release("26.1.9") == "26.1.4"  # newer than any known: the newest known's tests
    assert E2026.tests_release("26.1.3") == "26.1.3"
    # 26.1.2 loosened the FSDP equality checks: the same cases, another check from that release on
    fsdp = lambda r: {c.name: c.checks for c in E2026.suite("fsdp", r).cases}  # noqa: E731
    assert list(fsdp("26.1.1")) == list(fsdp("26.1.2")) == [
        "test_fsdp_correctness[fp32]", "test_fsdp_correctness[fp16]",
        "test_fsdp_gradient_sync[fp32]", "test_fsdp_gradient_sync[fp16]"]
    assert "torch.equal" in fsdp("26.1.1")["test_fsdp_correctness[fp32]"]
    assert "atol = 1e-6, rtol = 1e-4" in fsdp("26.1.2")["test_fsdp_correctness[fp32]"]
    assert "equal on both ranks" in fsdp("26.1.1")["test_fsdp_gradient_sync[fp16]"]
    assert "within 1e-4" in fsdp("26.1.4")["test_fsdp_gradient_sync[fp16]"]
    with pytest.raises(ValueError, match="not a release of the 2025 edition"):
        E2025.test_suites("26.1.1")
    causal = E2026.suite("attention").case("test_flash_forward_pass_triton[True]")
    assert (causal.problem, causal.subquestion, causal.device) == ("flash_forward", "c", "cuda")


def test_the_registry_imports_no_torch():
    code = ("import sys; from cs336report import editions; [editions.get(y) for y in editions.known()]; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# --------------------------------------------------------------------------- broken edition files


def _edit(tmp_path, change) -> Path:
    raw = yaml.safe_load((REPO / "cs336report/editions/2025.yaml").read_text())
    change(raw)
    path = tmp_path / "2025.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _swap_numbers(raw):
    raw["problems"][1]["number"] = 3


@pytest.mark.parametrize("change, field, message", [
    (lambda r: r["problems"][0].update(points="four"), "problems[0].points", "not of type 'integer'"),
    (lambda r: r["problems"][2].pop("points"), "problems[2]", "'points' is a required property"),
    (lambda r: r["problems"][4]["parts"][1].update(form={"essay": 1}), "problems[4].parts[1].form",
     "'essay' was unexpected"),
    (lambda r: r["models"][0].update(heads=12), "models[0]", "'heads' was unexpected"),
    (lambda r: r["totals"].update(points=108), "totals.points", "add up to 107"),
    (_swap_numbers, "problems[1].number", "is problem 2"),
    (lambda r: r["problems"][1]["parts"][1].update(letter="c"), "problems[1].parts[1].letter", "in order"),
    (lambda r: r["problems"][0]["parts"][0].pop("heading"), "problems[0].parts[0]", "has no heading"),
    (lambda r: r["problems"][7].pop("rule"), "problems[7].rule", "handout_tests"),
    (lambda r: r["handout_grid"].update(leaderboard={}), "handout_grid.leaderboard", "no problem reads"),
    (lambda r: r["adapters"][3].update(problems=["naive_ddp"]), "adapters[3].problems", "only it"),
    (lambda r: r["test_suites"][0]["files"][0]["cases"][0].update(subquestion="d"),
     "test_suites[0].files[0].cases[0].subquestion", "not 'd'"),
    (lambda r: r["test_suites"][0]["files"][0]["cases"][0].update(until="1.0.9"),
     "test_suites[0].files[0].cases[0].until", "not one of the releases"),
    (lambda r: r["releases"].append("26.0.0"), "releases[6]", "version line 1.0"),
])
def test_a_broken_edition_names_the_file_and_the_field(tmp_path, change, field, message):
    path = _edit(tmp_path, change)
    with pytest.raises(editions.EditionError) as err:
        editions.load(path)
    text = str(err.value)
    assert text.startswith(f"{path}: {field}: "), text
    assert message in text, text


def test_a_file_that_is_not_yaml_names_the_file(tmp_path):
    path = tmp_path / "2027.yaml"
    path.write_text("id: 2027\nproblems: [unclosed\n")
    with pytest.raises(editions.EditionError, match=re.escape(f"{path}: not valid YAML")):
        editions.load(path)
