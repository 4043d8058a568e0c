"""gradient_checkpointing: the derivation against hand-worked numbers, and the CPU measure on a model
small enough to run in a few seconds."""

import math

import pytest
import sympy as sp

from cs336report.accounting import checkpointing as ckpt
from cs336report.records import shapes


def test_the_best_single_level_group_is_sqrt_n_r_over_a():
    d = ckpt.derivation()
    k_best = sp.sympify(d["k_best"], locals={"N": ckpt.N, "r": ckpt.r, "a": ckpt.a})
    # N = 32 blocks, r = 40 MiB, a = 1280 MiB (hand-worked: sqrt(32 * 40 / 1280) = 1)
    assert float(k_best.subs({ckpt.N: 32, ckpt.r: 40, ckpt.a: 1280})) == pytest.approx(1.0)
    assert ckpt.best_group(32, 40, 1280) == pytest.approx(1.0)
    assert ckpt.best_group(16, 100, 4) == pytest.approx(20.0)  # sqrt(16 * 100 / 4)
    peak = sp.sympify(d["peak_best"], locals={"N": ckpt.N, "r": ckpt.r, "a": ckpt.a})
    assert float(peak.subs({ckpt.N: 16, ckpt.r: 100, ckpt.a: 4})) == pytest.approx(2 * math.sqrt(16 * 100 * 4))


def test_the_modelled_peak_is_lowest_at_the_divisor_nearest_the_optimum():
    n, r, a = 36, 10.0, 2.5  # k* = sqrt(36 * 10 / 2.5) = 12
    peaks = {g: ckpt.modelled_peak(g, n, r, a) for g in ckpt.groupings(n)}
    assert min(peaks, key=peaks.get) == 12 and peaks[12] == 3 * 10 + 12 * 2.5
    assert ckpt.groupings(12) == [1, 2, 3, 4, 6, 12]


def test_the_block_bytes_are_read_back_from_the_two_extreme_peaks():
    n, r, a, base = 8, 3.0, 11.0, 1000.0
    one_group, groups_of_one = base + r + n * a, base + n * r + a
    assert ckpt.fit_block_bytes(one_group, groups_of_one, n, r) == pytest.approx(a)


def test_a_cpu_cell_measures_a_lower_peak_with_checkpoints():
    from cs336report.experiments.gradient_checkpointing.measure import run

    model = {"d_model": 32, "d_ff": 128, "num_layers": 4, "num_heads": 2, "vocab_size": 16}
    data = run({"device": "cpu", "size": "test", "model": model, "context": 64, "batch_size": 1,
                "implementation": "naive", "seed": 0})
    shapes.check("gradient_checkpointing", "ok", data)
    peaks = {row["group"]: row["peak_bytes"] for row in data["rows"]}
    assert set(peaks) == {0, 1, 2, 4} and all(p > 0 for p in peaks.values())
    assert peaks[1] < peaks[0]  # the attention scores of three blocks are not kept
    assert data["measure"] == "cpu" and "CPU allocator" in data["measure_words"]


def test_the_answer_says_whether_the_model_picks_the_measured_best_grouping(tmp_path):
    """(b) compares the grouping the single-level model puts lowest, among those that ran, with the
    one measured lowest, and says plainly where they differ."""
    from cs336report.experiments.gradient_checkpointing.measure import run
    from cs336report.report.render import render_report
    from cs336report.records.store import save

    model = {"d_model": 32, "d_ff": 128, "num_layers": 4, "num_heads": 2, "vocab_size": 16}
    config = {"device": "cpu", "size": "test", "model": model, "context": 64, "batch_size": 1,
              "implementation": "naive", "seed": 0}
    data = run(config)
    n, r, a = data["num_layers"], data["residual_bytes"], data["analytic"]["a_bytes"]
    groups = [row["group"] for row in data["rows"] if row["group"] > 0]
    chosen = min(groups, key=lambda k: ckpt.modelled_peak(k, n, r, a))

    def answer(rows, name):
        record = {"schema": 1, "experiment": "gradient_checkpointing", "cell": "test", "status": "ok", "error": None,
                  "config": config, "data": {**data, "rows": rows}, "provenance": {}}
        path = tmp_path / name / "results" / "gradient_checkpointing" / "test.json"
        save(record, path)
        render_report([str(path)], {"_device": "cpu", "_grid": "cpu", "_handout": 2026}, tmp_path / name / "out",
                      draw=False)
        md = (tmp_path / name / "out" / "answers.md").read_text()
        return md.split('<a id="gradient_checkpointing-b"></a>', 1)[1].split("<a id=", 1)[0]

    def lowest_at(group):  # the measured peaks with ``group`` lowest of the groupings
        return [{**row, "peak_bytes": 1000 + (0 if row["group"] == group else 10 + row["group"])}
                if row["group"] > 0 else row for row in data["rows"]]

    same = answer(lowest_at(chosen), "same")
    assert "Of the groupings that ran, the model's lowest is the measured lowest" in same
    other = next(g for g in groups if g != chosen)
    differs = answer(lowest_at(other), "differs")
    assert (f"the model's lowest is {chosen} block{'s' if chosen != 1 else ''} a checkpoint, "
            f"not the measured {other}") in differs
