import json

import pytest
import torch

from cs336report.experiments.benchmarking_mixed_precision import dtypes as autocast, norms
from cs336report.experiments.mixed_precision_accumulation import accumulation

SMALL_NORM_ARGS = dict(
    magnitudes=(1, 100, 1e3, 1e4),
    hidden_sizes=(64, 1024),
    rows_per_case=4,
)


def _round_trip(result: dict) -> dict:
    return json.loads(json.dumps(result, allow_nan=False))


@pytest.fixture(scope="module")
def accumulation_result():
    return accumulation.accumulation()


@pytest.fixture(scope="module")
def norm_result():
    return norms.norm_sensitivity(**SMALL_NORM_ARGS)


def test_accumulation_rows(accumulation_result):
    rows = {row["label"]: row for row in accumulation_result["rows"]}
    assert list(rows) == ["a", "b", "c", "d", "e", "f"]
    assert rows["b"]["accumulator_dtype"] == "float16"
    assert rows["c"]["addend_dtype"] == "float16"
    assert rows["d"]["cast_addend"] is True
    for row in rows.values():
        assert row["expected"] == pytest.approx(10.0)
        assert row["abs_error"] == pytest.approx(abs(row["result"] - 10.0))


def test_accumulation_precision_relations(accumulation_result):
    rows = {row["label"]: row for row in accumulation_result["rows"]}
    assert rows["a"]["result"] == pytest.approx(10.0, abs=1e-3)
    assert rows["b"]["abs_error"] > 100 * rows["a"]["abs_error"]
    assert rows["e"]["abs_error"] > rows["b"]["abs_error"]
    # Adding an fp16 value to an fp32 accumulator promotes it, so casting first changes nothing.
    assert rows["c"]["result"] == rows["d"]["result"]
    # What remains is the error of representing 0.01 in fp16, times n.
    assert rows["c"]["result"] == pytest.approx(1000 * rows["c"]["addend_value"], rel=1e-5)


def test_accumulation_json(accumulation_result):
    assert _round_trip(accumulation_result) == accumulation_result


def test_autocast_bfloat16_on_cpu():
    result = autocast.autocast_dtypes(device="cpu", dtype="bfloat16")
    assert result["status"] == "ok"
    assert result["autocast_enabled"] is True
    assert result["autocast_dtype"] == "bfloat16"
    dtypes = {row["component"]: row["dtype"] for row in result["rows"]}
    assert dtypes["fc1.weight (stored, inside autocast)"] == "float32"
    assert dtypes["fc1 input"] == "float32"
    assert dtypes["fc1 output"] == "bfloat16"
    # CPU autocast does not promote layer_norm to float32 (CUDA autocast does).
    assert dtypes["ln output"] == "bfloat16"
    assert dtypes["logits"] == "bfloat16"
    assert dtypes["loss"] == "float32"
    grads = [row for row in result["rows"] if row["kind"] == "gradient"]
    assert len(grads) == 4
    assert all(row["dtype"] == "float32" for row in grads)
    assert _round_trip(result) == result


def test_autocast_float16_on_cpu_is_observed_not_assumed():
    result = autocast.autocast_dtypes(device="cpu", dtype="float16")
    assert result["status"] in {"ok", "disabled", "unsupported"}
    if result["status"] == "ok":
        dtypes = {row["component"]: row["dtype"] for row in result["rows"]}
        assert dtypes["fc1 output"] == "float16"
    assert _round_trip(result) == result


@pytest.mark.gpu
def test_autocast_float16_on_cuda():
    result = autocast.autocast_dtypes(device="cuda", dtype="float16")
    assert result["status"] == "ok"
    dtypes = {row["component"]: row["dtype"] for row in result["rows"]}
    assert dtypes["fc1 output"] == "float16"
    assert dtypes["logits"] == "float16"
    assert dtypes["ln output"] == "float32"
    assert dtypes["loss"] == "float32"
    assert all(row["dtype"] == "float32" for row in result["rows"] if row["kind"] == "gradient")


def _summary(result, norm, statistic, dtype, accumulate="backend"):
    (row,) = [
        r
        for r in result["summary"]
        if (r["norm"], r["statistic"], r["dtype"], r["accumulate"]) == (norm, statistic, dtype, accumulate)
    ]
    return row


def test_norm_rows_shape(norm_result):
    rows = norm_result["rows"]
    n_cases = 4 * 2 * 2 * 3 * 3  # magnitudes, hidden sizes, offsets, dtypes, accumulations
    assert len(rows) == n_cases * 7
    expected_keys = {
        "norm", "statistic", "dtype", "accumulate", "magnitude", "hidden", "offset",
        "rel_error", "n_inf", "n_nan", "n_input_inf", "n_terms_inf", "sum_overflow", "overflow",
    }
    assert all(set(row) == expected_keys for row in rows)
    assert {(r["norm"], r["statistic"]) for r in rows} == {
        ("layernorm", "mean"), ("layernorm", "var"), ("layernorm", "rstd"), ("layernorm", "output"),
        ("rmsnorm", "meansq"), ("rmsnorm", "rrms"), ("rmsnorm", "output"),
    }


def test_norm_fp16_mean_of_squares_overflows(norm_result):
    fp16 = _summary(norm_result, "rmsnorm", "meansq", "float16")
    assert fp16["first_inf_magnitude"] is not None
    assert fp16["first_inf_magnitude"] <= 1e3
    large = [
        r for r in norm_result["rows"]
        if (r["statistic"], r["dtype"], r["magnitude"]) == ("meansq", "float16", 1e3)
    ]
    assert all(r["overflow"] for r in large)
    assert all(r["n_terms_inf"] > 0 for r in large)  # x * x itself exceeds the fp16 range


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_norm_no_overflow_in_wide_range_dtypes(norm_result, dtype):
    rows = [r for r in norm_result["rows"] if r["dtype"] == dtype]
    assert not any(r["overflow"] for r in rows)
    assert all(r["rel_error"] is not None for r in rows)


def test_norm_errors_ordered_by_mantissa_width(norm_result):
    bf16 = _summary(norm_result, "rmsnorm", "meansq", "bfloat16")["max_rel_error"]
    fp16 = _summary(norm_result, "rmsnorm", "meansq", "float16")["max_rel_error"]
    fp32 = _summary(norm_result, "rmsnorm", "meansq", "float32")["max_rel_error"]
    assert fp32 < fp16 < bf16


def test_norm_sequential_bf16_sum_loses_precision(norm_result):
    def worst(accumulate):
        return max(
            r["rel_error"] for r in norm_result["rows"]
            if (r["statistic"], r["dtype"], r["accumulate"], r["hidden"]) == ("meansq", "bfloat16", accumulate, 1024)
        )

    assert worst("sequential") > 10 * worst("backend")


def test_norm_json(norm_result):
    assert _round_trip(norm_result) == norm_result


def test_unknown_accumulation_rejected():
    with pytest.raises(ValueError):
        norms.norm_sensitivity(magnitudes=(1,), hidden_sizes=(8,), accumulations=("kahan",))


def test_same_seed_same_result():
    args = dict(magnitudes=(1, 1e4), hidden_sizes=(32,), rows_per_case=2)
    assert norms.norm_sensitivity(**args) == norms.norm_sensitivity(**args)
