"""nsys_profile's contexts where the grid searches for the longest that fit (``longest_fitting``): per
size, which contexts were profiled, which ran out of memory (measured, or predicted by the accounting
and not run) and which were not needed, from the parsed records' ``fit_search`` and statuses."""

from __future__ import annotations


def fit_searches(records: list[dict]) -> list[dict]:
    """One entry per size whose cells searched, in the order of the records' sizes."""
    by_size: dict[str, dict] = {}
    for r in records:
        config = r.get("config") or {}
        if not config.get("longest_fitting"):
            continue
        entry = by_size.setdefault(str(config.get("size")), {"size": str(config.get("size")),
                                                              "keep": config["longest_fitting"], "cells": []})
        predicted = r["status"] == "oom" and "predicted" in str(r.get("error") or "")
        entry["cells"].append({"context": int(config["context"]), "status": r["status"], "predicted": predicted})
    out = []
    for entry in by_size.values():
        cells = sorted(entry["cells"], key=lambda c: -c["context"])
        fitted = [c["context"] for c in cells if c["status"] == "ok"]
        out.append({"size": entry["size"], "keep": entry["keep"], "profiled": fitted,
                    "longest": fitted[0] if fitted else None,
                    "oom_measured": [c["context"] for c in cells if c["status"] == "oom" and not c["predicted"]],
                    "oom_predicted": [c["context"] for c in cells if c["predicted"]],
                    "skipped": [c["context"] for c in cells if c["status"] == "skipped"],
                    "failed": [c["context"] for c in cells if c["status"] not in ("ok", "oom", "skipped")]})
    return out
