"""The compiled graph's saved activations (cs336report.accounting.compiled) against what Inductor's
partitioner makes the forward keep, traced on the CPU (cs336report.measure.compiled_census), and the
optimized step's optimizer terms."""

from collections import Counter

import pytest
import torch

from cs336report.accounting import transformer as accounting, peak as accounting_peak
from cs336report.lm.model import ModelSpec, TransformerLM
from cs336report.measure.compiled_census import compiled_saved_tensors

# B·T·d, B·T·f, B·h·T², the weights' sizes and the byte counts of their 2- and 4-byte tensors all
# differ at this size, so each saved tensor's bytes tell what it is
SPEC = ModelSpec(d_model=96, d_ff=384, num_layers=2, num_heads=2, vocab_size=100)
B, T = 1, 128


def census(impl: str, precision: str) -> list[dict]:
    torch.manual_seed(0)
    model = TransformerLM(SPEC, T, impl=impl)
    return compiled_saved_tensors(model, torch.randint(0, SPEC.vocab_size, (B, T)), precision)


def formula_tensors(impl: str, precision: str) -> Counter:
    """The formula's saved tensors by their bytes: how many of each size."""
    items = accounting.saved_activation_items(SPEC, B, T, impl, precision=precision, compiled=True,
                                              attention_output_merged=False)  # the CPU kernel: an output of its own
    out = Counter()
    for n, b in items["layer"] + items["attention"]:
        out[b] += SPEC.num_layers * n
    for n, b in items["first"] + items["final"]:
        out[b] += n
    return +out


@pytest.mark.parametrize("impl, precision", [("naive", "fp32"), ("native", "bf16")])
def test_the_formula_counts_what_the_partitioner_saves(impl, precision):
    """Tensor by tensor, for the settings of compiled_model and optimized_step: every activation of more
    than B·h·T values (the row statistics and norm scales are left out) is one the formula counts, in its
    dtype; under autocast the graph also keeps a 16-bit copy of each matrix weight, the bytes autocast's
    cache holds in eager mode. (A trace takes seconds: the softmax with amax, which the published
    compiled_model records ran, and the master-weight model, bf16 matrix weights, were traced the same
    way and save the same activations.)"""
    saved = census(impl, precision)
    large = [x["bytes"] for x in saved if x["role"] == "activation" and x["bytes"] and x["numel"] > B * SPEC.num_heads * T]
    assert Counter(large) == formula_tensors(impl, precision)
    total = sum(large)
    assert total == accounting.saved_activation_bytes(SPEC, B, T, impl, precision=precision, compiled=True,
                                                      attention_output_merged=False)["total"]
    copies = sum(x["bytes"] for x in saved if x["role"] == "weight_copy")
    assert copies == accounting_peak.autocast_cast_bytes(SPEC, precision)


def test_the_compiled_count_against_the_eager_one():
    """The compiled graph keeps less: the norms' x·rms, SwiGLU's two element-wise results, autocast's
    duplicate 16-bit copies and the first block's input (the embedding lookup runs again)."""
    spec = ModelSpec(d_model=2560, d_ff=10240, num_layers=32, num_heads=32)
    BTd, BTf = 4 * 512 * 2560, 4 * 512 * 10240
    eager = accounting.saved_activation_bytes(spec, 4, 512, "native", precision="bf16")
    compiled = accounting.saved_activation_bytes(spec, 4, 512, "native", precision="bf16", compiled=True)
    assert eager["per_layer"] - compiled["per_layer"] == 2 * 4 * BTd + 3 * 2 * BTd + 2 * 2 * BTf
    assert compiled["first"] == -4 * BTd
    naive = accounting.saved_activation_bytes(spec, 4, 512, "naive", compiled=True)
    assert naive["attention_per_layer"] == 2 * 4 * 4 * 32 * 512 * 512  # two fp32 score matrices, max or amax
    assert naive["per_layer"] == 4 * (8 * BTd + 3 * BTf) + naive["attention_per_layer"]


def test_a_compiled_step_peaks_where_its_graph_holds_the_most():
    spec = ModelSpec(d_model=768, d_ff=3072, num_layers=12, num_heads=12)
    p = accounting_peak.predicted_peak_bytes(spec, 4, 512, "train_step", compiled=True)
    assert set(p["moments"]) == {"loss backward", "optimizer step"}  # its backward is one graph
    acts = accounting.saved_activation_bytes(spec, 4, 512, compiled=True)["total"]
    n, BTV = accounting.param_count(spec), 4 * 512 * spec.vocab_size
    assert p["moments"]["loss backward"]["total"] == 12 * n + acts + 16 * BTV


def test_master_weights_swap_autocast_copies_for_working_copies():
    """bf16 working copies beside fp32 masters, bf16 gradients for them, no autocast copy; the fused or
    compiled update keeps no temporary, the one run tensor by tensor keeps the largest tensor's."""
    spec = ModelSpec(d_model=2560, d_ff=10240, num_layers=32, num_heads=32)
    n, m = accounting.param_count(spec), sum(accounting_peak.matrix_weight_sizes(spec))
    plain = accounting_peak.predicted_peak_bytes(spec, 4, 512, "train_step", impl="native", precision="bf16",
                                            optimizer="fused", compiled=True)
    master = accounting_peak.predicted_peak_bytes(spec, 4, 512, "train_step", impl="native", precision="bf16",
                                             optimizer="fused", compiled=True, master_weights=True)
    assert master["autocast_casts"] == 0 and plain["autocast_casts"] == 2 * m
    assert master["moments"]["loss backward"]["total"] == plain["moments"]["loss backward"]["total"]
    step = accounting_peak.predicted_peak_bytes(spec, 4, 128, "train_step", impl="native", precision="bf16",
                                           optimizer="fused", compiled=True, master_weights=True, output_held=False)
    assert step["moment"] == "optimizer step"
    assert step["parameters"] == 4 * n + 2 * m and step["gradients"] == 4 * (n - m) + 2 * m
    assert step["total"] == 16 * n  # the same 16 bytes a parameter as fused AdamW on fp32 weights
    eager = accounting_peak.predicted_peak_bytes(spec, 4, 128, "train_step", impl="native", precision="bf16",
                                            optimizer="per_tensor", master_weights=True, output_held=False)
    assert eager["optimizer_temporary"] == 16 * spec.d_model * spec.d_ff  # a feed-forward weight, the largest
    with pytest.raises(ValueError, match="unknown optimizer"):
        accounting_peak.predicted_peak_bytes(spec, 4, 128, "train_step", optimizer="sgd")


def record(**config) -> dict:
    model = dict(d_model=64, d_ff=256, num_layers=2, num_heads=2, vocab_size=100)
    base = {"model": model, "batch_size": 2, "context": 32, "mode": "train_step", "precision": "bf16",
            "implementation": "native"}
    return {"config": {**base, **config}, "data": {}, "provenance": {"gpu_capability": "9.0"}}


def test_a_records_settings_switch_the_terms_on():
    """One reading of a record's settings serves every table that predicts its peak."""
    from cs336report.report.sections.benchmarking_mixed_precision.memory import predicted
    from cs336report.report.sections.memory_profiling.analytic import prediction_inputs

    plain = prediction_inputs(record())
    assert (plain["compiled"], plain["master_weights"], plain["optimizer"]) == (False, False, "foreach")
    optimized = prediction_inputs(record(compile=True, fused_adamw=True))
    assert (optimized["compiled"], optimized["master_weights"], optimized["optimizer"]) == (True, False, "fused")
    master = prediction_inputs(record(compile=True, fused_adamw=True, master_weights=True))
    assert (master["compiled"], master["master_weights"], master["optimizer"]) == (True, True, "fused")
    eager_update = record(master_weights=True)
    eager_update["data"] = {"model": {"master_weights": {"compiled": False}}}
    assert prediction_inputs(eager_update)["optimizer"] == "per_tensor"
    assert not prediction_inputs(record(precision="fp32", master_weights=True))["master_weights"]
    assert prediction_inputs(record(implementation="flash_triton"))["impl"] == "naive"
    assert prediction_inputs(record(model=None)) is None
    r = record(compile=True, fused_adamw=True, master_weights=True)
    assert predicted(r) == accounting_peak.predicted_peak_bytes(**prediction_inputs(r))
    assert predicted(r)["autocast_casts"] == 0
