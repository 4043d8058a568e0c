"""memory_profiling's analytic accounting: the formula of :mod:`cs336report.accounting.peak` beside
(1) each memory_profiling cell's snapshot peak (requested), tensor bytes against tensor bytes, and
(2) every train step the report measured (memory_profiling, benchmarking, benchmarking_bf16,
compiled_model, optimized_step), its peak allocated against the same tensors in allocator blocks.
"""

from __future__ import annotations

import pandas as pd

from ....accounting import transformer as accounting, peak as accounting_peak
from ....names.spec import ModelSpec
from ....records.shapes import ModelInfo, Provenance, StepConfig, StepTimes, read_as, typed
from ...labels import PEAK_ALLOCATED, PREDICTED, SNAPSHOT_PEAK
from ...tables import Cell, Table, sig, status_cell
from .frame import MODE_LABELS, byte_unit, in_unit, is_measured, model_spec

# the experiments whose train steps the report shows, in the order the table lists them
TRAIN_STEP_EXPERIMENTS = ("memory_profiling", "benchmarking", "benchmarking_bf16", "compiled_model", "optimized_step")
# measured / predicted inside this band closes
TOLERANCE = 0.03

STATE_PARTS = ("parameters", "gradients", "optimizer_state", "optimizer_temporary")


def _impl(implementation: str | None) -> str:
    """The formula's implementation: the built-in naive or native one (another attention counts as naive)."""
    return implementation if implementation in ("naive", "native") else "naive"


def prediction_inputs(record: dict) -> dict | None:
    """The arguments of :func:`cs336report.accounting.peak.predicted_peak_bytes` for one Transformer step on
    record (benchmarking, compiled_model, optimized_step, ...): its model, batch, context and mode, the
    implementation, precision, the optimizer its train step ran, whether the model ran compiled and with
    master weights, the naive attention's saved matrices and the GPU's compute capability. None without a
    model, batch or mode.

    The optimizer: with master weights (``master_weights`` under 16-bit precision) the update runs fused
    where it was compiled (the record's ``model.master_weights.compiled``, else the cell's ``compile``) and
    one tensor at a time where not; otherwise torch's fused AdamW where ``fused_adamw``, else foreach."""
    c, d = read_as(StepConfig, record["config"]), record["data"]
    if not c.model or not c.batch_size or not c.mode:
        return None
    precision = "fp32" if c.precision is None else c.precision
    compiled = bool(c.compile)
    master = bool(c.master_weights) and precision != "fp32"
    if master:
        masters = read_as(ModelInfo, typed(record, StepTimes).model).master_weights or {}
        update_compiled = masters["compiled"] if "compiled" in masters else compiled
        optimizer = "fused" if update_compiled else "per_tensor"
    else:
        optimizer = "fused" if c.fused_adamw else "foreach"
    return {"spec": ModelSpec(**c.model), "batch": int(c.batch_size), "context": int(c.context),
            "mode": c.mode, "grad": "enabled" if c.grad is None else c.grad, "impl": _impl(c.implementation),
            "precision": precision, "optimizer": optimizer,
            "saved_matrices": accounting.saved_matrices_of(d, record["provenance"]),
            "capability": read_as(Provenance, record["provenance"]).gpu_capability, "compiled": compiled,
            "master_weights": master}


def _profiled_inputs(r) -> dict:
    """prediction_inputs of one memory_profiling cell, from its row of the frame (an eager step, foreach AdamW)."""
    return {"spec": model_spec(r), "batch": int(r["batch"]), "context": int(r["context"]), "mode": r["mode"],
            "grad": r["grad"], "impl": _impl(r["implementation"]), "precision": r["precision"], "optimizer": "foreach",
            "saved_matrices": r["saved_matrices"], "capability": r["capability"], "compiled": False,
            "master_weights": False}


def accounting_rows(df: pd.DataFrame) -> list[dict]:
    """Per memory_profiling cell: the prediction and the snapshot peak (requested) and peak allocated.
    The profiled step drops its logits before the optimizer step (``output_held`` off)."""
    out = []
    for _, r in df.iterrows():
        if r["model"] is None or r["batch"] is None:
            continue
        pred = accounting_peak.predicted_peak_bytes(**_profiled_inputs(r), output_held=False)
        ok = r["status"] == "ok"
        requested = r["snap_peak"] if ok and is_measured(r["snap_peak"]) else None
        allocated = r["peak_alloc"] if ok and is_measured(r["peak_alloc"]) else None
        out.append({"row": r, "pred": pred, "measured": requested,
                    "ratio": requested / pred["total"] if requested else None, "allocated": allocated,
                    "allocated_ratio": allocated / pred["allocated"] if allocated else None})
    return out


def accounting_table(items: list[dict]) -> Table | None:
    if not items:
        return None
    unit, scale = byte_unit([i["pred"]["total"] for i in items])
    rows = []
    for i in items:
        r, p = i["row"], i["pred"]
        measured = status_cell(r["status"]) if i["measured"] is None else Cell(in_unit(i["measured"], scale))
        rows.append([Cell(r["implementation"]), Cell(r["precision"]), Cell(str(r["context"])),
                     Cell(MODE_LABELS[r["label"]]), Cell(p["moment"]),
                     Cell(in_unit(sum(p[k] for k in STATE_PARTS), scale)), Cell(in_unit(p["autocast_casts"], scale)),
                     Cell(in_unit(p["activations"], scale)), Cell(in_unit(p["logits"] + p["temporaries"], scale)),
                     Cell(in_unit(p["workspace"], scale)), Cell(in_unit(p["total"], scale)), measured,
                     Cell("–" if i["ratio"] is None else sig(i["ratio"], 3))])
    return Table(
        title=f"Analytic accounting beside the {SNAPSHOT_PEAK}",
        columns=["implementation", "precision", "context", "step", "peak at", "training state",
                 "autocast weight copies", "saved activations", "logits, loss and temporaries", "cuBLAS workspaces",
                 PREDICTED, SNAPSHOT_PEAK, "measured / predicted"],
        units=["", "", "tokens", "", ""] + [unit] * 7 + ["×"], rows=rows,
        sources=sorted(i["row"]["source"] for i in items),
        note=("predicted: the tensors live at the moment of the step that holds the most (peak at), by the formula "
              "below; training state: fp32 weights, the gradients where they exist (none before backward: "
              "zero_grad(set_to_none=True) freed them), AdamW's two moments and, in its step, the foreach temporary; "
              "autocast weight copies: the bf16 copy of each matrix weight that autocast's cache holds until the "
              "autocast region exits, under no_grad as well; saved activations: at the last attention backward, "
              "less what the last block's backward has already released; "
              f"{SNAPSHOT_PEAK}: the largest total of live allocations in the snapshot, at their requested sizes"),
    )


def _config_label(inputs: dict, c: StepConfig) -> str:
    parts = ["torch.compile" if inputs["compiled"] else "eager"]
    if c.compile_mode and c.compile_mode != "default":
        parts.append(f"mode {c.compile_mode}")
    if inputs["master_weights"]:
        parts.append("bf16 working weights from fp32 masters")
    if inputs["optimizer"] == "fused":
        parts.append("fused AdamW")
    return ", ".join(parts)


def _record_row(r: dict) -> dict | None:
    c = read_as(StepConfig, r["config"])
    inputs = prediction_inputs(r)
    if inputs is None or inputs["mode"] != "train_step":
        return None
    peak = (typed(r).peak_memory or {}).get("allocated_bytes")
    return {"experiment": r["experiment"], "size": "?" if c.size is None else c.size,
            "implementation": "naive" if c.implementation is None else c.implementation,
            "precision": inputs["precision"], "context": inputs["context"], "compiled": inputs["compiled"],
            "configuration": _config_label(inputs, c), "status": r["status"], "inputs": inputs,
            "measured": peak if r["status"] == "ok" and peak else None, "output_held": True, "source": r["_path"]}


def train_step_rows(df: pd.DataFrame, records: dict[str, list[dict]]) -> list[dict]:
    """Every train step with a peak allocated on record, predicted in allocator blocks."""
    rows = []
    for _, r in (df[df["label"] == "train_step"].iterrows() if not df.empty else []):
        if r["model"] is not None and r["batch"] is not None:
            rows.append({"experiment": "memory_profiling", "size": r["size"], "implementation": r["implementation"],
                         "precision": r["precision"], "context": int(r["context"]), "compiled": False,
                         "configuration": "eager", "status": r["status"], "inputs": _profiled_inputs(r),
                         "measured": r["peak_alloc"] if r["status"] == "ok" and is_measured(r["peak_alloc"]) else None,
                         "output_held": False, "source": r["source"]})
    for experiment in TRAIN_STEP_EXPERIMENTS[1:]:
        rows += [x for x in (_record_row(r) for r in records.get(experiment, [])) if x]
    for x in rows:
        x["params"] = accounting.param_count(x["inputs"]["spec"])
        x["pred"] = accounting_peak.predicted_peak_bytes(**x["inputs"], output_held=x["output_held"])
        x["ratio"] = x["measured"] / x["pred"]["allocated"] if x["measured"] else None
    order = {e: i for i, e in enumerate(TRAIN_STEP_EXPERIMENTS)}
    return sorted(rows, key=lambda x: (order.get(x["experiment"], 99), x["implementation"], x["precision"],
                                       x["params"], x["context"]))


def train_step_table(rows: list[dict]) -> Table | None:
    rows = [x for x in rows if x["measured"] is not None or x["status"] != "ok"]
    if not rows:
        return None
    unit, scale = byte_unit([x["pred"]["allocated"] for x in rows])
    cells = []
    for x in rows:
        measured = Cell(in_unit(x["measured"], scale)) if x["measured"] else status_cell(x["status"])
        cells.append([Cell(x["experiment"]), Cell(str(x["size"])), Cell(f"{x['implementation']}, {x['precision']}"),
                      Cell(str(x["context"])), Cell(x["configuration"]), Cell(x["pred"]["moment"]),
                      Cell(in_unit(x["pred"]["allocated"], scale)), measured,
                      Cell("–" if x["ratio"] is None else sig(x["ratio"], 3))])
    return Table(
        title=f"Every train step against the formula: {PEAK_ALLOCATED}",
        columns=["experiment", "size", "implementation, precision", "context", "configuration", "peak at",
                 PREDICTED, PEAK_ALLOCATED, "measured / predicted"],
        units=["", "", "", "tokens", "", "", unit, unit, "×"], rows=cells, sources=sorted(x["source"] for x in rows),
        note=(f"{PREDICTED}: the formula's tensors at the moment of the step that holds the most (peak at), each "
              f"counted at the block the CUDA caching allocator gives it, which is what {PEAK_ALLOCATED} "
              "(torch.cuda.max_memory_allocated over the warm-up and measured steps; for memory_profiling's rows over the "
              "recorded steps alone, its peak reset after the warm-up) counts; a torch.compile row "
              "counts the activations its compiled graph saves, not the eager graph's"),
    )


def _span(values: list[float]) -> dict:
    return {"min": sig(min(values), 3), "max": sig(max(values), 3), "n": len(values),
            "within": all(abs(v - 1) <= TOLERANCE for v in values)}


def accounting_analysis(items: list[dict], steps: list[dict]) -> dict:
    """The ranges the accounting paragraphs quote."""
    out: dict = {"tolerance": f"{TOLERANCE:.2f}"}
    requested = [i["ratio"] for i in items if i["ratio"] is not None]
    if requested:
        out["requested"] = _span(requested)
    eager = [x for x in steps if x["ratio"] is not None and not x["compiled"]]
    if eager:
        out["eager"] = {**_span([x["ratio"] for x in eager]),
                        "experiments": sorted({x["experiment"] for x in eager}, key=TRAIN_STEP_EXPERIMENTS.index),
                        "optimizer": sum(x["pred"]["moment"] == "optimizer step" for x in eager),
                        "backward": sum(x["pred"]["moment"] != "optimizer step" for x in eager)}
    compiled = [x for x in steps if x["ratio"] is not None and x["compiled"]]
    if compiled:
        out["compiled"] = {**_span([x["ratio"] for x in compiled]),
                           "experiments": sorted({x["experiment"] for x in compiled}, key=TRAIN_STEP_EXPERIMENTS.index),
                           "optimizer": sum(x["pred"]["moment"] == "optimizer step" for x in compiled),
                           "backward": sum(x["pred"]["moment"] != "optimizer step" for x in compiled),
                           "outside": [_where(x) for x in compiled if abs(x["ratio"] - 1) > TOLERANCE]}
    return out


def _where(x: dict) -> str:
    return (f"{x['experiment']} {x['size']}, context {x['context']} ({x['implementation']}, {x['precision']}, "
            f"{x['configuration']}): {sig(x['ratio'], 3)}×")
