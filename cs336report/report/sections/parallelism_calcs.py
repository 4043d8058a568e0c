"""The 2026 handout's calculation problems (§8, problems 22-26): one builder and one template pair for all.

A problem whose registry entry names the rule ``parallelism_calcs`` (:mod:`cs336report.names.parallelism`)
is answered by its record, ``results/parallelism_calcs/<problem>.json``: the sympy derivation of
:mod:`cs336report.accounting.parallelism` as JSON (docs/parallelism-calcs.md). :func:`section` gives such
a problem what a section module has (``EXPERIMENTS``, ``build``, ``skip_reason``) and the name of its
partials, ``templates/answers/parallelism_calcs.j2`` (each sub-question's answers with their reasons)
and ``templates/sections/parallelism_calcs.j2`` (every step of each sub-question, a table each).
The registry gives the sub-questions and their headings; the record every expression and number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ...editions import Problem
from ...names.parallelism import RULE
from ...records.shapes import typed
from ..tables import Num, sig, table_from_frame

TEMPLATE = "parallelism_calcs"  # templates/answers/parallelism_calcs.j2, templates/sections/parallelism_calcs.j2
KIND_WORDS = {"value": "expression", "bound": "inequality", "equation": "equation"}


def value_text(value, unit: str) -> str:
    """A step's number with its unit (a bound's: its right-hand side), or "" where it has none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    text = f"{value:,.0f}" if float(value).is_integer() and abs(value) < 1e15 else sig(value, 4)
    return f"{text} {unit}".strip()


def _step(step: dict, source: str) -> dict:
    """A step of the record with its number formatted and linked to the record."""
    number = value_text(step["value"], step["unit"])
    return {**step, "value_text": Num(number, source) if number else ""}


def _table(letter: str, steps: list[dict], answers: list[dict], source: str) -> object:
    """Every step of a sub-question, then its answers: what, its form, its number, its note."""
    rows = [(s, KIND_WORDS[s["kind"]]) for s in steps] + [(s, f"answer ({KIND_WORDS[s['kind']]})") for s in answers]
    frame = pd.DataFrame([{"step": s["what"], "kind": kind, "sympy": s["sympy"], "LaTeX": s["latex"],
                           "value": s["value_text"] or "–", "note": s["note"] or "–"} for s, kind in rows])
    title = f"({letter}) step by step" if letter else "Step by step"
    return table_from_frame(frame, title, sources=[source],
                            note="each line follows from those above it; the last are the answers; a value needs a number for every symbol")


def record_of(ctx, problem_id: str) -> dict | None:
    """The problem's ok record of this run, or None."""
    found = [r for r in ctx.records(RULE) if r["status"] == "ok" and typed(r).problem == problem_id]
    return found[0] if found else None


def build(ctx, problem: Problem) -> dict:
    """The problem's derivation from its record, laid out by the registry's sub-questions."""
    r = record_of(ctx, problem.id)
    if r is None:
        return {"ok": False, "id": problem.id}
    source, derived = r["_path"], {p["part"]: p for p in r["data"]["parts"]}
    parts = []
    for p in problem.parts:
        found = derived.get(p.letter)
        if found is None:
            parts.append({"letter": p.letter, "heading": p.heading, "ok": False})
            continue
        steps, answers = ([_step(s, source) for s in found[key]] for key in ("steps", "answers"))
        parts.append({"letter": p.letter, "heading": p.heading, "ok": True, "ask": found["ask"], "answers": answers,
                      "steps": steps, "table": _table(p.letter, steps, answers, source)})
    setting = r["data"]["setting"]
    values = ", ".join(f"{k} = {v:g}" for k, v in sorted(setting["values"].items())) or "none: every symbol stays symbolic"
    return {"ok": True, "id": problem.id, "section": r["data"]["section"], "parts": parts, "source": source,
            "settings": [{"label": "bytes per value (FP16)", "value": str(setting["bytes_per_value"]), "handout": "2",
                          "differs": setting["bytes_per_value"] != 2},
                         {"label": "FLOPs per multiply-add", "value": str(setting["flops_per_multiply_add"]),
                          "handout": "2", "differs": setting["flops_per_multiply_add"] != 2},
                         {"label": "numbers given", "value": values, "handout": "", "differs": False},
                         {"label": "ring's (N − 1)/N taken as 1", "value": "yes" if setting["many_devices"] else "no",
                          "handout": "", "differs": False}]}


def skip_reason(ctx) -> str:
    return (f"no record of the {RULE} rule: its cells exist only for an edition with calculation problems "
            "(config handout: 2026)")


@dataclass(frozen=True)
class Section:
    """What a section module has, for one calculation problem."""

    problem: Problem
    TEMPLATE: str = TEMPLATE

    @property
    def EXPERIMENTS(self) -> tuple[str, ...]:  # noqa: N802 (a section module's name for it)
        return self.problem.experiments

    def build(self, ctx) -> dict:
        return build(ctx, self.problem)

    def skip_reason(self, ctx) -> str:
        return skip_reason(ctx)


def section(problem: Problem) -> Section:
    """The section of ``problem``, one answered by the rule parallelism_calcs."""
    if problem.rule != RULE:
        raise ValueError(f"{problem.id} is not answered by the rule {RULE}")
    return Section(problem)
