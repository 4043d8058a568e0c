"""Checking a student's checkout before any cell runs: imports, signatures, one tiny run per piece.

The config names the checkout without importing it (:mod:`cs336report.config.checkout`); these
probes run its code, in the workflow's first rule (check_student: ``python -m cs336report
check-student``) and in ``python -m cs336report check-config``, so that a broken checkout stops
the run before any GPU time with a message naming the key and the adapter.
:func:`check_checkout` takes the ``student`` config key and returns its entry with each piece's
verdict (``adapters``), or raises :class:`~cs336report.config.checkout.StudentError` naming the
key, the adapter and the fix; :func:`check_config` runs it and the model's check
(:func:`cs336report.lm.check.check_source`) for a whole config:

* the folder and its ``tests/adapters.py`` exist, and the adapters import;
* every adapter of the handout is defined and accepts the arguments the handout's tests pass;
* every implemented piece runs once on the CPU: FlashAttention-2 forward and backward on
  (2, 32, 16) inputs (Triton only where CUDA is available, or under ``TRITON_INTERPRET=1``),
  each DDP wrapper and the sharded optimizer through one training step of a two-layer MLP in a
  one-process gloo group (the handout's hooks included).

A piece whose adapter raises ``NotImplementedError`` (or returns the wrong kind of object) is not
an error: its verdict is ``not_implemented`` and the cells that need it say so. A piece whose probe
fails otherwise gets the verdict ``error`` with the probe's message; the cells of that piece become
error records naming it (:func:`cs336report.student.resolve.implementation`), and everything else
runs. Only a checkout that does not load at all (no folder, an adapters file that does not import,
a signature the handout's tests cannot call) stops the workflow.

    entry = check_checkout({"checkout": "../assignment2-systems"}, device="cpu")
    entry["adapters"]["flash_pytorch"]["status"]     # "implemented" | "not_implemented" | "error"
"""

from __future__ import annotations

import inspect
import os
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..config.checkout import ADAPTERS_FILE, KEY, ModelError, StudentError, checkout_entry, checkout_paths
from ..machine.time_limit import TimeLimitExceeded, time_limit
from .resolve import (HOOK_ARGS, PIECES, AdapterNotImplemented, call, class_name, edition_pieces, implementation,
                      load_adapters)

IMPORT_TIMEOUT_S = 60  # the default of student.import_timeout_s
PROBE_SHAPE = (2, 32, 16)  # (batch, seq, d): powers of two >= 16, as the handout's tests use


def described(exc: BaseException) -> str:
    """An exception in one line; a SyntaxError (or IndentationError) names the file and line."""
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__} in {exc.filename}, line {exc.lineno}: {exc.msg}"
    return f"{type(exc).__name__}: {str(exc).strip()}"


def _fail(adapter: str, message: str) -> StudentError:
    return StudentError(f"{KEY}: adapter {adapter} ({ADAPTERS_FILE}): {message}")


def _check_signature(module, name: str, args: tuple, kwargs: dict) -> None:
    fn = getattr(module, name, None)
    if fn is None:
        raise _fail(name, f"not defined; restore the handout's {name} (raising NotImplementedError if unfinished)")
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        call_text = ", ".join([*args, *(f"{k}=..." for k in kwargs)])
        raise _fail(name, f"its signature {name}{inspect.signature(fn)} does not accept the handout's call "
                          f"{name}({call_text}) ({exc}); restore the handout's signature") from None
    except ValueError:
        pass  # no signature to read (a builtin): the probe decides


def check_signatures_of(module, edition: int) -> None:
    """Each adapter of ``edition``'s tests/adapters.py (the registry's) accepts the call its tests make."""
    from .. import editions

    for a in editions.get(edition).adapters:
        kwargs = {"lr": 0.1} if a.returns == "optimizer" else {k: None for k in a.keywords}
        _check_signature(module, a.name, a.positional, kwargs)


def checkout_edition(root: Path) -> int:
    """The edition of a checkout's tests/adapters.py (2025 where it tells none: the checks then name
    2025's adapters)."""
    from .. import editions

    try:
        return editions.detect(root)[0].id
    except editions.DetectionError:
        return 2025


def check_signatures(module) -> None:
    for piece in PIECES.values():
        kwargs = {"lr": 0.1} if piece.kind == "optimizer" else {}
        _check_signature(module, piece.adapter, piece.args, kwargs)
        for hook in piece.hooks:
            _check_signature(module, hook, HOOK_ARGS, {})


# --------------------------------------------------------------------------- probes


def probe_flash(cls, device: str) -> dict:
    """One forward and backward of ``cls.apply(q, k, v, False)``: it runs and gives O of q's shape.

    Its accuracy is left to the handout's tests (the entry this feeds is part of every cell).
    """
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(*PROBE_SHAPE, generator=gen).to(device) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    o = cls.apply(q, k, v, False)
    if not isinstance(o, torch.Tensor) or tuple(o.shape) != PROBE_SHAPE:
        got = tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__
        raise ValueError(f"returned {got} for q, k, v of shape {PROBE_SHAPE}; expected O of the same shape")
    try:
        o.backward(do)
        backward = True
    except NotImplementedError:
        backward = False  # the handout allows a forward-only function for flash_forward (a)
    return {"backward": backward}


@contextmanager
def one_process_group():
    """A gloo group of world size 1 for the probes (none is created if one exists already)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        yield
        return
    try:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    except Exception as exc:  # the machine's fault, not the adapter's
        raise StudentError(f"{KEY}: a one-process gloo group, to try the distributed adapters, could not start "
                           f"({type(exc).__name__}: {exc}); set GLOO_SOCKET_IFNAME to a working interface (e.g. lo)") \
            from None
    try:
        yield
    finally:
        dist.destroy_process_group()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def probe_training_step(impl, name: str) -> dict:
    """One step of a two-layer MLP through the DDP wrapper or sharded optimizer ``impl``; the class
    of what its adapter returned."""
    x = torch.randn(3, 4)
    with one_process_group():
        if name == "sharded_optimizer":
            model = _mlp()
            optimizer = call(impl, model.parameters(), torch.optim.SGD, lr=0.1)
            model(x).sum().backward()
            optimizer.step()
            return {"class": class_name(optimizer)}
        args = (1.0,) if name == "ddp_bucketed" else ()
        model = call(impl, _mlp(), *args)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        hooks = impl.hooks
        if "ddp_bucketed_on_train_batch_start" in hooks:
            hooks["ddp_bucketed_on_train_batch_start"](model, optimizer)
        model(x).sum().backward()
        next(h for n, h in hooks.items() if n.endswith("on_after_backward"))(model, optimizer)
        optimizer.step()
    return {"class": class_name(model)}


def _can_run_triton(device: str) -> bool:
    return (device.startswith("cuda") and torch.cuda.is_available()) or os.environ.get("TRITON_INTERPRET") == "1"


def _probe(name: str, impl, device: str, pieces: dict | None = None) -> dict:
    piece = (pieces or PIECES)[name]
    if name == "flash_triton":
        if not _can_run_triton(device):
            return {"probe": "skipped: Triton runs on CUDA (or under TRITON_INTERPRET=1)", "class": class_name(impl.obj)}
        return {"probe": "ran", "class": class_name(impl.obj),
                **probe_flash(impl.obj, "cuda" if device.startswith("cuda") else "cpu")}
    try:
        result = probe_flash(impl.obj, "cpu") if piece.kind == "autograd_function" else probe_training_step(impl, name)
    except AdapterNotImplemented as exc:
        return {"status": "not_implemented", "reason": str(exc)}
    except NotImplementedError as exc:
        return {"status": "not_implemented", "reason": f"raises NotImplementedError when run ({exc})"}
    if piece.kind == "autograd_function":
        result["class"] = class_name(impl.obj)
    return {"probe": "ran", **result}


def check_pieces(student: dict, device: str, pieces: dict | None = None) -> dict:
    """Each piece's verdict: ``implemented`` (with its probe), ``not_implemented`` (with why), or
    ``error`` (with the probe's ``message``: the cells of that piece record it, the rest runs).
    ``pieces``: another edition's (:func:`~cs336report.student.resolve.edition_pieces`); else 2025's."""
    verdicts = {}
    for name, piece in (pieces or PIECES).items():
        what = "a forward and backward on CPU tensors of shape (2, 32, 16)" if piece.kind == "autograd_function" \
            else "one training step of a two-layer MLP in a one-process gloo group"
        try:
            impl = implementation(name, student, piece)
            if not impl:
                verdicts[name] = {"adapter": piece.adapter, "status": "not_implemented", "reason": impl.reason}
                continue
            found = _probe(name, impl, device, pieces)
        except StudentError:
            raise
        except Exception as exc:  # this piece's verdict; the other pieces and the workflow go on
            verdicts[name] = {"adapter": piece.adapter, "status": "error",
                              "message": f"{piece.adapter} ({ADAPTERS_FILE}): {what} raised {described(exc)}"}
            continue
        verdicts[name] = {"adapter": piece.adapter, "status": "implemented", **found}
    return verdicts


def check_checkout(student_config: dict | None, device: str = "cpu") -> dict | None:
    """Check the ``student`` key; return the ``student`` entry cells carry with each piece's verdict
    (``adapters``), or None without a checkout."""
    entry = checkout_entry(student_config)
    if entry is None:
        return None
    root = Path(entry["checkout"])
    limit = (student_config or {}).get("import_timeout_s") or IMPORT_TIMEOUT_S
    try:
        with time_limit(limit, f"importing {root / ADAPTERS_FILE}"):
            module = load_adapters(str(root))
    except TimeLimitExceeded as exc:
        raise StudentError(f"{KEY}: {exc}; find what it waits for at import (student.import_timeout_s sets the "
                           f"limit)") from None
    except SyntaxError as exc:  # the student's code, not a missing package
        raise StudentError(f"{KEY}: importing {root / ADAPTERS_FILE} failed: {described(exc)}; correct that "
                           f"line") from None
    except Exception as exc:
        raise StudentError(f"{KEY}: importing {root / ADAPTERS_FILE} failed: {type(exc).__name__}: {exc}; it runs "
                           f"with {', '.join(checkout_paths(root))} on sys.path: install what it imports in the "
                           f"environment that runs snakemake") from None
    edition = checkout_edition(root)
    if edition == 2025:
        check_signatures(module)
        entry["adapters"] = check_pieces(entry, device)
    else:  # the edition's own adapters (2026: get_ddp, get_fsdp, ...)
        check_signatures_of(module, edition)
        entry["adapters"] = check_pieces(entry, device, edition_pieces(edition))
    return entry


def check_config(student_config: dict | None, model_source: dict | None, device: str, source: str = "config",
                 files=None) -> dict:
    """Run the probes of a config's student checkout (its ``student`` key) and model (the
    ``model_source`` the config resolved): they import and run that code. Returns
    ``{"student": the entry with each piece's verdict, "model_source": the checked model}``, or raises
    :class:`~cs336report.config.ConfigError` naming the key and the one of ``files`` (the config files,
    in the order they were merged) that set it, else ``source``."""
    from ..config import named
    from ..lm.check import check_source

    try:
        student = check_checkout(student_config, device)
        model = check_source(model_source, device)
    except (StudentError, ModelError) as exc:
        raise named(exc, files, source) from None
    return {"student": student, "model_source": model}
