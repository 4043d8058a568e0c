"""Short dtype names, and (a) of benchmarking_mixed_precision: the dtypes autocast gives the ToyModel."""

from __future__ import annotations

from ....records.shapes import typed
from ...tables import Cell, Table, status_cell

SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
LOW = ("float16", "bfloat16")


def short(dtype: str) -> str:
    return SHORT.get(dtype, dtype)


COMPONENTS = (
    ("model parameters, inside the autocast context", "parameter", None),
    ("fc1 output", None, "fc1 output"),
    ("LayerNorm input (ReLU output)", None, "ln input"),
    ("LayerNorm output", None, "ln output"),
    ("logits (fc2 output)", None, "logits"),
    ("loss", None, "loss"),
    ("gradients of the parameters", "gradient", None),
)


def _dtypes_of(rows: list[dict], kind: str | None, component: str | None) -> list[str]:
    hits = [r["dtype"] for r in rows if (kind and r["kind"] == kind) or (component and r["component"] == component)]
    return sorted(set(hits))


def dtypes_part(records: list[dict]) -> dict | None:
    records = sorted(records, key=lambda r: (r["config"]["device"] != "cuda", r["config"]["device"],
                                             r["config"]["dtype"] != "fp16"))
    if not records:
        return None
    columns, observed = [], []
    for r in records:
        d = typed(r)
        device = r["config"]["device"]
        name = d.device_name
        columns.append(f"{device} {r['config']['dtype']} autocast")
        observed.append({
            "device": device, "device_label": f"{device} ({name})" if name else device, "dtype": r["config"]["dtype"],
            "status": r["status"] if r["status"] != "ok" else d.status or "ok", "error": r.get("error") or d.error,
            "values": {label: _dtypes_of(d.rows or [], kind, comp) for label, kind, comp in COMPONENTS},
            "autocast_dtype": d.autocast_dtype, "source": r["_path"],
        })
    rows = []
    for label, _, _ in COMPONENTS:
        row = [Cell(label)]
        for o in observed:
            if o["status"] != "ok":
                row.append(status_cell(o["status"]))
            else:
                values = ", ".join(short(t) for t in o["values"][label])
                row.append(Cell(values, source=o["source"]) if values else Cell("–"))
        rows.append(row)
    table = Table(title="dtypes observed under autocast (ToyModel)", columns=["tensor"] + columns, rows=rows,
                  sources=[o["source"] for o in observed],
                  note="recorded by forward hooks and after backward; parameters are read inside the autocast context")
    ok = [o for o in observed if o["status"] == "ok"]

    def every(label: str, want) -> bool:
        return bool(ok) and all(o["values"][label] and all(want(t, o) for t in o["values"][label]) for o in ok)

    low = lambda t, o: short(t) == o["dtype"]  # noqa: E731
    fp32 = lambda t, o: t == "float32"  # noqa: E731
    ln = []
    for device in dict.fromkeys(o["device"] for o in ok):
        mine = [o for o in ok if o["device"] == device]
        ln.append({"device": mine[0]["device_label"],
                   "cases": [{"dtype": o["dtype"], "ln": ", ".join(short(t) for t in o["values"]["LayerNorm output"]),
                              "ln_fp32": o["values"]["LayerNorm output"] == ["float32"]} for o in mine]})
    ln_fp32 = {c["ln_fp32"] for group in ln for c in group["cases"]}
    first = next((r["data"] for r in records if r["data"]), {})
    analysis = {
        "model": {k: first.get(k, "?") for k in ("in_features", "out_features", "batch")},
        "devices": list(dict.fromkeys(o["device_label"] for o in observed)),
        "params_fp32": every("model parameters, inside the autocast context", fp32),
        "linear_low": every("fc1 output", low) and every("logits (fc2 output)", low),
        "loss_fp32": every("loss", fp32), "grads_fp32": every("gradients of the parameters", fp32),
        "ln": ln, "ln_differs": len(ln_fp32) > 1,
        "not_ok": [{"column": c, "status": o["status"], "error": o["error"]} for c, o in zip(columns, observed)
                   if o["status"] != "ok"],
    }
    return {"table": table, "analysis": analysis}
