"""The run of a parallelism_calcs cell: one problem's derivation as the data of its record.

:func:`check_shape` states the record's shape (docs/parallelism-calcs.md, "The data shape") and
fails on a derivation that strays from it, so the report reads only what it expects.
"""

from __future__ import annotations

from ...accounting.parallelism import DERIVATIONS, Setting
from ...accounting.parallelism.records import KINDS

STEP_KEYS = {"what": str, "kind": str, "sympy": str, "latex": str, "unit": str, "note": str}


def _check_step(step: dict, where: str) -> None:
    extra, missing = set(step) - {*STEP_KEYS, "value"}, {*STEP_KEYS, "value"} - set(step)
    if extra or missing:
        raise ValueError(f"{where}: keys {sorted(extra)} not expected, {sorted(missing)} missing")
    for key, kind in STEP_KEYS.items():
        if not isinstance(step[key], kind):
            raise ValueError(f"{where}.{key}: a {kind.__name__} expected, not {step[key]!r}")
    if step["kind"] not in KINDS:
        raise ValueError(f"{where}.kind: one of {KINDS} expected, not {step['kind']!r}")
    if step["value"] is not None and not isinstance(step["value"], (int, float)):
        raise ValueError(f"{where}.value: a number or null expected, not {step['value']!r}")
    if not step["what"] or not step["sympy"] or not step["latex"]:
        raise ValueError(f"{where}: what, sympy and latex must not be empty")


def check_shape(data: dict) -> dict:
    """``data`` when it has the shape of a derivation's record, else a ValueError naming where not."""
    if set(data) != {"problem", "section", "setting", "parts"}:
        raise ValueError(f"a derivation has problem, section, setting and parts, not {sorted(data)}")
    if not isinstance(data["parts"], (list, tuple)) or not data["parts"]:
        raise ValueError("parts: a non-empty list expected")
    for i, part in enumerate(data["parts"]):
        if set(part) != {"part", "ask", "steps", "answers"}:
            raise ValueError(f"parts[{i}]: part, ask, steps and answers expected, not {sorted(part)}")
        if not part["answers"]:
            raise ValueError(f"parts[{i}] ({part['part']!r}) has no answer")
        for key in ("steps", "answers"):
            for j, step in enumerate(part[key]):
                _check_step(step, f"parts[{i}].{key}[{j}]")
    return data


def run(cell: dict) -> dict:
    problem = cell["problem"]
    if problem not in DERIVATIONS:
        raise ValueError(f"no derivation of {problem!r}; known: {', '.join(DERIVATIONS)}")
    derivation = DERIVATIONS[problem](Setting.from_dict(cell.get("setting") or {}))
    return check_shape(derivation.as_dict())
