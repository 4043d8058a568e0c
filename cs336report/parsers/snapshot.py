"""Parse PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``).

A snapshot is a pickled dict written by ``torch.cuda.memory._snapshot()``::

    {"segments": [...], "device_traces": [[entry, ...], ...],
     "allocator_settings": {...}, "external_annotations": [...]}  # last two optional

Every value in it is a builtin container or scalar (dict, list, tuple, str, int,
float, bool, None), so :func:`load_snapshot` unpickles with a ``find_class`` that
refuses every global: a pickle that names any callable or class is rejected before
anything in it can run.

:func:`parse_snapshot` replays one device's trace once to build:

* **timeline** -- bytes allocated after every trace event.  This follows the
  "Active Memory Timeline" of ``torch/cuda/_memory_viz.py``/``MemoryViz.js``:
  ``alloc`` adds the requested size, ``free_completed`` subtracts it, and
  ``free_requested`` changes nothing (the block stays in use until the allocator
  reports the free as completed, e.g. after cross-stream events).  Only when a
  trace holds ``free_requested`` but no ``free_completed`` at all (recorded with
  ``skip_actions=["free_completed"]``) are the requests used as the frees.
  Sizes in trace entries are the *requested* sizes, so block sizes taken from
  ``segments`` use ``requested_size`` too.
* **baseline** -- memory that was live when the retained trace window begins:
  frees of addresses the trace never allocated, plus blocks live in the final
  ``segments`` state (``active_allocated`` or ``active_pending_free``) whose
  allocation is not in the trace.
* **accounting** -- ``baseline + allocations - frees`` must equal the live bytes of
  the final ``segments``; mismatching addresses are listed.  Live blocks that carry
  a recorded stack but whose allocation is missing from the trace show that the
  ``max_entries`` ring buffer overflowed: the check still holds, the baseline then
  means "live when the retained window starts", and the note says so.
* **phases** -- forward / backward / optimizer runs of events, from
  ``external_annotations`` or ``user_metadata`` markers when present, else from the
  Python frames (see :func:`frame_phase`).  Events without frames (e.g. allocations
  made by the autograd engine thread when only Python stacks were recorded) take
  the phase of the event before them.  Steps come from annotated ranges named
  ``step_marker`` (``"step"``: each START begins one) when the snapshot has them;
  otherwise a new training step starts whenever a forward run follows a backward or
  optimizer run.
* **categories** -- see :data:`DEFAULT_RULES` and :func:`categorize`.
* **top allocations**, **per-category totals**, **ramps** (the allocation sawtooth),
  **by_size** (how often each allocation size occurs, and in which categories) and a
  downsampled timeline for plotting, with the live bytes of every category at each
  kept point (``timeline["by_category"]``; ``Preexisting`` is the baseline that is
  still live).

Category precedence, for one allocation:

1. any frame in the optimizer (``torch/optim`` or an Adam/AdamW step function)
   gives ``OptimizerState``;
2. otherwise every frame is matched against the rules; each rule has a priority
   (3: ``Loss``, which owns everything computed inside a cross-entropy function;
   2: operator categories such as ``AttnProj`` or ``Softmax``; 1: containers such
   as ``Block``, used when nothing more specific matched).  The highest priority
   wins; between equal priorities the innermost frame wins.  So an inner ``Block``
   line yields to an outer ``q_proj`` call, and a ``softmax`` frame inside
   ``scaled_dot_product_attention`` is ``Softmax`` rather than ``AttnScores``;
3. otherwise an allocation made during backward is ``Gradient`` (parameter gradients
   from ``AccumulateGrad`` and activation gradients from autograd's C++ kernels,
   whose stacks carry no model code);
4. otherwise ``Other``.

Frames record only file, line and function name; rules may also look at the line's
source text and the enclosing class, both read from the file when it can be found
(directly, through ``source_map`` prefixes, or by matching the path's tail under
``source_roots``).  Without the source, only function-name rules apply.
"""

from __future__ import annotations

import ast
import gzip
import heapq
import linecache
import math
import os
import pickle
import re
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "SnapshotError",
    "Rule",
    "DEFAULT_RULES",
    "CATEGORIES",
    "load_snapshot",
    "validate_snapshot",
    "parse_snapshot",
    "frame_phase",
    "categorize",
    "FrameResolver",
]

PHASES = ("forward", "backward", "optimizer")
CATEGORIES = (
    "Embed",
    "AttnProj",
    "AttnScores",
    "Softmax",
    "AttnOut",
    "FFN",
    "Norm",
    "Block",
    "LMHead",
    "Loss",
    "Gradient",
    "OptimizerState",
    "Other",
)

# Globals a snapshot may reference.  torch writes only builtin containers and
# scalars (see torch/csrc/cuda/Module.cpp and memory_snapshot.cpp), so none.
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset()

_GZIP_MAGIC = b"\x1f\x8b"
# Decompressed size allowed by default: this many times the compressed file, and never less
# than MIN_MAX_BYTES. Real snapshots compress about 10 to 15 times; a gzip bomb, a thousand.
MAX_RATIO = 100
MIN_MAX_BYTES = 8 << 20


class SnapshotError(ValueError):
    """A file is not a loadable, well-formed memory snapshot."""


# --------------------------------------------------------------------------- loading


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, source: str):
        super().__init__(file)
        self._source = source

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:  # pragma: no cover - empty today
            return super().find_class(module, name)
        raise SnapshotError(
            f"{self._source}: refused to load global {module}.{name}; a memory snapshot "
            "holds only builtin containers and scalars, so this pickle is not one "
            "(loading it normally could run arbitrary code)"
        )

    def persistent_load(self, pid):
        raise SnapshotError(f"{self._source}: refused persistent id {pid!r} in pickle")


class _Capped:
    """A binary stream that refuses to give more than ``limit`` bytes in all, before reading them."""

    def __init__(self, stream, limit: int, source: str):
        self._stream, self._limit, self._source, self.count = stream, limit, source, 0

    def _take(self, n: int) -> None:
        if self.count + max(n, 0) > self._limit:
            raise SnapshotError(
                f"{self._source}: decompresses to more than {self._limit} bytes, the cap for this file "
                "(set max_bytes, CLI --max-snapshot-bytes, to allow a larger snapshot); refused before "
                "decompressing further")

    def read(self, n: int = -1) -> bytes:
        self._take(n if n is not None and n >= 0 else self._limit + 1 - self.count)
        data = self._stream.read(n)
        self.count += len(data)
        return data

    def readinto(self, buffer) -> int:
        self._take(len(buffer))
        got = self._stream.readinto(buffer)
        self.count += got or 0
        return got

    def readline(self, size: int = -1) -> bytes:
        line = self._stream.readline(min(size, 1 << 20) if size and size > 0 else 1 << 20)
        self.count += len(line)
        self._take(0)
        return line


def max_decompressed_bytes(compressed_bytes: int, max_bytes: int | None = None) -> int:
    """The decompressed size allowed for a file of ``compressed_bytes``: ``max_bytes`` when given."""
    return int(max_bytes) if max_bytes is not None else max(MIN_MAX_BYTES, MAX_RATIO * compressed_bytes)


def _restricted_load(stream, source: str, compressed: bool) -> Any:
    """Unpickle from ``stream`` (read as it goes, never copied whole into memory)."""
    try:
        return _RestrictedUnpickler(stream, source).load()
    except SnapshotError:
        raise
    except (EOFError, OSError, zlib.error, pickle.UnpicklingError) as exc:
        what = "gzip stream (truncated or corrupt)" if compressed else "pickle (truncated or corrupt)"
        raise SnapshotError(f"{source}: not a complete {what}: {exc or type(exc).__name__}") from exc
    except Exception as exc:  # malformed opcode streams raise assorted errors
        raise SnapshotError(f"{source}: not a readable pickle: {type(exc).__name__}: {exc}") from exc


def load_snapshot(path: str | os.PathLike, max_bytes: int | None = None) -> dict:
    """Load a snapshot pickle (optionally gzip-compressed) without running code.

    The file is unpickled as it is read (through a gzip decoder when it starts with the
    gzip magic bytes), so neither the file's bytes nor the decompressed pickle are held in
    memory beside the loaded snapshot.

    A gzip file may decompress to at most ``max_bytes`` (default: :data:`MAX_RATIO` times its
    own size, at least :data:`MIN_MAX_BYTES`); past that it is refused as soon as the
    unpickler asks for more, without decompressing the rest.

    Raises :class:`SnapshotError` naming the file for an empty, truncated or
    non-pickle file, for a pickle that references any global, and for a pickle
    that does not have the shape of a snapshot.
    """
    source = os.fspath(path)
    try:
        fh = open(source, "rb")
    except OSError as exc:
        raise SnapshotError(f"{source}: cannot read file: {exc}") from exc
    with fh:
        head = fh.read(2)
        if not head:
            raise SnapshotError(f"{source}: file is empty (expected a pickled memory snapshot)")
        fh.seek(0)
        compressed = head == _GZIP_MAGIC
        if compressed:
            with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                try:
                    empty = not gz.peek(1)
                except (EOFError, OSError, zlib.error) as exc:
                    raise SnapshotError(f"{source}: truncated or corrupt gzip stream: {exc}") from exc
                if empty:
                    raise SnapshotError(f"{source}: gzip stream is empty")
                limit = max_decompressed_bytes(os.fstat(fh.fileno()).st_size, max_bytes)
                obj = _restricted_load(_Capped(gz, limit, source), source, compressed=True)
        else:
            obj = _restricted_load(fh, source, compressed=False)
    validate_snapshot(obj, source)
    return obj


def validate_snapshot(obj: Any, source: str = "<snapshot>") -> dict:
    """Check the top-level shape of a snapshot dict; raise :class:`SnapshotError`."""
    if not isinstance(obj, dict):
        raise SnapshotError(
            f"{source}: pickle holds a {type(obj).__name__}, not a memory snapshot dict "
            "with 'segments' and 'device_traces'"
        )
    missing = [k for k in ("segments", "device_traces") if k not in obj]
    if missing:
        raise SnapshotError(
            f"{source}: not a memory snapshot: missing key(s) {', '.join(map(repr, missing))} "
            f"(found {sorted(map(str, obj))[:8]}); record with "
            "torch.cuda.memory._record_memory_history() and save with _dump_snapshot()"
        )
    if not isinstance(obj["segments"], list):
        raise SnapshotError(f"{source}: 'segments' is a {type(obj['segments']).__name__}, not a list")
    traces = obj["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError(f"{source}: 'device_traces' must be a list of per-device lists")
    for i, seg in enumerate(obj["segments"]):
        if not isinstance(seg, dict) or "blocks" not in seg or "address" not in seg:
            raise SnapshotError(f"{source}: segment {i} lacks 'address'/'blocks'")
    return obj


# --------------------------------------------------------------------------- frames

_LIB_RE = re.compile(
    r"(^|[/\\])(site-packages|dist-packages)[/\\]"
    r"|(^|[/\\])torch[/\\]"
    r"|[/\\]lib(64)?[/\\]python\d+(\.\d+)?[/\\](?!site-packages|dist-packages)"
    r"|torchinductor_|<eval_with_key|^<"
)
_OPTIM_FUNC_RE = re.compile(r"_?(single_tensor_|multi_tensor_|fused_)?adamw?|_fused_adamw_?")
# C++ frames that run only inside the autograd engine.  Destroying a graph (e.g. when a
# forward-only step drops its output) also calls into autograd -- deleteNode,
# XBackward0::release_variables -- without any of these, so such frees stay in their phase.
_BACKWARD_CPP_RE = re.compile(r"autograd::Engine|PythonEngine|AccumulateGrad|\w+Backward\d*::apply")


def _is_python_frame(filename: str) -> bool:
    return filename.endswith(".py") or filename.startswith("<")


@dataclass
class FrameView:
    """One stack frame with what could be learned about it."""

    filename: str
    line: int
    name: str
    text: str = ""
    cls: str | None = None
    qualname: str = ""
    user: bool = False
    python: bool = False
    hint: str | None = None  # 'optimizer' or 'backward' when this frame alone implies it


class FrameResolver:
    """Resolve frames to source text, enclosing class and user/library status.

    ``user_code`` patterns (regexes searched in the path) force a file to count as
    model code even when it is installed under site-packages.
    """

    def __init__(
        self,
        source_map: Mapping[str, str] | None = None,
        source_roots: Sequence[str] | None = None,
        user_code: Sequence[str] = (r"cs336",),
    ):
        self.source_map = dict(source_map or {})
        self.source_roots = [os.path.abspath(r) for r in (source_roots if source_roots is not None else [os.getcwd()])]
        self.user_code = [re.compile(p) for p in user_code]
        self._paths: dict[str, str | None] = {}
        self._funcs: dict[str, list[tuple[int, int, str | None, str]]] = {}
        self._frames: dict[tuple[str, int, str], FrameView] = {}
        # local files whose line, for a frame, lies outside every function of the frame's name
        self.stale: dict[str, int] = {}

    def is_user(self, filename: str) -> bool:
        if not filename.endswith(".py"):
            return False
        if any(p.search(filename) for p in self.user_code):
            return True
        return not _LIB_RE.search(filename)

    def local_path(self, filename: str) -> str | None:
        if filename in self._paths:
            return self._paths[filename]
        found = None
        candidates = [filename]
        for old, new in self.source_map.items():
            if filename.startswith(old):
                candidates.append(new + filename[len(old):])
        parts = [p for p in re.split(r"[/\\]", filename) if p]
        for root in self.source_roots:
            for k in range(min(len(parts), 6), 1, -1):
                candidates.append(os.path.join(root, *parts[-k:]))
        for cand in candidates:
            if os.path.isfile(cand):
                found = cand
                break
        self._paths[filename] = found
        return found

    def _functions(self, path: str) -> list[tuple[int, int, str | None, str]]:
        if path in self._funcs:
            return self._funcs[path]
        out: list[tuple[int, int, str | None, str]] = []
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            tree = None

        def visit(node, cls, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, child.name, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    end = getattr(child, "end_lineno", child.lineno) or child.lineno
                    start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    out.append((start, end, cls, f"{prefix}{child.name}"))
                    visit(child, cls, f"{prefix}{child.name}.")
                else:
                    visit(child, cls, prefix)

        if tree is not None:
            visit(tree, None, "")
        self._funcs[path] = out
        return out

    def resolve(self, frame: Mapping[str, Any]) -> FrameView:
        filename = str(frame.get("filename", ""))
        line = int(frame.get("line", 0) or 0)
        name = str(frame.get("name", ""))
        key = (filename, line, name)
        view = self._frames.get(key)
        if view is not None:
            return view
        python = _is_python_frame(filename)
        view = FrameView(filename, line, name, python=python, qualname=name)
        if python:
            view.user = self.is_user(filename)
        if view.user:
            path = self.local_path(filename)
            if path is not None:
                best = None
                for start, end, cls, qual in self._functions(path):
                    if start <= line <= end and (best is None or start >= best[0]):
                        best = (start, cls, qual)
                if best is not None and best[2].rsplit(".", 1)[-1] == name:
                    view.cls, view.qualname = best[1], best[2]
                    view.text = linecache.getline(path, line).strip()
                elif (name.startswith("<") and name != "<module>") or (name == "<module>" and best is None):
                    view.text = linecache.getline(path, line).strip()  # a lambda or comprehension: no name to check
                else:  # another revision of the file than the one that ran: its line says nothing
                    self.stale[filename] = self.stale.get(filename, 0) + 1
        view.hint = _frame_hint(view)
        self._frames[key] = view
        return view


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """Map frames to a category.

    Every given pattern must match: ``func`` (fullmatch on the function name),
    ``cls`` (fullmatch on the enclosing class), ``text`` (search in the source
    line), ``file`` (search in the path); ``predicate`` is called with the
    :class:`FrameView`.  ``user_only`` restricts the rule to model code frames.
    """

    category: str
    func: str | None = None
    cls: str | None = None
    text: str | None = None
    file: str | None = None
    predicate: Callable[[FrameView], bool] | None = None
    priority: int = 2
    user_only: bool = True
    _compiled: tuple = field(default=(), compare=False, repr=False)

    def compiled(self):
        if not self._compiled:
            object.__setattr__(
                self,
                "_compiled",
                (
                    re.compile(self.func) if self.func else None,
                    re.compile(self.cls) if self.cls else None,
                    re.compile(self.text) if self.text else None,
                    re.compile(self.file) if self.file else None,
                ),
            )
        return self._compiled

    def matches(self, f: FrameView) -> bool:
        if self.user_only and not f.user:
            return False
        func, cls, text, file = self.compiled()
        if func is not None and not func.fullmatch(f.name):
            return False
        if cls is not None and not (f.cls and cls.fullmatch(f.cls)):
            return False
        if text is not None and not (f.text and text.search(f.text)):
            return False
        if file is not None and not file.search(f.filename):
            return False
        if self.predicate is not None and not self.predicate(f):
            return False
        return True


DEFAULT_RULES: tuple[Rule, ...] = (
    # A cross-entropy function owns everything computed inside it.
    Rule("Loss", func=r"\w*cross_entropy\w*|\w*nll_loss\w*", priority=3, user_only=False),
    Rule("Softmax", func=r"_?(log_)?softmax|stable_softmax", user_only=False),
    Rule("AttnOut", cls=r"\w*Flash\w*"),
    Rule("AttnOut", text=r"@\s*V\b|einsum\(.*\bV\b|\bscaled_dot_product_attention\s*\(|flash_attn"),
    Rule("AttnScores", text=r"\bscores\b|\bQ\s*@\s*K|@\s*K\.(transpose|mT|T)\b|mask\b"),
    Rule("AttnProj", cls=r"Rotary\w*|RoPE\w*|Rope\w*"),
    Rule("AttnProj", func=r"apply_rotary\w*|apply_rope\w*|rope"),
    Rule("AttnProj", text=r"\b(q|k|v|qkv|o|out|output)_proj\s*\(|self\.(wq|wk|wv|wo|rope)\s*\("),
    Rule("Embed", cls=r"(?!Rotary|RoPE|Rope)\w*Embedding\w*"),
    Rule("Embed", text=r"\b(token_embeddings|tok_embeddings|embed_tokens|wte|embedding)\s*\("),
    Rule("Norm", cls=r"\w*Norm\w*"),
    Rule("Norm", func=r"\w*rms_?norm\w*|\w*layer_?norm\w*"),
    Rule("FFN", cls=r"SwiGLU\w*|\w*FFN\w*|\w*MLP\w*|FeedForward\w*|PositionwiseFeedForward"),
    Rule("FFN", text=r"self\.w[123]\s*\(|\b(silu|swiglu|gelu)\s*\("),
    Rule("FFN", func=r"silu|swiglu|gelu"),
    Rule("LMHead", text=r"\b(lm_head|output_layer|unembed\w*)\s*\("),
    Rule("AttnOut", cls=r"\w*Attention\w*", priority=1),
    Rule("Block", cls=r"\w*Block\w*|\w*DecoderLayer\w*|\w*EncoderLayer\w*", priority=1),
    Rule("Block", text=r"\b(layer|block)\s*\(", priority=1),
)


def _coerce_rule(category: str, spec: Any) -> Rule:
    if isinstance(spec, Rule):
        return spec
    if callable(spec):
        return Rule(category, predicate=spec, user_only=False)
    if isinstance(spec, str):
        rx = re.compile(spec)
        return Rule(
            category,
            predicate=lambda f, rx=rx: bool(rx.search(f.qualname) or rx.search(f.name) or (f.text and rx.search(f.text))),
        )
    if isinstance(spec, Mapping):
        allowed = {"func", "cls", "text", "file", "priority", "user_only", "predicate"}
        unknown = set(spec) - allowed
        if unknown:
            raise ValueError(f"category rule for {category!r}: unknown keys {sorted(unknown)}")
        return Rule(category, **spec)
    raise TypeError(f"category rule for {category!r} must be a regex, mapping, callable or Rule")


def build_rules(categories: Any = None, use_default_rules: bool = True) -> list[Rule]:
    """Turn a user mapping / list into rules placed before the defaults.

    ``categories`` may be ``{category: spec}`` (spec: regex string searched in the
    qualified function name and the source line; a mapping of :class:`Rule` fields;
    a callable taking a :class:`FrameView`; or a list of those), a list of
    ``(category, spec)`` pairs, or a list of :class:`Rule`.
    """
    rules: list[Rule] = []
    if categories:
        items: Iterable = categories.items() if isinstance(categories, Mapping) else categories
        for item in items:
            if isinstance(item, Rule):
                rules.append(item)
                continue
            category, spec = item
            specs = spec if isinstance(spec, (list, tuple)) else [spec]
            rules.extend(_coerce_rule(category, s) for s in specs)
    if use_default_rules:
        rules.extend(DEFAULT_RULES)
    return rules


def _frame_hint(f: FrameView) -> str | None:
    fn = f.filename.replace("\\", "/")
    if "/torch/optim/" in fn or _OPTIM_FUNC_RE.fullmatch(f.name):
        return "optimizer"
    if f.user and f.name == "step" and f.cls and re.search(r"Optim|Adam|SGD", f.cls):
        return "optimizer"
    if f.name in ("backward", "_engine_run_backward", "run_backward"):
        return "backward"
    if f.name == "grad" and "/torch/autograd/" in fn:
        return "backward"
    if not f.python and _BACKWARD_CPP_RE.search(f.name):
        return "backward"
    return None


def frame_phase(views: Sequence[FrameView]) -> str | None:
    """Phase implied by a stack: 'optimizer', 'backward', 'forward', or None if empty.

    Optimizer frames win over backward frames (e.g. a hook running the optimizer
    from inside backward); any other non-empty stack is forward.
    """
    if not views:
        return None
    backward = False
    for f in views:
        if f.hint == "optimizer":
            return "optimizer"
        if f.hint == "backward":
            backward = True
    return "backward" if backward else "forward"


def categorize(views: Sequence[FrameView], phase: str | None, rules: Sequence[Rule]) -> tuple[str, int | None]:
    """Category of an allocation and the index of the deciding frame (innermost first)."""
    if phase == "optimizer" or any(f.hint == "optimizer" for f in views):
        return "OptimizerState", None
    best: tuple[int, int, str] | None = None  # (priority, -depth, category)
    for depth, f in enumerate(views):
        if not f.python:
            continue
        for rule in rules:
            if (best is None or rule.priority > best[0]) and rule.matches(f):
                best = (rule.priority, depth, rule.category)
    if best is not None:
        return best[2], best[1]
    if phase == "backward" or any(not f.python and "AccumulateGrad" in f.name for f in views):
        return "Gradient", None
    return "Other", None


def _format_frame(f: FrameView) -> str:
    parts = [p for p in re.split(r"[/\\]", f.filename) if p]
    short = "/".join(parts[-2:]) if parts else f.filename
    return f"{short}:{f.line} in {f.qualname or f.name}"


def _chain(views: Sequence[FrameView], max_depth: int) -> list[str]:
    out: list[str] = []
    for f in views:
        if f.user:
            s = _format_frame(f)
            if not out or out[-1] != s:
                out.append(s)
        if len(out) >= max_depth:
            break
    return out


_NO_FRAMES: list = []
# C++ frames that only record how the stack was captured or how Python called in.
_PLUMBING_RE = re.compile(
    r"unwind::unwind|CapturedTraceback::gather|gather_with_cpp|^_start$|__libc_start_main|PyEval_|PyObject_"
    r"|PyFunction_|^_Py|^Py[A-Z]|c10::cuda::CUDACachingAllocator|c10::Dispatcher|c10::impl::|c10::BoxedKernel"
    r"|c10::KernelFunction|std::|^\?\?$|^$"
)
_CPP_OP_RE = re.compile(r"Backward\d*::apply|AccumulateGrad|at::native::|at::_ops::|at::cuda::")


def _operation(views: Sequence[FrameView]) -> str:
    """Name of the innermost frame that says what allocated: model code first,
    then any Python frame, then an operator-looking C++ frame."""
    for pred in (
        lambda f: f.user,
        lambda f: f.python,
        lambda f: bool(_CPP_OP_RE.search(f.name)),
        lambda f: not _PLUMBING_RE.search(f.name),
    ):
        for f in views:
            if pred(f):
                return f.qualname or f.name
    return "<no stack recorded>"


# --------------------------------------------------------------------------- helpers


def _annotation_phase(name: str) -> str | None:
    low = name.lower()
    if "backward" in low:
        return "backward"
    if "optim" in low:
        return "optimizer"
    if "forward" in low:
        return "forward"
    return None


class _AnnotationSweep:
    """Phase and step markers from external_annotations, queried with increasing times.

    Ranges whose name implies a phase (see :func:`_annotation_phase`) set the phase of
    the events inside them; each START of a range named exactly ``step_marker`` begins
    a new step.
    """

    def __init__(self, annotations: Sequence[Mapping], device: int, step_marker: str | None = "step"):
        marks = []
        steps = []
        for a in annotations or ():
            if not isinstance(a, Mapping):
                continue
            if "device" in a and a.get("device") != device:
                continue
            name = str(a.get("name", ""))
            stage = str(a.get("stage", "")).upper()
            t = a.get("time_us")
            if stage not in ("START", "END") or not isinstance(t, (int, float)):
                continue
            if step_marker is not None and name == step_marker:
                if stage == "START":
                    steps.append(t)
                continue
            phase = _annotation_phase(name)
            if phase is None:
                continue
            marks.append((t, 0 if stage == "END" else 1, name, phase))
        marks.sort(key=lambda m: (m[0], m[1]))
        self.marks = marks
        self.pos = 0
        self.open: list[tuple[str, str]] = []
        self.step_starts = sorted(steps)
        self.step_pos = 0

    def __bool__(self):
        return bool(self.marks)

    @property
    def has_steps(self) -> bool:
        return bool(self.step_starts)

    def phase_at(self, t: float | None) -> str | None:
        if t is None:
            return self.open[-1][1] if self.open else None
        while self.pos < len(self.marks) and self.marks[self.pos][0] <= t:
            _, start, name, phase = self.marks[self.pos]
            if start:
                self.open.append((name, phase))
            else:
                for j in range(len(self.open) - 1, -1, -1):
                    if self.open[j][0] == name:
                        del self.open[j]
                        break
            self.pos += 1
        return self.open[-1][1] if self.open else None

    def step_at(self, t: float | None) -> int:
        """Index of the step marked at time ``t`` (events before the first marker: step 0)."""
        if t is not None:
            while self.step_pos < len(self.step_starts) and self.step_starts[self.step_pos] <= t:
                self.step_pos += 1
        return max(self.step_pos - 1, 0)


def _pick_device(snapshot: dict, device: int | None) -> int:
    traces = snapshot["device_traces"]
    if device is not None:
        if not 0 <= device < max(len(traces), 1):
            raise SnapshotError(f"device {device} not in snapshot ({len(traces)} device traces)")
        return device
    if not traces:
        devs = {s.get("device", 0) for s in snapshot["segments"]}
        return min(devs) if devs else 0
    return max(range(len(traces)), key=lambda i: (len(traces[i]), -i))


def _block_bytes(block: Mapping) -> int:
    rs = block.get("requested_size")
    return int(rs if rs is not None else block.get("size", 0))


def _downsample(y: Sequence[int], max_points: int) -> list[int]:
    n = len(y)
    if n <= max_points:
        return list(range(n))
    per = max(1, math.ceil(2 * n / max(max_points - 2, 2)))
    keep = {0, n - 1}
    for s in range(0, n, per):
        e = min(n, s + per)
        lo = hi = s
        for i in range(s + 1, e):
            v = y[i]
            if v > y[hi]:
                hi = i
            if v < y[lo]:
                lo = i
        keep.add(lo)
        keep.add(hi)
    return sorted(keep)


def _zigzag(y: Sequence[int], threshold: int) -> list[int]:
    """Indices of alternating local extremes whose swings exceed ``threshold``."""
    n = len(y)
    if n == 0:
        return []
    pivots = [0]
    trend = 0
    hi = lo = 0
    cand = 0
    for i in range(1, n):
        v = y[i]
        if trend == 0:
            if v > y[hi]:
                hi = i
            if v < y[lo]:
                lo = i
            if y[hi] - y[lo] >= threshold and y[hi] != y[lo]:
                first, cand = (lo, hi) if lo < hi else (hi, lo)
                trend = 1 if lo < hi else -1
                if first > 0:
                    pivots.append(first)
        elif trend > 0:
            if v > y[cand]:
                cand = i
            elif y[cand] - v >= threshold:
                pivots.append(cand)
                trend, cand = -1, i
        else:
            if v < y[cand]:
                cand = i
            elif v - y[cand] >= threshold:
                pivots.append(cand)
                trend, cand = 1, i
    if trend != 0 and cand != pivots[-1]:
        pivots.append(cand)
    if pivots[-1] != n - 1:
        pivots.append(n - 1)
    return pivots


# --------------------------------------------------------------------------- parse


def parse_snapshot(
    snapshot: str | os.PathLike | dict,
    top_n: int = 20,
    categories: Any = None,
    *,
    device: int | None = None,
    max_points: int = 5000,
    use_default_rules: bool = True,
    source_map: Mapping[str, str] | None = None,
    source_roots: Sequence[str] | None = None,
    user_code: Sequence[str] = (r"cs336",),
    chain_depth: int = 6,
    ramp_threshold: float = 0.05,
    step_marker: str | None = "step",
    max_sizes: int = 500,
    max_bytes: int | None = None,
) -> dict:
    """Parse a snapshot file (or an already loaded dict) into a JSON-serialisable dict.

    ``device``: trace to analyse (default: the device with the most events, ties to
    the lowest index).  ``categories``: extra rules, see :func:`build_rules`.
    ``ramp_threshold``: a swing must exceed this fraction of the timeline's range
    (and 1 MiB) to end a ramp or drop.  ``step_marker``: name of the annotated range
    (e.g. a ``record_function``) around each step; when the snapshot holds such ranges,
    they define the steps.  ``max_sizes``: how many distinct allocation sizes
    ``by_size`` keeps (largest total first). ``max_bytes``: the most a gzip-compressed file may
    decompress to (see :func:`load_snapshot`).
    """
    if isinstance(snapshot, dict):
        source = None
        snap = validate_snapshot(snapshot, "<snapshot dict>")
    else:
        source = os.fspath(snapshot)
        snap = load_snapshot(source, max_bytes=max_bytes)
    label = source or "<snapshot dict>"
    dev = _pick_device(snap, device)
    trace = snap["device_traces"][dev] if snap["device_traces"] else []
    rules = build_rules(categories, use_default_rules)
    resolver = FrameResolver(source_map, source_roots, user_code)
    cat_names = list(CATEGORIES) + sorted({r.category for r in rules} - set(CATEGORIES))
    cat_code = {c: i for i, c in enumerate(cat_names)}
    warnings: list[str] = []

    n = len(trace)
    has_free_completed = any(e.get("action") == "free_completed" for e in trace if isinstance(e, dict))
    free_action = "free_completed" if has_free_completed else "free_requested"
    if not has_free_completed and any(isinstance(e, dict) and e.get("action") == "free_requested" for e in trace):
        warnings.append("trace has no free_completed events; free_requested events are used as frees")

    annotations = _AnnotationSweep(snap.get("external_annotations") or [], dev, step_marker)
    has_time = n > 0 and all(isinstance(e, dict) and "time_us" in e for e in (trace[0], trace[-1]))

    # Per-event compact arrays (one pass over the trace).
    delta_cum = array("q", bytes(8 * n))  # allocated bytes minus baseline, after event i
    reserved_cum = array("q", bytes(8 * n))
    phase_of = array("b", bytes(n))
    step_of = array("i", bytes(4 * n))
    marked_steps = annotations.has_steps and has_time
    alloc_cat = {}  # event index -> category code, allocs only
    counts: dict[str, int] = {}
    live: dict[int, tuple[int, int]] = {}  # addr -> (size, event index) allocated in trace
    orphan_free_bytes = 0
    orphan_frees = 0
    requested: set = set()  # free_requested addresses not yet completed
    total_alloc = total_free = 0
    seg_delta = 0
    per_cat = {c: {"count": 0, "total_bytes": 0, "max_bytes": 0, "by_phase": {p: 0 for p in PHASES}} for c in cat_names}
    by_size: dict[int, list] = {}  # size -> [count, {category code: count}]
    top_heap: list[tuple[int, int]] = []
    stack_cache: dict[int, tuple[list[FrameView], str | None]] = {}
    cat_cache: dict[tuple[tuple, str], str] = {}
    stack_by_views: dict[tuple, tuple] = {}
    keep_alive: list = []
    allocs_with_frames = 0
    cur = 0
    cur_reserved = 0
    last_phase = None

    for i, e in enumerate(trace):
        if not isinstance(e, dict) or "action" not in e:
            raise SnapshotError(f"{label}: device {dev} trace entry {i} is not a trace entry (no 'action')")
        action = e["action"]
        counts[action] = counts.get(action, 0) + 1
        frames = e.get("frames") or _NO_FRAMES
        cached = stack_cache.get(id(frames))
        if cached is None:
            views = [resolver.resolve(f) for f in frames if isinstance(f, dict)]
            vkey = tuple(map(id, views))
            cached = stack_by_views.get(vkey)
            if cached is None:
                cached = stack_by_views[vkey] = (views, frame_phase(views), vkey)
            stack_cache[id(frames)] = cached
            keep_alive.append(frames)
        views, fphase, key = cached
        phase = None
        if annotations:
            phase = annotations.phase_at(e.get("time_us"))
        if phase is None:
            meta = e.get("user_metadata")
            if isinstance(meta, str) and meta:
                phase = _annotation_phase(meta)
        if phase is None:
            phase = fphase if fphase is not None else (last_phase or "forward")
        last_phase = phase
        phase_of[i] = PHASES.index(phase)
        if marked_steps:
            step_of[i] = annotations.step_at(e.get("time_us"))

        size = int(e.get("size", 0) or 0)
        addr = e.get("addr")
        if action == "alloc":
            cur += size
            total_alloc += size
            if addr in live:
                warnings.append(f"event {i}: alloc at {addr:#x} which the trace already holds live")
            live[addr] = (size, i)
            ckey = (key, phase)
            cat = cat_cache.get(ckey)
            if cat is None:
                cat = cat_cache[ckey] = categorize(views, phase, rules)[0]
            code = cat_code[cat]
            alloc_cat[i] = code
            pc = per_cat[cat]
            pc["count"] += 1
            pc["total_bytes"] += size
            pc["by_phase"][phase] += size
            if size > pc["max_bytes"]:
                pc["max_bytes"] = size
            sz_stat = by_size.get(size)
            if sz_stat is None:
                sz_stat = by_size[size] = [0, {}]
            sz_stat[0] += 1
            sz_stat[1][code] = sz_stat[1].get(code, 0) + 1
            if views:
                allocs_with_frames += 1
            if top_n > 0:
                item = (size, -i)
                if len(top_heap) < top_n:
                    heapq.heappush(top_heap, item)
                elif item > top_heap[0]:
                    heapq.heapreplace(top_heap, item)
        elif action == free_action:
            cur -= size
            total_free += size
            requested.discard(addr)
            if addr in live:
                live.pop(addr)
            else:
                orphan_frees += 1
                orphan_free_bytes += size
        elif action == "free_requested":
            requested.add(addr)
        elif action in ("segment_alloc", "segment_map"):
            cur_reserved += size
            seg_delta += size
        elif action in ("segment_free", "segment_unmap"):
            cur_reserved -= size
            seg_delta -= size
        delta_cum[i] = cur
        reserved_cum[i] = cur_reserved

    for path, count in sorted(resolver.stale.items()):
        warnings.append(
            f"{path}: {count} frame(s) name a line that lies outside every function of the frame's name (the "
            "file is another revision than the one that ran?); those frames are categorized by name only")

    # Final state of this device.
    dev_segments = [s for s in snap["segments"] if s.get("device", dev) == dev]
    final_live: dict[int, tuple[int, Mapping]] = {}
    final_reserved = 0
    for seg in dev_segments:
        final_reserved += int(seg.get("total_size", 0) or 0)
        addr = seg["address"]
        for b in seg["blocks"]:
            baddr = b.get("address", addr)
            if b.get("state") in ("active_allocated", "active_pending_free"):
                final_live[baddr] = (_block_bytes(b), b)
            addr = baddr + int(b.get("size", 0) or 0)

    unexplained = [(a, sz, b) for a, (sz, b) in final_live.items() if a not in live]
    preexisting_live = sum(sz for _, sz, _ in unexplained)
    overflow_blocks = sum(1 for _, _, b in unexplained if b.get("frames"))
    overflow = overflow_blocks > 0 and allocs_with_frames > 0
    baseline = orphan_free_bytes + preexisting_live

    expected = baseline + total_alloc - total_free
    observed = sum(sz for sz, _ in final_live.values())
    mismatches = []
    for a, (sz, idx) in live.items():
        fin = final_live.get(a)
        if fin is None:
            mismatches.append({"addr": a, "trace_bytes": sz, "final_bytes": 0, "alloc_index": idx})
        elif fin[0] != sz:
            mismatches.append({"addr": a, "trace_bytes": sz, "final_bytes": fin[0], "alloc_index": idx})
    ok = expected == observed
    notes = []
    if ok:
        notes.append("baseline + allocations - frees matches the live blocks of the final segments")
    else:
        notes.append(
            f"mismatch of {expected - observed} bytes: {len(mismatches)} allocation(s) live in the trace "
            "are absent from (or differ in size in) the final segments; the trace is incomplete, "
            "belongs to another device, or frees were not recorded"
        )
    if overflow:
        notes.append(
            f"trace ring buffer overflowed (max_entries too small): {overflow_blocks} live block(s) with "
            "recorded stacks have no alloc event; the baseline is the memory live when the retained "
            "window starts, not when recording began"
        )
    if orphan_frees:
        notes.append(f"{orphan_frees} free(s) of {orphan_free_bytes} bytes hit blocks allocated before the trace window")
    accounting = {
        "expected": expected,
        "observed": observed,
        "ok": ok,
        "note": "; ".join(notes),
        "overflow_suspected": overflow,
        "allocated_bytes": total_alloc,
        "freed_bytes": total_free,
        "pending_free_requests": len(requested) if has_free_completed else 0,
        "mismatches": mismatches[:20],
        "n_mismatches": len(mismatches),
    }

    reserved_baseline = final_reserved - seg_delta
    if reserved_baseline < 0:
        warnings.append("segment events exceed the final reserved memory; reserved baseline clamped to 0")
        reserved_baseline = 0

    # Peak.
    if n:
        peak_i = max(range(n), key=lambda k: (delta_cum[k], -k))
        peak_bytes = baseline + delta_cum[peak_i]
    else:
        peak_i = None
        peak_bytes = baseline

    # Phases and steps.  Without step markers, a new step starts whenever a forward run
    # follows a backward or optimizer run.
    phases_out: list[dict] = []
    step = 0
    run_start = 0
    waiting = False  # a forward run follows a backward or optimizer run: its first allocation starts a step
    for i in range(n):
        if marked_steps:
            step = step_of[i]
        elif i > 0 and phase_of[i] == 0 and phase_of[i - 1] != 0:
            waiting = True
        elif phase_of[i] != 0:
            waiting = False
        if waiting and i in alloc_cat:
            step += 1
            waiting = False
        if i > 0 and (phase_of[i] != phase_of[i - 1] or step != step_of[i - 1]):
            phases_out.append(_phase_span(trace, phase_of[i - 1], run_start, i - 1, step_of[run_start], delta_cum, baseline, has_time))
            run_start = i
        step_of[i] = step
    if n:
        phases_out.append(_phase_span(trace, phase_of[n - 1], run_start, n - 1, step_of[run_start], delta_cum, baseline, has_time))
    n_steps = (max(step_of) + 1) if n else 0

    # Second pass over the numbers only: live bytes per category at the points the
    # plotted timeline keeps and at the peak.  "Preexisting" is the baseline minus the
    # frees of blocks allocated before the trace window.
    keep = _downsample(delta_cum, max_points) if n else []
    keep_set = set(keep)
    series: dict[str, list[int]] = {c: [] for c in cat_names}
    series["Preexisting"] = []
    live_at_peak = {c: 0 for c in cat_names}
    running = [0] * len(cat_names)
    live2: dict[int, tuple[int, int]] = {}
    pre = baseline
    for i in range(n):
        e = trace[i]
        act = e["action"]
        if act == "alloc":
            sz = int(e.get("size", 0) or 0)
            code = alloc_cat[i]
            live2[e.get("addr")] = (sz, code)
            running[code] += sz
        elif act == free_action:
            got = live2.pop(e.get("addr"), None)
            if got is None:
                pre -= int(e.get("size", 0) or 0)
            else:
                running[got[1]] -= got[0]
        if i in keep_set:
            for code, c in enumerate(cat_names):
                series[c].append(running[code])
            series["Preexisting"].append(pre)
        if i == peak_i:
            for code, c in enumerate(cat_names):
                live_at_peak[c] = running[code]
            live_at_peak["Preexisting"] = peak_bytes - sum(running)
    for c in cat_names:
        per_cat[c]["live_at_peak_bytes"] = live_at_peak.get(c, 0)
    by_category_series = {c: v for c, v in series.items() if any(v)}

    # Top allocations.
    top = []
    for rank, (size, neg_i) in enumerate(sorted(top_heap, reverse=True), start=1):
        i = -neg_i
        e = trace[i]
        views = stack_cache[id(e.get("frames") or _NO_FRAMES)][0]
        cat = cat_names[alloc_cat[i]]
        _, decider = categorize(views, PHASES[phase_of[i]], rules)
        top.append(
            {
                "rank": rank,
                "size": size,
                "category": cat,
                "operation": _operation(views),
                "index": i,
                "time_us": e.get("time_us") if has_time else None,
                "phase": PHASES[phase_of[i]],
                "step": step_of[i],
                "addr": e.get("addr"),
                "decided_by": _format_frame(views[decider]) if decider is not None else None,
                "chain": _chain(views, chain_depth),
            }
        )

    # Ramps and drops.
    y_full = delta_cum  # baseline offset does not change the shape
    rng = (max(y_full) - min(y_full)) if n else 0
    threshold = max(1 << 20, int(ramp_threshold * rng)) if rng else 1 << 20
    pivots = _zigzag(y_full, threshold) if n else []
    segs = []
    for a, b in zip(pivots, pivots[1:]):
        # events a+1..b belong to this segment; a is the previous extreme
        d = y_full[b] - y_full[a]
        seg = {
            "kind": "ramp" if d > 0 else ("drop" if d < 0 else "flat"),
            "start": a,
            "end": b,
            "start_bytes": baseline + y_full[a],
            "end_bytes": baseline + y_full[b],
            "bytes": d,
            "events": b - a,
            "duration_us": (trace[b].get("time_us", 0) - trace[a].get("time_us", 0)) if has_time else None,
            "step": step_of[min(a + 1, b)],
            "phase_start": PHASES[phase_of[min(a + 1, b)]],
            "phase_end": PHASES[phase_of[b]],
        }
        segs.append(seg)
    per_step: dict[int, dict] = {}
    for s in segs:
        if s["kind"] == "flat":
            continue
        d = per_step.setdefault(
            s["step"],
            {"step": s["step"], "ramp_events": 0, "drop_events": 0, "ramp_bytes": 0, "drop_bytes": 0,
             "ramp_us": 0 if has_time else None, "drop_us": 0 if has_time else None, "n_ramps": 0, "n_drops": 0},
        )
        k = s["kind"]
        d[f"{k}_events"] += s["events"]
        d[f"{k}_bytes"] += abs(s["bytes"])
        d[f"n_{k}s"] += 1
        if has_time:
            d[f"{k}_us"] += s["duration_us"]

    # Downsampled timeline.
    timeline = {
        "x": keep,
        "t_us": [trace[i].get("time_us") for i in keep] if has_time else None,
        "y": [baseline + y_full[i] for i in keep],
        "reserved": [reserved_baseline + reserved_cum[i] for i in keep],
        "phase": [PHASES[phase_of[i]] for i in keep],
        "step": [step_of[i] for i in keep],
        "n_points": len(keep),
        "n_events": n,
        "downsampled": len(keep) < n,
        "x_label": "trace event index",
        "by_category": by_category_series,
    }

    sizes_out = []
    for size, (count, cats) in sorted(by_size.items(), key=lambda kv: (-kv[0] * kv[1][0], -kv[0]))[:max_sizes]:
        sizes_out.append({
            "size": size,
            "count": count,
            "total_bytes": size * count,
            "categories": {cat_names[c]: k for c, k in sorted(cats.items(), key=lambda ck: -ck[1])},
        })

    return {
        "source": source,
        "device": dev,
        "n_devices": len(snap["device_traces"]),
        "n_events": n,
        "has_time": has_time,
        "action_counts": counts,
        "baseline": {
            "bytes": baseline,
            "live_at_end_bytes": preexisting_live,
            "freed_in_trace_bytes": orphan_free_bytes,
            "n_blocks_live_at_end": len(unexplained),
            "n_frees": orphan_frees,
        },
        "peak": {
            "bytes": peak_bytes,
            "index": peak_i,
            "time_us": trace[peak_i].get("time_us") if (has_time and peak_i is not None) else None,
            "phase": PHASES[phase_of[peak_i]] if peak_i is not None else None,
            "step": step_of[peak_i] if peak_i is not None else None,
            "live_by_category": {k: v for k, v in live_at_peak.items() if v},
        },
        "final_bytes": baseline + (delta_cum[-1] if n else 0),
        "reserved": {
            "baseline_bytes": reserved_baseline,
            "peak_bytes": reserved_baseline + (max(reserved_cum) if n else 0),
            "final_bytes": final_reserved,
        },
        "accounting": accounting,
        "phase_source": "annotations" if annotations else "frames",
        "phases": phases_out,
        "n_steps": n_steps,
        "top_allocations": top,
        "per_category": {c: per_cat[c] for c in cat_names},
        "by_size": sizes_out,
        "n_distinct_sizes": len(by_size),
        "ramps": {"threshold_bytes": threshold, "segments": segs, "per_step": [per_step[k] for k in sorted(per_step)]},
        "timeline": timeline,
        "warnings": warnings[:50],
    }


def _phase_span(trace, code, start, end, step, delta_cum, baseline, has_time) -> dict:
    peak = max(delta_cum[start : end + 1]) if end >= start else 0
    return {
        "phase": PHASES[code],
        "start": start,
        "end": end,
        "n_events": end - start + 1,
        "step": step,
        "start_us": trace[start].get("time_us") if has_time else None,
        "end_us": trace[end].get("time_us") if has_time else None,
        "peak_bytes": baseline + peak,
    }
