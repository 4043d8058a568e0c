"""The benchmark targets, checked by the report: one table in the summary of a GPU run.

Each target was set for one card (an H100). A row says what was measured, on which card, and
whether the target is met there; on another card the verdict is marked as indicative. The
numbers are those the sections computed from the records (the leaderboard mean, the optimized
step's fraction of the measured bf16 peak) and the cost appendix's total job time.
"""

from __future__ import annotations

from .tables import Cell, Table, fmt_pct

# The card every target was set for.
TARGET_CARD = "H100"
# The leaderboard row (forward + backward of the 2025 harness): what PyTorch's cuDNN attention
# takes on that card (4.55-4.62 ms in our harness runs on H100s).
LEADERBOARD_TARGET_MS = 4.6
# The optimized step: this fraction of the measured bf16 matmul peak, for this (size, context, batch).
OPTIMIZED_TARGET_FRACTION = 0.5
OPTIMIZED_TARGET_CELL = ("2.7B", 512, 4)
# The whole report's time: its job time one after another, or a single run's wall time on the
# GPUs of its host (the gpu grid on 4 GPUs, the handout grid on one).
COST_TARGET_S = 20 * 60
COST_TARGET_GPUS = {"gpu": 4, "handout": 1}
# Everything around the timed steps and first compiled calls: at most this share of the job time.
OVERHEAD_TARGET_PCT = 35


def on_target_card(gpu) -> bool:
    """Whether ``gpu`` (a device name, or None) is the card the targets were set for."""
    return isinstance(gpu, str) and TARGET_CARD in gpu


def _verdict(met: bool, gpu: str | None) -> Cell:
    text = "met" if met else "missed"
    if on_target_card(gpu):
        return Cell(text)
    return Cell(f"{text} on this card (indicative: not an {TARGET_CARD})")


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n > 1 else ''}"


def _cost_verdict(verdict: Cell, n_not_run: int, cut_down: list[str] | None) -> Cell:
    if n_not_run:  # the cells that did not run would only add to the total
        verdict = Cell(f"{verdict.text}; {n_not_run} configured cell{'s' if n_not_run != 1 else ''} not run")
    if cut_down:  # a smaller grid than the handout's costs less: the verdict is for that grid only
        verdict = Cell(f"{verdict.text}; on a cut-down grid ({', '.join(cut_down)}), not the handout's")
    return verdict


def targets_table(sections: dict[str, dict | None], cost: dict, gpu: str | None,
                  n_not_run: int | None, cut_down: list[str] | None = None, grid: str = "gpu") -> Table | None:
    """The targets whose measurements this report holds; None when it holds none.

    ``n_not_run`` is how many configured cells have no result; None when the config does not
    say which cells there are, and then the whole-report cost is left out (it could be partial).
    ``cut_down`` lists where the configured grid is smaller than the handout's
    (:func:`cs336report.report.checks.cut_down_grid`); the cost verdict then says so. ``grid``
    names the run's grid, whose wall-time goal is for :data:`COST_TARGET_GPUS` GPUs.
    """
    rows, sources = [], []
    lb = (sections.get("flash_benchmarking") or {}).get("leaderboard") or {}
    if "ours" in lb:
        rows.append([Cell("FlashAttention-2 leaderboard row, forward + backward"), Cell(f"≤ {LEADERBOARD_TARGET_MS} ms"),
                     Cell(f"{lb['ours']['ms']} ms ({lb['ours']['label']})"), Cell(str(lb["gpu"])),
                     _verdict(lb["ours"]["meets_target"], lb["gpu"])])
        sources += lb["table"].sources
    optimized = (sections.get("torch_compile") or {}).get("optimized") or {}
    targets = [item for item in optimized.get("items", []) if item.get("is_target") and item.get("has_peak")]
    for item in targets:
        size, context, batch = OPTIMIZED_TARGET_CELL
        which = f" ({item['switches']})" if len(targets) > 1 else ""  # several configurations of the target cell
        rows.append([Cell(f"Optimized train step, {size} at context {context}, batch {batch}{which}"),
                     Cell(f"≥ {fmt_pct(OPTIMIZED_TARGET_FRACTION, 2)} of the measured bf16 matmul peak"),
                     Cell(f"{item['pct']} ({item['tflops']} of {item['peak']} TFLOP/s)"), Cell(str(item["gpu"])),
                     _verdict(item["met"], item["gpu"])])
        sources += optimized["table"].sources
    if cost.get("table") is not None and n_not_run is not None:
        run, host = cost.get("run") or {}, COST_TARGET_GPUS.get(grid, 1)
        # records of several runs: the goal's host, forecast from the job times (one GPU: the job time)
        guess = next((f for f in run.get("forecast") or [] if f["slots"] == host), None) if host > 1 else None
        if run.get("wall"):  # one run: its wall time on the GPUs of its host
            verdict = (_verdict(run["wall_s"] <= COST_TARGET_S, gpu) if run["slots"] == host else
                       Cell(f"not checked: the goal is for {_gpus(host)}"))
            measured = f"{run['wall']} on {_gpus(run['slots'])}"
        elif guess:
            verdict = Cell(f"forecast: {_verdict(guess['s'] <= COST_TARGET_S, gpu).text}")
            measured = f"no single run; {guess['text']} ({guess['s'] / 60:.0f} min) forecast from the job times"
        if run.get("wall") or guess:
            rows.append([Cell(f"The whole report ({grid} grid), one run on {_gpus(host)}"),
                         Cell(f"≤ {COST_TARGET_S // 60} min of wall time"), Cell(measured), Cell(str(gpu)),
                         _cost_verdict(verdict, n_not_run, cut_down)])
        else:
            rows.append([Cell("The whole report, every job one after another"), Cell(f"≤ {COST_TARGET_S // 60} min"),
                         Cell(f"{cost['total']} ({cost['total_s'] / 60:.0f} min) of job time"), Cell(str(gpu)),
                         _cost_verdict(_verdict(cost["total_s"] <= COST_TARGET_S, gpu), n_not_run, cut_down)])
        split = cost.get("split")
        if split:
            rows.append([Cell("Everything around the timed steps and first compiled calls"),
                         Cell(f"≤ {OVERHEAD_TARGET_PCT} % of the job time"),
                         Cell(f"{split['rest_pct']} % ({split['rest']} of {cost['total']})"), Cell(str(gpu)),
                         _cost_verdict(_verdict(int(split["rest_pct"]) <= OVERHEAD_TARGET_PCT, gpu), n_not_run,
                                       cut_down)])
    if not rows:
        return None
    return Table(
        title="Benchmark targets", columns=["target", f"set for one {TARGET_CARD}", "measured", "card", "verdict"],
        rows=rows, sources=sorted(set(sources)),
        note="each number comes from the section named in the target (the cost from the appendix); "
             f"on a card other than the {TARGET_CARD} the verdict only indicates where this card stands",
    )
