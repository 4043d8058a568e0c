"""The cells that did not fit their card, as the answers state them: each out-of-memory record that
carries the analytic bytes of its step (``data.memory_needed``, :mod:`cs336report.accounting.fits`),
whether it was predicted or measured, what its step needs at its peak and by part, and what an 80 GB
card would need."""

from __future__ import annotations

from ..accounting.fits import CARD_BYTES
from .tables import Num, fmt_bytes

PART_WORDS = {"parameters": "weights", "gradients": "gradients", "optimizer_state": "AdamW's moments",
              "optimizer_temporary": "AdamW's temporary", "autocast_casts": "autocast's weight copies",
              "activations": "saved activations", "logits": "logits", "temporaries": "attention temporaries",
              "workspace": "cuBLAS workspace"}
MODE_WORDS = {"forward": "forward pass", "forward_backward": "forward and backward pass", "train_step": "full step"}


def _label(config: dict) -> str:
    grad = " under no_grad" if config.get("grad") == "no_grad" else ""
    return (f"The {config.get('precision', 'fp32')} {config.get('size')} {MODE_WORDS.get(config.get('mode'), '')}{grad} "
            f"at context {config.get('context')}")


def does_not_fit(records: list[dict]) -> list[dict]:
    """One row per out-of-memory record with its analytic bytes, largest need first."""
    rows = []
    for r in records:
        needed = (r.get("data") or {}).get("memory_needed")
        if r["status"] != "oom" or not isinstance(needed, dict):
            continue
        need = max(needed["peak_bytes"], needed["certain_bytes"])
        parts = [{"part": PART_WORDS.get(k, k), "bytes": fmt_bytes(v)}
                 for k, v in sorted(needed["parts"].items(), key=lambda kv: -kv[1])]
        card = needed.get("device_memory_bytes")
        rows.append({"cell": _label(r.get("config") or {}), "predicted": bool(needed["predicted"]),
                     "need_bytes": need, "needed": Num(fmt_bytes(need), r.get("_path")), "parts": parts,
                     "certain": fmt_bytes(needed["certain_bytes"]), "card_80": fmt_bytes(CARD_BYTES),
                     "short": fmt_bytes(needed["short_of_card_bytes"]) if needed["short_of_card_bytes"] else None,
                     "cards": needed["cards_of_80gb"], "card": fmt_bytes(card) if card else None})
    return sorted(rows, key=lambda row: -row["need_bytes"])
