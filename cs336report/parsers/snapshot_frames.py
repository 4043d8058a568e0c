"""Stack frames of a memory snapshot: what each says, which phase and category it implies.

Frames record only file, line and function name; :class:`FrameResolver` adds the line's
source text and the enclosing class, read from the file when it can be found (directly,
through ``source_map`` prefixes, or by matching the path's tail under ``source_roots``),
and only when every frame of the file that ran lies in a function of the frame's name: one that
does not shows the local file to be another revision than the one that ran, and then every frame
of that file is judged by its name alone (:meth:`FrameResolver.check`, shown each frame first).
:data:`DEFAULT_RULES` and :func:`categorize` turn a stack into a category,
:func:`frame_phase` into a phase.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = ["PHASES", "CATEGORIES", "FrameView", "FrameResolver", "Rule", "DEFAULT_RULES", "build_rules",
           "frame_phase", "categorize", "operation", "chain", "format_frame"]

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
        self._fits: dict[tuple[str, int, str], tuple | bool | None] = {}
        # local files whose line, for a frame, lies outside every function of the frame's name: how many
        # frames did so, and how many frames of each file were checked
        self.stale: dict[str, int] = {}
        self.checked: dict[str, int] = {}

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

    def _fit(self, path: str, line: int, name: str) -> tuple | bool:
        """(class, qualified name, source text) of a frame's line in the local file ``path``; False when the
        line lies outside every function of the frame's name (the file is another revision)."""
        best = None
        for start, end, cls, qual in self._functions(path):
            if start <= line <= end and (best is None or start >= best[0]):
                best = (start, cls, qual)
        if best is not None and best[2].rsplit(".", 1)[-1] == name:
            return best[1], best[2], linecache.getline(path, line).strip()
        if (name.startswith("<") and name != "<module>") or (name == "<module>" and best is None):
            return None, name, linecache.getline(path, line).strip()  # a lambda or comprehension: no name to check
        return False

    def check(self, frame: Mapping[str, Any]) -> None:
        """Compare a model-code frame with its local file, once: a frame whose line lies outside every
        function of its name makes the whole file distrusted (:attr:`stale`), for every frame of it."""
        key = _frame_key(frame)
        if key in self._fits:
            return
        filename, line, name = key
        path = self.local_path(filename) if _is_python_frame(filename) and self.is_user(filename) else None
        self._fits[key] = fit = self._fit(path, line, name) if path is not None else None
        if fit is not None:
            self.checked[filename] = self.checked.get(filename, 0) + 1
            if fit is False:
                self.stale[filename] = self.stale.get(filename, 0) + 1

    def resolve(self, frame: Mapping[str, Any]) -> FrameView:
        key = _frame_key(frame)
        view = self._frames.get(key)
        if view is not None:
            return view
        filename, line, name = key
        python = _is_python_frame(filename)
        view = FrameView(filename, line, name, python=python, qualname=name)
        if python:
            view.user = self.is_user(filename)
        if view.user:
            self.check(frame)
            fit = self._fits[key]
            if fit and filename not in self.stale:
                view.cls, view.qualname, view.text = fit
        view.hint = _frame_hint(view)
        self._frames[key] = view
        return view


def _frame_key(frame: Mapping[str, Any]) -> tuple[str, int, str]:
    return str(frame.get("filename") or ""), int(frame.get("line") or 0), str(frame.get("name") or "")


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


def format_frame(f: FrameView) -> str:
    parts = [p for p in re.split(r"[/\\]", f.filename) if p]
    short = "/".join(parts[-2:]) if parts else f.filename
    return f"{short}:{f.line} in {f.qualname or f.name}"


def chain(views: Sequence[FrameView], max_depth: int) -> list[str]:
    out: list[str] = []
    for f in views:
        if f.user:
            s = format_frame(f)
            if not out or out[-1] != s:
                out.append(s)
        if len(out) >= max_depth:
            break
    return out


# C++ frames that only record how the stack was captured or how Python called in.
_PLUMBING_RE = re.compile(
    r"unwind::unwind|CapturedTraceback::gather|gather_with_cpp|^_start$|__libc_start_main|PyEval_|PyObject_"
    r"|PyFunction_|^_Py|^Py[A-Z]|c10::cuda::CUDACachingAllocator|c10::Dispatcher|c10::impl::|c10::BoxedKernel"
    r"|c10::KernelFunction|std::|^\?\?$|^$"
)
_CPP_OP_RE = re.compile(r"Backward\d*::apply|AccumulateGrad|at::native::|at::_ops::|at::cuda::")


def operation(views: Sequence[FrameView]) -> str:
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
