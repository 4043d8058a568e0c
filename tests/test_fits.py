"""What does not fit a card, from the accounting: the cells of the 2026 handout that cannot run on one
80 GB card are told before they run, those at the edge run, and every out-of-memory record carries the
analytic bytes that explain it."""

import pytest
import torch

from cs336report import editions
from cs336report.accounting import fits
from cs336report.lm import fit_check
from cs336report.records.store import load
from cs336report.run import runner

GiB = 2**30
H100 = 81559 * 2**20  # what torch reports for an 80 GB H100
H200 = 143771 * 2**20
MODELS = {m.name: m.as_config() for m in editions.get(2026).models}


def cell(size, context, mode, **extra):
    return {"device": "cuda", "size": size, "model": MODELS[size], "context": context, "mode": mode,
            "precision": "fp32", "implementation": "naive", "batch_size": 4, "warmup_steps": 1, "measured_steps": 1,
            "tf32": False, "seed": 0, **extra}


@pytest.mark.parametrize("size,context,mode,h100,h200", [
    ("10B", 512, "train_step", True, True),        # 16 B a parameter of 12.8 B parameters: 191 GiB of state
    ("10B", 512, "forward_backward", True, False),  # weights and gradients 95.6 GiB
    ("xl", 2048, "train_step", True, True),         # fp32 activations of 32 blocks at 2048 fit no card
    ("xl", 512, "train_step", False, False),        # the edge of an 80 GB card: it runs, and its outcome is the result
    ("xl", 128, "train_step", False, False),
])
def test_which_cells_are_certain_not_to_fit(size, context, mode, h100, h200):
    c = cell(size, context, mode)
    assert fits.certain_not_to_fit(c, H100) is h100
    assert fits.certain_not_to_fit(c, H200) is h200


def test_the_state_of_a_train_step_is_16_bytes_a_parameter_and_an_80gb_card_is_short_by_the_rest():
    needed = fits.needed(cell("10B", 512, "train_step"), H100)
    params = 12_832_823_808
    assert needed["parts"]["parameters"] == 4 * params and needed["parts"]["optimizer_state"] == 8 * params
    assert needed["peak_bytes"] >= 16 * params
    need = max(needed["peak_bytes"], needed["certain_bytes"])
    assert needed["short_of_card_bytes"] == need - 80 * 10**9
    assert needed["cards_of_80gb"] == -(-need // (80 * 10**9)) >= 3 and needed["device_memory_bytes"] == H100


def test_a_distributed_rank_or_a_cpu_cell_is_not_judged():
    assert not fits.applies(cell("10B", 512, "train_step", world_size=2))
    assert not fits.applies({**cell("10B", 512, "train_step"), "device": "cpu"})


@pytest.fixture
def cpu_provenance(monkeypatch):
    """A record of a CUDA cell written on this CPU machine: the provenance of the CPU it runs on."""
    cpu = runner.provenance
    monkeypatch.setattr(runner, "provenance", lambda device: cpu("cpu"))
    monkeypatch.setattr(runner, "release_memory", lambda device: None)


def test_a_cell_certain_not_to_fit_is_recorded_as_oom_without_running(tmp_path, monkeypatch, cpu_provenance):
    monkeypatch.setattr(fit_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fit_check, "capacity", lambda device: H100)
    out = tmp_path / "r.json"
    runner.run_cell("benchmarking", "naive-fp32-10B-ctx512-train_step", cell("10B", 512, "train_step"), out)
    record = load(out)
    assert record["status"] == "oom" and "predicted, not run" in record["error"]
    needed = record["data"]["memory_needed"]
    assert needed["predicted"] is True and needed["certain_bytes"] > H100


def test_a_measured_out_of_memory_carries_the_analytic_bytes(tmp_path, monkeypatch, cpu_provenance):
    def run(c):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(runner.experiments, "runner", lambda name: run)
    monkeypatch.setattr(runner, "pin_ptxas", lambda: None)
    out = tmp_path / "r.json"
    runner.run_cell("benchmarking", "naive-fp32-xl-ctx512-train_step", cell("xl", 512, "train_step"), out)
    record = load(out)
    assert record["status"] == "oom"
    needed = record["data"]["memory_needed"]
    assert needed["predicted"] is False and needed["peak_bytes"] > 60 * GiB and needed["cards_of_80gb"] == 1


@pytest.mark.parametrize("mode", ["md", "html"])
def test_the_answer_says_what_did_not_fit_and_what_an_80gb_card_would_need(tmp_path, mode):
    """benchmarking_script (b) on real records of a GPU run plus one 10B full step recorded as a predicted
    out of memory: the answer names the cell, its bytes by part and the 80 GB card's shortfall."""
    from test_benchmarking_script import LEFT_OUT, _context

    from cs336report.report.oom import does_not_fit
    from cs336report.report.render import environments
    from cs336report.report.sections import benchmarking_script as section

    records = [load(p) for p in sorted((LEFT_OUT / "benchmarking").glob("*.json.gz"))]
    c = cell("10B", 512, "train_step")
    needed = fits.needed(c, H100, predicted=True)
    oom = {**records[0], "cell": "naive-fp32-10B-ctx512-train_step", "status": "oom", "config": c,
           "error": "PredictedOutOfMemory: out of memory (predicted, not run)", "data": {"memory_needed": needed},
           "_path": "results/benchmarking/naive-fp32-10B-ctx512-train_step.json"}
    rows = does_not_fit(records + [oom])
    assert [r["cell"] for r in rows] == ["The fp32 10B full step at context 512"] and rows[0]["predicted"]
    assert rows[0]["parts"][0]["part"] in ("AdamW's moments", "saved activations")
    data = section.build(_context(tmp_path, records + [oom]))
    info = {"id": "benchmarking_script", "title": "benchmarking_script", "rules": list(section.EXPERIMENTS)}
    text = environments()[mode].get_template("answers/benchmarking_script.j2").render(fmt_lib=f"_{mode}.j2", d=data,
                                                                                      section=info)
    assert "The fp32 10B full step at context 512 was not run" in text and "(predicted, not measured)" in text
    assert f"the memory of {needed['cards_of_80gb']} such cards" in text
    assert "AdamW&#39;s moments" in text or "AdamW's moments" in text
