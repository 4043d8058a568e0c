"""The records of an edition of the handout: frozen dataclasses built from its YAML file.

An :class:`Edition` holds its problems in handout order (each with its sub-questions and the form
each deliverable takes), its model table, the grid of cells the handout asks for, the adapters of
its ``tests/adapters.py`` and the test cases of its ``tests/``. :mod:`cs336report.editions.load`
builds them; nothing here reads a file or imports torch.

    edition = editions.get(2025)
    edition.problem("memory_profiling").subquestions      # ('a', 'b', 'c', 'd', 'e')
    edition.model("2.7B").d_head                          # 80
    [c.name for c in edition.test_suites("1.0.0")[0].cases]
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

Count = int | tuple[int, int] | None  # how many: a number, a (min, max) range, or None where unstated


def release_key(release: str) -> tuple[int, ...]:
    """``"26.1.1"`` -> ``(26, 1, 1)``, to order releases."""
    return tuple(int(part) for part in release.split("."))


def freeze(value: Any) -> Any:
    """A read-only copy: mappings become MappingProxyType, lists tuples (nested)."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of a frozen value (dicts and lists), for code that edits or validates it."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return copy.deepcopy(value)


@dataclass(frozen=True)
class Form:
    """One kind of thing a deliverable holds (``sentences``, ``table``, ``images``, ``tests``, ...) and how many."""

    kind: str
    count: Count

    def __str__(self) -> str:
        if self.count is None:
            return self.kind
        if isinstance(self.count, tuple):
            return f"{self.count[0]}-{self.count[1]} {self.kind}"
        return f"{self.count} {self.kind}"


@dataclass(frozen=True)
class Part:
    """A sub-question: its letter (``""`` for a problem of one deliverable), the report's heading for
    it, what it asks (our words) and the form of its deliverable."""

    letter: str
    heading: str
    asks: str
    form: tuple[Form, ...]

    @property
    def tested(self) -> bool:
        """Answered by the handout's tests of an implementation."""
        return any(f.kind == "tests" for f in self.form)


@dataclass(frozen=True)
class Problem:
    """A problem of the handout, as its numbered box names it."""

    id: str
    number: int
    title: str
    points: int
    section: str
    rule: str  # the rule whose records answer it: its own name, or handout_tests
    experiments: tuple[str, ...]  # the experiments (rules) whose records the answer reads
    planned: tuple[str, ...]  # experiments it will read that do not exist yet
    parts: tuple[Part, ...]
    open: tuple[str, ...]  # settings the handout leaves open
    _fixed: Mapping = field(repr=False, compare=False)

    @property
    def subquestions(self) -> tuple[str, ...]:
        """The sub-question letters, ``()`` for a problem of one deliverable."""
        return tuple(p.letter for p in self.parts if p.letter)

    @property
    def fixed(self) -> dict:
        """The settings the handout fixes for this problem (a fresh copy)."""
        return thaw(self._fixed)

    @property
    def answered_by_tests(self) -> bool:
        """Every part is answered by the handout's tests (one shared builder and template serve it)."""
        return all(p.tested for p in self.parts)

    def part(self, letter: str = "") -> Part:
        for p in self.parts:
            if p.letter == letter:
                return p
        raise KeyError(f"{self.id} has no sub-question {letter!r} (it has {', '.join(self.subquestions) or 'none'})")


@dataclass(frozen=True)
class Model:
    """A row of the handout's model table."""

    name: str
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def as_config(self) -> dict:
        """The row as workflow/config's ``sizes`` writes one."""
        return {"d_model": self.d_model, "d_ff": self.d_ff, "num_layers": self.num_layers,
                "num_heads": self.num_heads}


@dataclass(frozen=True)
class Adapter:
    """A function of the handout's tests/adapters.py and the call its tests make."""

    name: str
    piece: str  # the implementation it serves (the resolver's name for it, shared across editions)
    returns: str  # autograd_function | module | optimizer | state_dict | nothing
    problems: tuple[str, ...]  # the problems whose tests call it (the piece's main adapter only)
    positional: tuple[str, ...]  # arguments the tests pass by position
    keywords: tuple[str, ...]  # arguments the tests pass by name

    @property
    def builds(self) -> bool:
        """The piece's main adapter (returns the implementation), not a hook beside it."""
        return self.returns in ("autograd_function", "module", "optimizer")


@dataclass(frozen=True)
class Piece:
    """An implementation the handout asks for: its main adapter and the adapters the tests call beside it."""

    name: str
    adapter: Adapter
    hooks: tuple[Adapter, ...]

    @property
    def problems(self) -> tuple[str, ...]:
        return self.adapter.problems


@dataclass(frozen=True)
class TestCase:
    """One pytest item of the handout's tests and what it grades."""

    __test__ = False  # not a pytest test class

    name: str  # as JUnit and pytest name it: the function, then the parametrized id in brackets
    test: str  # the test function
    file: str
    suite: str
    problem: str
    subquestion: str
    piece: str | None
    device: str
    checks: str
    since: str | None
    until: str | None

    def holds_in(self, release: str) -> bool:
        """Whether the tests of ``release`` hold this case."""
        key = release_key(release)
        return ((self.since is None or release_key(self.since) <= key)
                and (self.until is None or key <= release_key(self.until)))


@dataclass(frozen=True)
class TestFile:
    """A test file of a suite and its cases."""

    __test__ = False

    file: str
    cases: tuple[TestCase, ...]


@dataclass(frozen=True)
class TestSuite:
    """The test files one handout_tests job runs, with their cases."""

    __test__ = False

    name: str
    files: tuple[TestFile, ...]

    @property
    def cases(self) -> tuple[TestCase, ...]:
        return tuple(c for f in self.files for c in f.cases)

    def case(self, name: str) -> TestCase:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"suite {self.name} has no case {name}")


@dataclass(frozen=True)
class Edition:
    """One year's handout: everything the workflow, the experiments and the report take from it."""

    id: int
    name: str
    handout: str
    repository: str
    version_line: str
    releases: tuple[str, ...]
    vocab_size: int
    batch_size: int
    context_length: int | None
    models: tuple[Model, ...]
    problems: tuple[Problem, ...]
    adapters: tuple[Adapter, ...]
    source: str  # the YAML file it was read from
    _benchmarking: Mapping = field(repr=False, compare=False)
    _grid: Mapping = field(repr=False, compare=False)
    _suites: tuple[TestSuite, ...] = field(repr=False, compare=False)

    # ------------------------------------------------------------------ problems and models

    def problem(self, problem_id: str) -> Problem:
        for p in self.problems:
            if p.id == problem_id:
                return p
        raise KeyError(f"the {self.id} edition has no problem {problem_id!r}")

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.problems)

    @property
    def points(self) -> int:
        return sum(p.points for p in self.problems)

    def model(self, name: str) -> Model:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"the {self.id} edition's model table has no size {name!r} "
                       f"(it has {', '.join(m.name for m in self.models)})")

    @property
    def benchmarking(self) -> dict:
        """The end-to-end benchmarking settings the handout fixes (warm-up, measured steps, batch, TF32)."""
        return thaw(self._benchmarking)

    @property
    def handout_grid(self) -> dict:
        """The cells the handout asks for, by experiment, in the shape of a workflow/config grid (a fresh copy)."""
        return thaw(self._grid)

    # ------------------------------------------------------------------ the student's code

    @property
    def pieces(self) -> dict[str, Piece]:
        """Each implementation the tests reach through the adapters, by the resolver's name for it."""
        out = {}
        for a in self.adapters:
            if a.builds:
                out[a.piece] = Piece(a.piece, a, tuple(h for h in self.adapters if h.piece == a.piece and not h.builds))
        return out

    def holds(self, release: str) -> bool:
        """Whether ``release`` (a version of the assignment's code) belongs to this edition."""
        line = release_key(self.version_line)
        return release_key(release)[:len(line)] == line

    def tests_release(self, release: str | None = None) -> str:
        """The known release whose tests :meth:`test_suites` describes for ``release``: the newest
        known one not after it (``None``: the newest known)."""
        if release is None:
            return self.releases[-1]
        if not self.holds(release):
            raise ValueError(f"{release} is not a release of the {self.id} edition ({self.version_line}.x)")
        known = [r for r in self.releases if release_key(r) <= release_key(release)]
        if not known:
            raise ValueError(f"{release} is older than every release of the {self.id} edition known here "
                             f"({', '.join(self.releases)})")
        return known[-1]

    def test_suites(self, release: str | None = None) -> tuple[TestSuite, ...]:
        """The handout's test suites as the tests of ``release`` hold them (``None``: the newest known);
        a release newer than the newest known gets that one's (:meth:`tests_release`)."""
        known = self.tests_release(release)
        suites = []
        for suite in self._suites:
            files = tuple(TestFile(f.file, tuple(c for c in f.cases if c.holds_in(known))) for f in suite.files)
            suites.append(TestSuite(suite.name, tuple(f for f in files if f.cases)))
        return tuple(suites)

    def suite(self, name: str, release: str | None = None) -> TestSuite:
        for s in self.test_suites(release):
            if s.name == name:
                return s
        raise KeyError(f"the {self.id} edition has no test suite {name!r}")
