"""The shape of a §8 derivation: steps, the parts (sub-questions) they answer, and the whole problem.

A :class:`Derivation` is what each problem function of this package returns. It is frozen data, and
``as_dict`` gives plain JSON (``from_dict`` reads it back), so an experiment cell can store it in its
record and the report render it step by step:

    {"problem": "data_parallel_calcs", "section": "8.2", "setting": {...},
     "parts": [{"part": "a", "ask": "...", "steps": [step, ...], "answers": [step, ...]}, ...]}

A step is ``{"what", "kind", "sympy", "latex", "value", "unit", "note"}``: what it computes in our
words; ``kind`` "value" (an expression), "bound" (an inequality) or "equation" (a matrix equation);
the expression as ``sympy.sstr`` (which ``sympy.sympify`` reads back with :data:`SYMBOLS`, for
values and bounds) and as LaTeX; its number where the setting gives every symbol in it (of a bound,
its right-hand side), else None; the unit of that number; a remark or the one-sentence reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import sympy as sp

from .setting import SYMBOLS, Setting

KINDS = ("value", "bound", "equation")


@dataclass(frozen=True)
class Step:
    what: str
    kind: str
    sympy: str
    latex: str
    value: float | None = None
    unit: str = ""
    note: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {self.kind!r}")


@dataclass(frozen=True)
class Part:
    part: str  # the sub-question's letter; "" for a problem without sub-questions
    ask: str  # what the sub-question asks, in our words
    steps: tuple[Step, ...]
    answers: tuple[Step, ...]  # one, or two where the sub-question asks two things, in its order


@dataclass(frozen=True)
class Derivation:
    problem: str
    section: str  # of the 2026 handout
    setting: dict
    parts: tuple[Part, ...]

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Derivation":
        parts = tuple(Part(p["part"], p["ask"], tuple(Step(**s) for s in p["steps"]),
                           tuple(Step(**s) for s in p["answers"])) for p in data["parts"])
        return cls(data["problem"], data["section"], data["setting"], parts)

    def part(self, letter: str) -> Part:
        return next(p for p in self.parts if p.part == letter)


def value(setting: Setting, what: str, expr, unit: str = "", note: str = "") -> Step:
    """A step that computes ``expr``."""
    expr = sp.sympify(expr)
    return Step(what, "value", sp.sstr(expr), sp.latex(expr), setting.evaluate(expr), unit, note)


def bound(setting: Setting, what: str, lhs, rhs, unit: str = "devices", note: str = "") -> Step:
    """A step that states ``lhs <= rhs``; its value is the number of ``rhs``."""
    relation = sp.Le(lhs, rhs, evaluate=False)
    return Step(what, "bound", sp.sstr(relation), sp.latex(relation), setting.evaluate(rhs), unit, note)


def equation(what: str, text: str, latex: str, note: str = "") -> Step:
    """A step that states a matrix equation, already written out (see :mod:`.ffn`)."""
    return Step(what, "equation", text, latex, None, "", note)


def with_note(step: Step, note: str) -> Step:
    return Step(step.what, step.kind, step.sympy, step.latex, step.value, step.unit, note)


def parse(step: Step | dict):
    """The sympy expression (or relation) of a value or bound step, read back from its text."""
    kind, text = (step["kind"], step["sympy"]) if isinstance(step, dict) else (step.kind, step.sympy)
    if kind == "equation":
        raise ValueError("an equation step is matrix algebra written out, not a sympy expression")
    return sp.sympify(text, locals=dict(SYMBOLS))
