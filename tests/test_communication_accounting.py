"""communication_accounting: the XXL arithmetic, checked against the definitions it rests on
(parameter count from the shapes, the memory bound met at N_FSDP and missed just below it, the
forward pass compute bound exactly from the batch the derivation gives)."""

import json
import math

import pytest

from cs336report.accounting.distributed import (XXL, communication_accounting, data_parallel_bytes,
                                                fsdp_bytes_per_device, forward_times, part_a, part_b, part_c, part_d)
from cs336report.experiments import communication_accounting as experiment
from cs336report.report.settings import RenderSettings
from helpers import without_record_links


def _values(steps):
    return {s.name: s.value for s in steps}


def test_parameters_and_state_of_the_handouts_xxl():
    a = _values(part_a(XXL()))
    linear = 16384 * 53248  # one d_model x d_ff weight
    assert a["P (parameters)"] == 126 * 2 * linear
    assert a["weights + gradients + optimizer state"] == 16 * a["P (parameters)"]
    needed = a["H100s for these (80 GB each)"]
    assert (needed - 1) * 80e9 < a["weights + gradients + optimizer state"] <= needed * 80e9


def test_activations_scale_with_tokens_and_count_both_linear_inputs():
    one, two = _values(part_a(XXL(tokens=1))), _values(part_a(XXL(tokens=2)))
    assert two["activations A (saved for backward)"] == 2 * one["activations A (saved for backward)"]
    assert one["activations A (saved for backward)"] == 126 * (16384 + 53248) * 2


@pytest.mark.parametrize("tokens", [1, 2048, 8192])
def test_smallest_fsdp_degree_fits_and_one_less_does_not(tokens):
    c = XXL(tokens=tokens)
    n = _values(part_b(c))["smallest N_FSDP"]
    assert fsdp_bytes_per_device(c, n) < c.tpu_bytes <= fsdp_bytes_per_device(c, n - 1)


def test_too_many_tokens_fit_on_no_number_of_devices():
    b = part_b(XXL(tokens=20_000))  # half the activations alone exceed 95 GB
    assert b[-1].value is None and "no N_FSDP" in b[-1].formula


def test_compute_bound_batch_balances_math_and_communication():
    c = XXL()
    b_star = _values(part_c(c))["B* (T_math = T_FSDP + T_TP)"]
    t = forward_times(c, b_star)
    assert t["math"] == pytest.approx(t["fsdp"] + t["tp"], rel=1e-9)
    above, below = forward_times(c, 1.01 * b_star), forward_times(c, 0.99 * b_star)
    assert above["math"] > above["fsdp"] + above["tp"] and below["math"] < below["fsdp"] + below["tp"]
    v = _values(part_c(c))
    assert v["overall batch"] == 64 * math.ceil(b_star / 64)


def test_substituted_arithmetic_gives_the_value():
    # each derivation line whose substitution is plain arithmetic evaluates to its own value, in every part
    # (α printed to enough digits that the expressions with it give the value shown)
    checked = 0
    for part in (part_a, part_b, part_c, part_d):
        for step in part(XXL()):
            text = step.substituted.replace(",", "").replace("·", "*").replace("²", "**2").replace("−", "-")
            if step.value is None or any(c in text for c in "⌈⌊BN<>=") or "/ N_FSDP" in text:
                continue
            assert eval(text) == pytest.approx(step.value, rel=1e-5), (step.name, text)  # noqa: S307
            checked += 1
    assert checked >= 12


def test_the_largest_batch_below_a_strict_bound_fits():
    from cs336report.accounting.distributed import part_b

    step = next(s for s in part_b(XXL()) if s.name == "largest batch for any N_FSDP")
    a = {s.name: s.value for s in part_a(XXL())}
    per_token = a["activations saved per token"]
    assert step.value * per_token / 2 < XXL().tpu_bytes <= (step.value + 1) * per_token / 2


def test_setting_is_validated_by_name():
    with pytest.raises(ValueError, match="d_ff"):
        XXL(d_ff=0)
    with pytest.raises(ValueError, match="unknown XXL setting"):
        XXL.from_dict({"d_modle": 1})


def test_experiment_record_is_json_and_follows_the_setting():
    out = experiment.run({"device": "cpu", "setting": {"tokens": 4096}})
    assert json.loads(json.dumps(out))["setting"]["tokens"] == 4096
    assert out == communication_accounting(XXL(tokens=4096))
    assert [s["name"] for s in out["a"]][0] == "P (parameters)"


def test_zero_stage_one_moves_two_thirds_of_what_sharding_with_broadcast_moves():
    d = data_parallel_bytes(1_000_000, 2)
    assert d["sharded"]["optimizer_state"] == d["zero1"]["optimizer_state"] == d["unsharded"]["optimizer_state"] / 2
    assert d["zero1"]["sent"] == d["unsharded"]["sent"]  # reduce-scatter + all-gather = all-reduce
    assert d["sharded"]["sent"] == pytest.approx(1.5 * d["zero1"]["sent"])


def _section_data(tmp_path):
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.render import RenderContext
    from cs336report.report.sections import communication_accounting as section

    record = load(Path(__file__).parent / "fixtures" / "sharding" / "xxl.json.gz")
    return section, section.build(RenderContext([record], RenderSettings.from_config({"_device": "cpu", "_grid": "cpu"}), tmp_path))


def test_section_shows_each_line_with_its_numbers(tmp_path):
    section, data = _section_data(tmp_path)
    assert data["ok"] and data["fits"]
    rows = {row[1].text: row for row in data["table"].rows}
    p = rows["P (parameters)"]
    assert p[3].text == "126 · 2 · 16384 · 53248" and p[4].text == f"{126 * 2 * 16384 * 53248:,}"
    assert data["a"]["weights + gradients + optimizer state"]["short"] == f"{16 * 126 * 2 * 16384 * 53248 / 1e9:,.1f} GB"
    assert section.headline(data)[0].endswith("as much as 44 H100s of 80 GB hold")


@pytest.mark.parametrize("mode", ["md", "html"])
def test_section_templates_render(tmp_path, mode):
    from pathlib import Path

    from cs336report.report.render import environments

    section, data = _section_data(tmp_path)
    env, fmt_lib = environments()[mode], f"_{mode}.j2"
    info = {"id": "communication_accounting", "title": "communication_accounting", "rules": list(section.EXPERIMENTS)}
    text = env.get_template("sections/communication_accounting.j2").render(fmt_lib=fmt_lib, d=data, section=info)
    assert "Every line of the derivation" in text and "219,848,638,464" in text
    if "macro sub(" not in (Path(__file__).resolve().parent.parent / "templates" / fmt_lib).read_text():
        pytest.skip("this checkout's layout macros have no answer layer")
    answer = env.get_template("answers/communication_accounting.j2").render(fmt_lib=fmt_lib, d=data, section=info)
    assert "219,848,638,464" in answer and answer.count(".json") > 10  # the record's values link to it
    answer = without_record_links(answer)
    per_device = data["c"]["per-device batch, whole tokens"]["value_text"]
    assert f"{per_device} a device" in answer and "N_FSDP = 46" in answer.replace("N\\_FSDP", "N_FSDP")
    # (d): the numbers for doubled Y and 1-byte gathers are the FSDP term's alone, below the floor that
    # counts both terms; the text says which is which
    e, floor = data["d"], data["c"]["floor over every X·Y split"]
    assert float(e["… with twice the tensor-parallel ways"]["value"]) < float(floor["value"])
    plain = answer.replace("\\", "")
    assert "doubling Y halves the FSDP term's bound" in plain and "halves the bound (" not in plain
    assert "counting both terms, no split of the same chips into X·Y goes below" in plain

