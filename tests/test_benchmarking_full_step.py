"""benchmarking_script (b) of the 2026 handout: forward, backward and the optimizer step, from the cells."""

import pandas as pd

from cs336report import editions
from cs336report.report.sections.benchmarking_script import answer_part, asks_optimizer_step


def _frame() -> pd.DataFrame:
    rows = []
    for size, scale in (("tiny", 1.0), ("mini", 2.0)):
        for mode, mean, phases in (("forward", 0.010, {}), ("forward_backward", 0.030, {"backward": 0.020}),
                                   ("train_step", 0.050, {"optimizer": 0.020 * scale * scale})):
            rows.append({"size": size, "context": 32, "mode": mode, "status": "ok", "mean_s": mean * scale,
                         "std_s": 0.001, "backward_mean_s": phases.get("backward", float("nan")) * scale,
                         "backward_std_s": 0.001, "optimizer_mean_s": phases.get("optimizer", float("nan")),
                         "optimizer_std_s": 0.002, "source": f"results/benchmarking/{size}-{mode}.json"})
    return pd.DataFrame(rows)


def test_only_2026_asks_for_the_optimizer_step():
    assert asks_optimizer_step(editions.get(2026)) and not asks_optimizer_step(editions.get(2025))


def test_the_full_step_columns_and_the_optimizer_share_come_from_the_training_steps():
    plain, full = answer_part(_frame()), answer_part(_frame(), full_step=True)
    assert plain["table"].columns == ["size", "forward", "backward"] and "full_step" not in plain
    assert full["table"].columns[-2:] == ["optimizer step", "full training step"]
    rows = {str(r[0]): r for r in full["table"].rows}
    assert str(rows["mini"][3]).startswith("80.0 ± 2") and str(rows["mini"][4]).startswith("100 ± 1")  # ms
    assert str(rows["tiny"][3]).startswith("20.0 ± 2")
    share = full["full_step"]  # the last size of the table's order
    assert share["size"] == str(full["table"].rows[-1][0])
    assert share["share"] == ("80.0 %" if share["size"] == "mini" else "40.0 %")
