"""torch.compile in the experiments: the compiled callable, and its compile cost measured apart.

``torch.compile`` compiles lazily: the first call traces the function with TorchDynamo,
partitions forward and backward with AOTAutograd and generates kernels with Inductor (the
backward graph is compiled at the first backward). An experiment therefore runs its first
step on its own with :func:`first_call`, which times it and reads TorchDynamo's counters
(graphs captured, graph breaks, Inductor cache hits, counted over that call), before its warm-up
and measured steps.

    fn = compile_fn(model)
    info = first_call(step, device)  # {"first_call_s": ..., "graphs": 1, "graph_breaks": 0, ...}

Inductor and Triton keep compiled graphs and kernels in on-disk caches shared by every process
of the machine, so a cell compiled after another of the same shapes would skip most of its
compilation. :func:`compile_fn` therefore points both caches at a folder of the process's own
(removed when the process exits). A warm worker (:mod:`cs336report.run.worker`) runs compiled cells
one after another in one process: between cells it resets TorchDynamo and empties those caches
(:func:`clear_private_caches`), so each cell's first call compiles its graph from scratch, without
the process start-up, the import of Inductor and the start of its compile workers, which the
worker paid once (the cell's ``process.cells_before`` says how many cells ran before it). The one
exception is by design: a compiled_model job runs the cells of one model in one process
(:func:`cs336report.run.runner.run_job`), and its later cells record the earlier cells' first calls
beside their own.

Triton puts the version of its assembler (``ptxas``) in every kernel's cache key, read once a
process; :func:`pin_ptxas` fixes which one before a GPU cell runs (see there).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import timeit
from contextlib import contextmanager
from typing import Callable

import torch

from ..machine.progress import progress
from ..machine.scratch import scratch_dir
from .timing import synchronize


# The environment variables Inductor and Triton read their cache folders from (at use, not import).
CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
# A cell measured again in a fresh process (cs336report.run.runner.repeat_in_fresh_processes) is handed
# the folder its first run compiled into: the repeat times steps, not compilation, so it loads the
# graphs and kernels already made instead of compiling them again.
REUSE_ENV = "CS336REPORT_REUSE_COMPILE_CACHE"
COMPILE_PREFIX = "cs336report-compile-"  # a process's private cache folder: <prefix><pid>-<random>
_private_cache: str | None = None


def _bundled_ptxas() -> str:
    """The ``ptxas`` shipped with torch (absent in builds that ship none)."""
    return os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas")


@functools.cache
def pin_ptxas() -> str | None:
    """Set ``TRITON_PTXAS_PATH`` to the ``ptxas`` torch ships (``torch/bin/ptxas``) where the variable
    is unset and there is one; returns the variable's value afterwards. Once a process: a GPU cell
    calls it before it runs (:func:`cs336report.run.runner.run_cell`), and so do the Triton launchers.

    Triton reads the assembler's version once a process and puts it in every kernel's cache key.
    Inductor, the first time it compiles, sets the variable to a ``ptxas`` bundled with torch where
    it finds one (on the H100 image a CUDA 13.0 one; Triton's own is 12.8), and leaves a set
    variable alone. A process that compiled a Triton kernel before that keeps Triton's version in
    its keys, while the processes it starts afterwards (a FlashAttention job's precompile pool,
    :mod:`cs336report.flash.precompile`) inherit the new path: their kernels land in the cache under
    keys the process never asks for, and its tuning compiles every candidate again. With the
    variable set before the first kernel, the process, Inductor and every child use one assembler."""
    path = _bundled_ptxas()
    if not os.environ.get("TRITON_PTXAS_PATH") and os.path.isfile(path) and os.access(path, os.X_OK):
        os.environ["TRITON_PTXAS_PATH"] = path
    return os.environ.get("TRITON_PTXAS_PATH")


def private_cache() -> str | None:
    """The folder this process compiles into (None before its first compilation)."""
    return _private_cache


def use_private_caches() -> str:
    """Point Inductor's and Triton's on-disk caches at a new folder of this process's own.

    Idempotent within a process; the folder is removed at exit. Returns its path. Where
    :data:`REUSE_ENV` names a folder (a repeat of a compiled cell), that folder is used as it is,
    and left in place.
    """
    global _private_cache
    if _private_cache is None:
        reuse = os.environ.get(REUSE_ENV)
        if reuse and os.path.isdir(reuse):
            _private_cache = reuse
        else:
            _private_cache = scratch_dir(COMPILE_PREFIX)
            atexit.register(shutil.rmtree, _private_cache, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_private_cache, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(_private_cache, "triton")
    return _private_cache


def clear_private_caches() -> None:
    """Empty this process's private caches (a warm worker does this between cells), so that the next
    cell's first call compiles its graph from scratch, as it would in a fresh process."""
    if _private_cache is None:
        return
    for entry in os.listdir(_private_cache):
        shutil.rmtree(os.path.join(_private_cache, entry), ignore_errors=True)
    if "torch._inductor.async_compile" in sys.modules:
        # What the emptied folders held is also remembered in memory: the kernels and modules this
        # process loaded, and in the compile workers' processes, which would hand back a kernel whose
        # binary is gone ("Cubin file saved by TritonBundler not found"). Both are dropped; the
        # workers start again, with the folders above, at the next compilation.
        from torch._inductor.async_compile import shutdown_compile_workers
        from torch._inductor.utils import clear_inductor_caches

        clear_inductor_caches()
        shutdown_compile_workers()


_setup_s: float | None = None  # how long the last compile_fn took, until first_call reads it


def compile_fn(fn, threads: int | None = None, mode: str | None = None, donated_buffer: bool = True):
    """``torch.compile`` with the default backend (Inductor), compiling into private caches;
    ``threads``: Inductor's compile_threads (None: its default, a pool of worker processes);
    ``mode``: torch.compile's mode (None: the default; "reduce-overhead": CUDA graphs);
    ``donated_buffer=False``: the compiled backward does not write into the saved tensors' memory,
    so that one forward's graph can be backpropagated again (``retain_graph=True``), which donated
    buffers forbid. AOTAutograd reads that setting, a process-global one, when the graph compiles;
    a warm worker puts it back between cells.

    ``torch.compile`` itself compiles nothing, but on its first use in a process it imports
    TorchDynamo and Inductor (and starts the compile workers): that time is kept apart, and the
    next :func:`first_call` reports it as ``setup_s``."""
    with _setup_timer(threads):
        if not donated_buffer:
            import torch._functorch.config as functorch_config

            functorch_config.donated_buffer = False
        return torch.compile(fn, mode=mode)


@contextmanager
def _setup_timer(threads: int | None):
    """Private caches and Inductor's compile_threads for a compilation set up inside; its time
    is kept for the next :func:`first_call` (``setup_s``)."""
    global _setup_s, _default_compile_threads
    use_private_caches()
    start = timeit.default_timer()
    if threads is not None:
        import torch._inductor.config as inductor_config

        if _default_compile_threads is None:
            _default_compile_threads = inductor_config.compile_threads
        inductor_config.compile_threads = int(threads)
    yield
    _setup_s = timeit.default_timer() - start


_default_compile_threads: int | None = None  # Inductor's own, before a cell first set it


def restore_compile_threads() -> None:
    """Inductor's compile_threads back to what it was before a cell set it: a warm worker does this
    between cells, so that a cell that sets none compiles with the pool a fresh process has."""
    if _default_compile_threads is not None:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = _default_compile_threads


def repeated_blocks(model: torch.nn.Module) -> tuple[str, list[torch.nn.Module]] | None:
    """The model's stack of repeated blocks: the longest ``nn.ModuleList`` whose modules are all of one
    class (a Transformer's layers), as (its path in the model, its modules); None if it has none."""
    best = None
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 1 \
                and len({type(m) for m in module}) == 1 and (best is None or len(module) > len(best[1])):
            best = (path, list(module))
    return best


def compile_model(model: torch.nn.Module, scope: str = "model", threads: int | None = None,
                  mode: str | None = None):
    """``model`` compiled as ``scope`` says; returns (the callable, a description of what was compiled).

    ``"model"``: the whole model, by :func:`compile_fn`. ``"blocks"``: regional compilation, each of
    the model's repeated blocks (:func:`repeated_blocks`) compiled in place with ``torch.compile``,
    the rest of the model (embedding, final norm, output layer) eager. The blocks share one code
    path and TorchDynamo treats their weights as inputs, so one compilation of one block serves
    every block: the first call compiles a block's graph once (and the backward once), not the
    whole stack unrolled. A model without repeated blocks is compiled whole, and the description
    says why. The description: scope, and for blocks their path, class and count."""
    found = repeated_blocks(model) if scope == "blocks" else None
    if found is None:
        why = {} if scope == "model" else {"reason": "no list of repeated blocks"}
        return compile_fn(model, threads, mode), {"scope": "model", **why}
    path, blocks = found
    with _setup_timer(threads):
        for block in blocks:
            block.compile(mode=mode)
    return model, {"scope": "blocks", "path": path, "block": type(blocks[0]).__name__, "blocks": len(blocks)}


def compile_stats() -> dict:
    """TorchDynamo's counters so far in this process: graphs, graph breaks, cache use."""
    from torch._dynamo.utils import counters

    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "inductor_cache_hits": int(counters["inductor"].get("fxgraph_cache_hit", 0)),
        "inductor_cache_misses": int(counters["inductor"].get("fxgraph_cache_miss", 0)),
    }


def first_call(step: Callable[[], dict | None], device: str) -> dict:
    """Run ``step`` once (this is where compilation happens), synchronized and timed.

    ``step`` may return phase name -> seconds (as for :func:`cs336report.measure.timing.time_steps`);
    they are kept under ``phases_s``. The counters (graphs, graph breaks, cache hits and misses)
    are those of this call: a call on a model that an earlier call of the process compiled
    counts only what it compiled itself (e.g. the backward graph).
    """
    synchronize(device)
    before = compile_stats()
    progress("first call: compiling (can take minutes)")
    start = timeit.default_timer()
    phases = step()
    synchronize(device)
    seconds = timeit.default_timer() - start
    progress(f"first call: done in {seconds:.1f} s")
    made = {key: value - before[key] for key, value in compile_stats().items()}  # by this call alone
    return {"first_call_s": seconds, "phases_s": dict(phases or {}), **made, **_setup(),
            "private_caches": _private_cache is not None
            and all(os.environ.get(k, "").startswith(_private_cache) for k in CACHE_ENV)}


def _setup() -> dict:
    """The time of the compile_fn that made what this first call compiles (once), and Inductor's
    compile_threads."""
    global _setup_s
    import torch._inductor.config as inductor_config

    out = {"compile_threads": int(inductor_config.compile_threads)}
    if _setup_s is not None:
        out["setup_s"], _setup_s = _setup_s, None
    return out
