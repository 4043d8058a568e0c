"""The analytic peak closes on the published H200 records: every train step within 1.00 ± 0.03."""

import json
from pathlib import Path

import pytest

from cs336report import accounting
from cs336report.model import ModelSpec
from cs336report.report.sections import memory_profiling
from cs336report.results import load

DATA = Path(__file__).resolve().parents[1] / "report" / "data"


def published(experiment: str) -> list[dict]:
    files = json.loads((DATA / "manifest.json").read_text())["files"]
    return [load(Path(f) if Path(f).is_absolute() else DATA.parent.parent / f) for f in files
            if Path(f).parent.name == experiment]


def test_every_train_step_row_of_the_accounting_table_closes():
    records = published("memory_profiling")
    assert records, "no published memory_profiling records"
    df = memory_profiling.frame(published("memory_profiling_parse"), records)
    rows = [i for i in memory_profiling.accounting_rows(df) if i["row"]["mode"] == "train_step" and i["measured"]]
    assert len(rows) >= 8
    ratios = {(i["row"]["implementation"], i["row"]["precision"], int(i["row"]["context"])): i["pred"]["total"] / i["measured"]
              for i in rows}
    assert all(0.97 <= r <= 1.03 for r in ratios.values()), ratios


def test_the_train_step_peak_is_twenty_bytes_a_parameter_where_state_dominates():
    spec = ModelSpec(d_model=2560, d_ff=10240, num_layers=32, num_heads=32)
    n = accounting.param_count(spec)
    p = accounting.predicted_peak_bytes(spec, 4, 128, "train_step")
    assert p["total"] == 20 * n and p["optimizer_temporary"] == 4 * n
    assert accounting.predicted_peak_bytes(spec, 4, 128, "train_step", optimizer="fused")["total"] == 16 * n


def test_autocast_keeps_bf16_weight_copies_even_without_grad():
    spec = ModelSpec(d_model=64, d_ff=128, num_layers=2, num_heads=2, vocab_size=100)
    fp32 = accounting.predicted_peak_bytes(spec, 2, 16, "forward", "no_grad")
    bf16 = accounting.predicted_peak_bytes(spec, 2, 16, "forward", "no_grad", precision="bf16")
    assert bf16["total"] - fp32["total"] == bf16["autocast_casts"] == 2 * (2 * (4 * 64 * 64 + 3 * 64 * 128) + 64 * 100)
