"""communication_accounting: the XXL arithmetic, checked against the definitions it rests on
(parameter count from the shapes, the memory bound met at N_FSDP and missed just below it, the
forward pass compute bound exactly from the batch the derivation gives)."""

import json
import math

import pytest

from cs336report.accounting_distributed import (XXL, communication_accounting, data_parallel_bytes,
                                                fsdp_bytes_per_device, forward_times, part_a, part_b,
                                                part_c)
from cs336report.experiments import communication_accounting as experiment


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
    # each derivation line whose substitution is plain arithmetic evaluates to its own value
    checked = 0
    for step in part_a(XXL()):
        text = step.substituted.replace(",", "").replace("·", "*")
        if "⌈" in text:
            continue
        assert eval(text) == pytest.approx(step.value)  # noqa: S307 - our own arithmetic strings
        checked += 1
    assert checked >= 5


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
