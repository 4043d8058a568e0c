"""nsys_profile's sanity checks of each parsed profile: phase ranges, range instances, whole calls."""

from __future__ import annotations

import pandas as pd

from ....records.shapes import NsysChecks, read_as
from ...tables import Cell, Table, fmt_pct, status_cell
from .frames import MODE_LABELS, span


def checks_table(cells: pd.DataFrame) -> tuple[Table, dict]:
    rows = []
    bad_instances = 0
    for _, r in cells.iterrows():
        head = [Cell(str(r["size"])), Cell(str(r["context"])), Cell(MODE_LABELS.get(r["mode"], r["mode"]))]
        if r["status"] != "ok" or r["empty_reason"]:
            rows.append(head + [status_cell(r["status"]) if r["status"] != "ok" else Cell(r["empty_reason"])] * 5)
            continue
        ch = r["checks"]
        checks = read_as(NsysChecks, ch)
        phases, outside = checks.phases_over_step_wall or {}, checks.kernels_outside_measured_steps or {}
        inst = checks.range_instances or {}
        wrong = [f"{k} {v['observed']}/{v['expected']}" for k, v in inst.items() if not v["ok"]]
        bad_instances += bool(wrong)
        whole = (checks.forward_kernel_instances or {}).get("share_whole_per_step")
        rows.append(head + [
            Cell(fmt_pct(phases["ratio"]) if phases else "–"),
            Cell(fmt_pct(outside["share"], 2) if outside else "–"),
            Cell("all as expected" if inst and not wrong else ("; ".join(wrong) if wrong else "–")),
            Cell(fmt_pct(whole) if whole is not None else "–"),
            Cell(("exact" if r["exact"] else "scaled from warm-up + measured") + ("" if (checks.per_step or {}).get("ok", True) else f"; {ch['per_step']['message']}")),
        ])
    table = Table(
        title="Sanity checks",
        columns=["size", "context", "mode", "phase ranges / step range", "kernel time outside the measured steps",
                 "range instances (observed/expected)", "forward kernel time in whole calls per step",
                 "phase tables"],
        units=["", "tokens", "", "%", "%", "", "%", ""], rows=rows, sources=sorted(cells["path"]),
        note="Phase ranges / step range: forward + backward + optimizer_step range durations over the step range "
             "(in the workflow's runs each phase range includes the synchronization that ends it). Range "
             "instances: step = measured steps, a phase = one per step, an attention range = one per layer and "
             "step. Whole calls: the share of forward kernel time in kernels whose number of calls is a multiple "
             "of the number of steps.")
    ok = cells[(cells["status"] == "ok") & cells["empty_reason"].isna()]
    ratios = [c.get("phases_over_step_wall", {}).get("ratio") for c in ok["checks"]]
    ratios = [x for x in ratios if x is not None]
    out = {"n": len(ok), "bad_instances": bad_instances, "phases": span(ratios, fmt_pct) if ratios else None}
    return table, out
