"""Whose implementation an experiment runs: ours (built-in) or a student's, through the handout's adapters.

The handout's ``tests/adapters.py`` is the one interface to a student's FlashAttention-2,
DDP wrappers and sharded optimizer. One config key names the student's assignment checkout::

    student:
      checkout: path/to/assignment2-systems     # its tests/adapters.py and cs336-basics/

Experiments ask :func:`implementation` for a piece (a name of :data:`PIECES`) and never import
ours directly::

    impl = student.implementation("flash_triton", cell.get("student"))
    if not impl:                     # a NotImplementedAdapter: the adapter's name and why
        ...                          # the cell is "not implemented" (raise impl.error())
    Flash, provenance = impl         # the autograd.Function class; "built-in" or "<checkout>:<adapter>"

With no checkout, the built-in pieces come through our own adapters (:mod:`cs336report.student.adapters`).
An adapter that raises ``NotImplementedError`` or returns the wrong kind of object resolves to a
:class:`NotImplementedAdapter`: our implementation never stands in for the student's.

The config names the checkout without importing it (:mod:`cs336report.config.checkout`);
:func:`cs336report.student.check.check_checkout` runs before any cell, in the workflow's first
rule (check_student) and in ``python -m cs336report check-config``: it imports the adapters,
checks each adapter's signature, and runs every implemented piece once on the CPU (a tiny forward
and backward; the distributed pieces in a one-process gloo group), raising :class:`StudentError`
whose message names the key, the adapter and the fix.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import torch

from ..config.checkout import (  # noqa: F401  (the checkout's names: callers reach them here)
    ADAPTERS_FILE,
    BASICS_DIR,
    CHECK_RECORD,
    DEFAULT_FACTORY,
    KEY,
    StudentError,
    checkout_paths,
    source_hash,
)
from ..lm.model_paths import add_paths

BUILTIN = "built-in"


@dataclass(frozen=True)
class Piece:
    """One implementation the handout asks for: its adapter, the hooks beside it, the kind it returns."""

    adapter: str
    problem: str
    kind: str  # "autograd_function" | "module" | "optimizer"
    args: tuple = ()  # positional parameters the handout's tests pass
    hooks: tuple = ()


PIECES = {
    "flash_pytorch": Piece("get_flashattention_autograd_function_pytorch", "flash_forward", "autograd_function"),
    "flash_triton": Piece("get_flashattention_autograd_function_triton", "flash_forward", "autograd_function"),
    "ddp_individual_parameters": Piece("get_ddp_individual_parameters", "ddp_overlap_individual_parameters", "module",
                                       ("module",), ("ddp_individual_parameters_on_after_backward",)),
    "ddp_bucketed": Piece("get_ddp_bucketed", "ddp_overlap_bucketed", "module", ("module", "bucket_size_mb"),
                          ("ddp_bucketed_on_after_backward", "ddp_bucketed_on_train_batch_start")),
    "sharded_optimizer": Piece("get_sharded_optimizer", "optimizer_state_sharding", "optimizer",
                               ("params", "optimizer_cls")),
}
HOOK_ARGS = ("ddp_model", "optimizer")
KINDS = {"autograd_function": "a torch.autograd.Function subclass (the class, not an instance)",
         "module": "a wrapper of the given module (a torch.nn.Module, or a callable with module, parameters() "
                   "and named_parameters(), as the handout's DDP tests use it)",
         "optimizer": "a torch.optim.Optimizer"}


@dataclass(frozen=True)
class Implementation:
    """A resolved piece: ``obj`` (the autograd.Function class, or the adapter that wraps a module or
    builds an optimizer), its ``provenance`` ("built-in" or "<checkout>:<adapter>") and ``hooks``
    (the handout's on_after_backward / on_train_batch_start adapters, by name)."""

    piece: str
    obj: object
    provenance: str
    hooks: dict = field(default_factory=dict)
    adapter: str | None = None  # the adapter's name where the edition's differs from PIECES' (2026 get_ddp)

    def __iter__(self):
        return iter((self.obj, self.provenance))

    def __bool__(self) -> bool:
        return True


class AdapterNotImplemented(RuntimeError):
    """Raised by an experiment for a piece that is not implemented; the runner records the cell so."""

    result_status = "not_implemented"  # the status of the cell that raised it (see runner.run_cell)


@dataclass(frozen=True)
class NotImplementedAdapter:
    """A piece the student has not implemented: the adapter's name, why, and whose adapters."""

    piece: str
    adapter: str
    reason: str
    provenance: str

    def __bool__(self) -> bool:
        return False

    def error(self) -> AdapterNotImplemented:
        return AdapterNotImplemented(f"{self.adapter} is not implemented ({self.provenance}): {self.reason}")

    def as_dict(self) -> dict:
        return {"piece": self.piece, "adapter": self.adapter, "reason": self.reason, "provenance": self.provenance}


class ProbeFailed(RuntimeError):
    """Raised for a piece whose probe failed in check_student; the runner records the cell as an error
    naming the probe's message."""

    result_status = "error"


@dataclass(frozen=True)
class FailedAdapter(NotImplementedAdapter):
    """A piece whose probe failed (its verdict ``error``): its cells are error records with the probe's message."""

    def error(self) -> ProbeFailed:
        return ProbeFailed(f"the check of the checkout failed for this piece ({self.provenance}): {self.reason}")


# --------------------------------------------------------------------------- loading a checkout


ADAPTERS_MODULE = "cs336report_student_adapters_"  # the prefix of the name a checkout's adapters load under


@cache
def load_adapters(checkout: str):
    """The checkout's ``tests/adapters.py`` as a module of its own name (not ``tests.adapters``)."""
    path = Path(checkout).resolve() / ADAPTERS_FILE
    add_paths(checkout_paths(checkout))
    name = f"{ADAPTERS_MODULE}{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def class_name(obj) -> str:
    """The dotted name of ``obj``'s class (``obj`` itself where it is a class), as the answers name it:
    a class defined in a checkout's adapters by the module name its tests import (``tests.adapters``)."""
    cls = obj if isinstance(obj, type) else type(obj)
    module = cls.__module__
    if module.startswith(ADAPTERS_MODULE):
        module = ".".join(ADAPTERS_FILE.with_suffix("").parts)
    return f"{module}.{cls.__qualname__}"


def _adapters_module(student: dict | None):
    if not student:
        from . import adapters

        return adapters, BUILTIN
    return load_adapters(student["checkout"]), student["name"]


def with_verdicts(cell: dict, record: str | Path = CHECK_RECORD) -> dict:
    """``cell`` with each piece's verdict of its student's checkout (``student["adapters"]``), read from
    the check_student rule's ``record`` (an input of every cell that runs a checkout), where it
    checked this checkout at this source hash; else ``cell`` as it is."""
    student = cell.get("student")
    if not student or "adapters" in student or not Path(record).is_file():
        return cell
    checked = (json.loads(Path(record).read_text()) or {}).get("student") or {}
    if (checked.get("checkout"), checked.get("sha256_16")) != (student.get("checkout"), student.get("sha256_16")):
        return cell
    return {**cell, "student": {**student, "adapters": checked.get("adapters") or {}}}


# --------------------------------------------------------------------------- resolving


def _wrong_kind(piece: Piece, obj) -> str | None:
    if piece.kind == "autograd_function":
        if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
            return None
        return f"returned {obj!r}, not {KINDS[piece.kind]}"
    if not callable(obj):
        return f"is a {type(obj).__name__}, not a function"
    return None


def edition_pieces(edition: int) -> dict[str, Piece]:
    """The pieces of ``edition``'s tests/adapters.py, read from the edition registry (2025's are
    :data:`PIECES`; 2026 reaches the overlapping DDP through ``get_ddp`` and adds ``fsdp``)."""
    from .. import editions

    return {name: Piece(p.adapter.name, p.problems[0], p.adapter.returns, p.adapter.positional,
                        tuple(h.name for h in p.hooks)) for name, p in editions.get(edition).pieces.items()}


def implementation(name: str, student: dict | None = None, piece: Piece | None = None
                   ) -> Implementation | NotImplementedAdapter:
    """The implementation of piece ``name``: the student's through their adapters if ``student``
    (a cell's ``student`` entry, from :func:`check_checkout`), else ours. A piece whose verdict in
    ``student["adapters"]`` (:func:`with_verdicts`) is ``error`` gives a :class:`FailedAdapter`.
    ``piece``: the piece as another edition names it (:func:`edition_pieces`); else ``PIECES[name]``."""
    piece = piece or PIECES[name]
    module, who = _adapters_module(student)
    provenance = BUILTIN if who == BUILTIN else f"{who}:{piece.adapter}"

    def missing(reason: str) -> NotImplementedAdapter:
        return NotImplementedAdapter(name, piece.adapter, reason, provenance)

    verdict = ((student or {}).get("adapters") or {}).get(name) or {}
    if verdict.get("status") == "error":  # its probe failed in check_student: the cell says so, unrun
        return FailedAdapter(name, piece.adapter, verdict["message"], provenance)
    adapter = getattr(module, piece.adapter, None)
    if adapter is None:
        return missing(f"{ADAPTERS_FILE} defines no {piece.adapter}")
    hooks = {}
    for hook in piece.hooks:
        if getattr(module, hook, None) is None:
            return missing(f"{ADAPTERS_FILE} defines no {hook}")
        hooks[hook] = getattr(module, hook)
    if piece.kind != "autograd_function":  # called with the module/params by the experiment
        return Implementation(name, adapter, provenance, hooks, piece.adapter)
    try:
        obj = adapter()
    except NotImplementedError as exc:
        return missing(f"raises NotImplementedError{f' ({exc})' if str(exc) else ''}")
    wrong = _wrong_kind(piece, obj)
    return missing(wrong) if wrong else Implementation(name, obj, provenance, hooks, piece.adapter)


def call(impl: Implementation, *args, **kwargs):
    """Call a wrapping adapter (DDP, sharded optimizer); NotImplementedError or a wrong kind of result
    becomes :class:`AdapterNotImplemented` naming the adapter."""
    piece = PIECES[impl.piece] if impl.piece in PIECES else None
    adapter = impl.adapter or piece.adapter
    kind = piece.kind if piece else "module"
    try:
        out = impl.obj(*args, **kwargs)
    except NotImplementedError as exc:
        detail = f": {exc}" if str(exc) else ""
        raise AdapterNotImplemented(f"{adapter} raises NotImplementedError{detail} ({impl.provenance})") from None
    if not (acts_as_wrapper(out) if kind == "module" else isinstance(out, torch.optim.Optimizer)):
        raise AdapterNotImplemented(f"{adapter} returned {type(out).__name__}, not {KINDS[kind]} "
                                    f"({impl.provenance})")
    return out


def acts_as_wrapper(obj) -> bool:
    """True for an ``nn.Module``, or any object the handout's DDP tests can use as one: callable, with
    the wrapped ``module``, ``parameters()`` and ``named_parameters()`` (all those tests call)."""
    if isinstance(obj, torch.nn.Module):
        return True
    return callable(obj) and hasattr(obj, "module") and all(
        callable(getattr(obj, name, None)) for name in ("parameters", "named_parameters"))


def hook(impl: Implementation, name: str):
    """The handout's hook adapter ``name`` of ``impl`` (``ddp_bucketed_on_after_backward``, ...), to be
    called as ``hook(ddp_model, optimizer)``; NotImplementedError becomes :class:`AdapterNotImplemented`
    naming the hook."""
    function = impl.hooks[name]
    who = impl.provenance if impl.provenance == BUILTIN else impl.provenance.rsplit(":", 1)[0]
    provenance = who if who == BUILTIN else f"{who}:{name}"

    def run(ddp_model, optimizer):
        try:
            return function(ddp_model, optimizer)
        except NotImplementedError as exc:
            detail = f": {exc}" if str(exc) else ""
            raise AdapterNotImplemented(f"{name} raises NotImplementedError{detail} ({provenance})") from None

    return run


@contextmanager
def adapter_errors():
    """Around code that runs the student's pieces in other processes (the launched ranks of a
    distributed cell): a failure that names the status ``not_implemented`` (a rank's
    AdapterNotImplemented, passed on by :func:`cs336report.distributed.launch.launch`) is raised
    here as :class:`AdapterNotImplemented` with the rank's own message, naming the adapter."""
    try:
        yield
    except AdapterNotImplemented:
        raise
    except Exception as exc:
        if getattr(exc, "result_status", None) != "not_implemented":
            raise
        raise AdapterNotImplemented(getattr(exc, "message", None) or str(exc)) from None
