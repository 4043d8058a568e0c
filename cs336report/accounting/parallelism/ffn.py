"""The §8 FFN as matrix equations, one list per way of splitting it over devices, and their costs.

Each tensor is a sympy ``MatrixSymbol`` with its symbolic shape, so sympy checks every product and
sum as the equations are written (a wrong shard shape raises ``ShapeError``), and the costs come
from the shapes: each product (A, K)(K, C) costs 2·A·K·C FLOPs, each collective moves the bytes of
its whole tensor over its group's ring (:class:`~.setting.Setting`). Names follow the handout's
(§8.2-8.5): ``^(i)`` marks one device's piece; a bar (``dWbar``) a partial sum that a collective
completes; ``f'`` the derivative of the activation ``f``.

    forward:  x1 = x W1,  x2 = x W2,  z = f(x1) ∘ x2,  y = z W3
    backward: dz = dy W3ᵀ,  dx2 = dz ∘ f(x1),  dx1 = dz ∘ f'(x1) ∘ x2,  dx = dx1 W1ᵀ + dx2 W2ᵀ,
              dW3 = zᵀ dy,  dW2 = xᵀ dx2,  dW1 = xᵀ dx1
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from sympy.matrices.expressions import HadamardProduct, MatAdd, MatMul, MatrixExpr, Transpose
from sympy.printing.str import StrPrinter

from .setting import D_FF, N_DP, N_FSDP, N_TP, B, D, Setting

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce")


class Elementwise(MatrixExpr):
    """A scalar function applied to every entry of a matrix: f(x1), f'(x1)."""

    def __new__(cls, name: str | sp.Symbol, arg: MatrixExpr):
        return MatrixExpr.__new__(cls, sp.Symbol(name) if isinstance(name, str) else name, arg)

    @property
    def shape(self):
        return self.args[1].shape

    def _sympystr(self, printer):
        return f"{self.args[0].name}({printer._print(self.args[1])})"

    def _latex(self, printer):
        return rf"{self.args[0].name}\left({printer._print(self.args[1])}\right)"


class _Text(StrPrinter):
    """Plain text for equations: ``dz^(i) = dy W_3^(i)^T``, ``f(x_1) ∘ x_2``."""

    def _print_MatMul(self, expr):
        return " ".join(self.parenthesize(a, 50) for a in expr.args)

    def _print_Transpose(self, expr):
        arg = self._print(expr.arg)
        return f"({arg})^T" if "^" in arg or " " in arg else f"{arg}^T"

    def _print_HadamardProduct(self, expr):
        return " ∘ ".join(self.parenthesize(a, 50) for a in expr.args)


def text(expr) -> str:
    return _Text().doprint(expr)


def _size(matrix) -> sp.Expr:
    rows, cols = matrix.shape
    return rows * cols


def _same(a, b) -> bool:
    return sp.cancel(a - b) == 0


@dataclass(frozen=True)
class Collective:
    """A collective over the ``index`` axis of ``group`` devices; ``operand`` is one device's input."""

    kind: str
    operand: MatrixExpr
    index: str
    group: sp.Symbol

    def __post_init__(self):
        if self.kind not in COLLECTIVES:
            raise ValueError(f"kind must be one of {COLLECTIVES}, not {self.kind!r}")

    def text(self) -> str:
        return f"{self.kind}_{self.index}({{{text(self.operand)}}})"

    def latex(self) -> str:
        return (rf"\text{{{self.kind}}}\left(\left\{{{sp.latex(self.operand)}\right\}}_{{{self.index}=0}}"
                rf"^{{{sp.latex(self.group)}-1}}\right)")


@dataclass(frozen=True)
class Equation:
    """``lhs = rhs`` on one device; ``role`` says what it computes, in our words."""

    lhs: sp.MatrixSymbol
    rhs: MatrixExpr | Collective
    role: str

    def __post_init__(self):
        if isinstance(self.rhs, Collective):
            whole, piece = ((self.lhs, self.rhs.operand) if self.rhs.kind == "all-gather"
                            else (self.rhs.operand, self.lhs))
            factor = 1 if self.rhs.kind == "all-reduce" else self.rhs.group
            if not _same(_size(whole), factor * _size(piece)):
                raise sp.ShapeError(f"{self.text()}: {self.rhs.kind} of {piece.shape} into {whole.shape}")
        elif not all(_same(a, b) for a, b in zip(self.lhs.shape, self.rhs.shape)):
            raise sp.ShapeError(f"{self.text()}: {self.lhs.shape} = {self.rhs.shape}")

    def text(self) -> str:
        rhs = self.rhs.text() if isinstance(self.rhs, Collective) else text(self.rhs)
        return f"{text(self.lhs)} = {rhs}"

    def latex(self) -> str:
        rhs = self.rhs.latex() if isinstance(self.rhs, Collective) else sp.latex(self.rhs)
        return f"{sp.latex(self.lhs)} = {rhs}"

    def flops(self, setting: Setting) -> sp.Expr:
        """The matrix products' FLOPs; element-wise work and collectives count none."""
        if isinstance(self.rhs, Collective):
            return sp.Integer(0)
        terms = self.rhs.args if isinstance(self.rhs, MatAdd) else (self.rhs,)
        total = sp.Integer(0)
        for term in terms:
            if isinstance(term, MatMul):
                if len(term.args) != 2:
                    raise ValueError(f"{self.text()}: one product of two matrices per term")
                (rows, inner), (_, cols) = term.args[0].shape, term.args[1].shape
                total += setting.matmul_flops(rows, inner, cols)
            elif not isinstance(term, (HadamardProduct, Elementwise, sp.MatrixSymbol, Transpose)):
                raise ValueError(f"{self.text()}: no cost known for {type(term).__name__}")
        return total

    def seconds(self, setting: Setting) -> sp.Expr:
        """A collective's time on its ring: its whole tensor's bytes (the gathered or the reduced one)."""
        if not isinstance(self.rhs, Collective):
            return sp.Integer(0)
        whole = self.lhs if self.rhs.kind == "all-gather" else self.rhs.operand
        size = setting.bytes_per_value * _size(whole)
        timer = {"all-gather": setting.all_gather, "reduce-scatter": setting.reduce_scatter,
                 "all-reduce": setting.all_reduce}[self.rhs.kind]
        return timer(size, self.rhs.group)


Program = tuple[Equation, ...]


def flops(program: Program, setting: Setting) -> sp.Expr:
    return sp.factor(sum((e.flops(setting) for e in program), sp.Integer(0)))


def seconds_by_group(program: Program, setting: Setting) -> dict[sp.Symbol, sp.Expr]:
    """Communication time of each device group's collectives (run one after another within a group)."""
    found: dict[sp.Symbol, sp.Expr] = {}
    for e in program:
        if isinstance(e.rhs, Collective):
            found[e.rhs.group] = found.get(e.rhs.group, sp.Integer(0)) + e.seconds(setting)
    return {group: sp.factor(t) for group, t in found.items()}


def matmuls(program: Program) -> list[Equation]:
    return [e for e in program if not isinstance(e.rhs, Collective) and e.flops(Setting()) != 0]


def collectives(program: Program) -> list[Equation]:
    return [e for e in program if isinstance(e.rhs, Collective)]


# --- the FFN, written once, on whatever pieces a layout hands it ---------------------------------------


def _m(name: str, tag: str, rows, cols) -> sp.MatrixSymbol:
    return sp.MatrixSymbol(f"{name}{tag}", rows, cols)


def _activations(x, w1, w3, tag):
    rows, hidden = x.shape[0], w1.shape[1]
    return (_m("x_1", tag, rows, hidden), _m("x_2", tag, rows, hidden), _m("z", tag, rows, hidden),
            _m("y", tag, rows, w3.shape[1]))


def _forward(x, w1, w2, w3, tag: str) -> list[Equation]:
    x1, x2, z, y = _activations(x, w1, w3, tag)
    return [Equation(x1, x * w1, "first up-projection"), Equation(x2, x * w2, "second up-projection"),
            Equation(z, sp.hadamard_product(Elementwise("f", x1), x2), "gated activation"),
            Equation(y, z * w3, "down-projection")]


def _backward(x, w1, w2, w3, dy, tag: str, dx_name: str, dw_names: tuple[str, str, str]) -> list[Equation]:
    x1, x2, z, _ = _activations(x, w1, w3, tag)
    dz, dx1, dx2 = (_m(n, tag, *x1.shape) for n in ("dz", "dx_1", "dx_2"))
    dx = _m(dx_name, tag, *x.shape)
    dw1, dw2, dw3 = (_m(n, tag, *w.shape) for n, w in zip(dw_names, (w1, w2, w3)))
    return [Equation(dz, dy * w3.T, "gradient of z"),
            Equation(dx2, sp.hadamard_product(dz, Elementwise("f", x1)), "gradient of x_2"),
            Equation(dx1, sp.hadamard_product(dz, Elementwise("f'", x1), x2), "gradient of x_1"),
            Equation(dx, dx1 * w1.T + dx2 * w2.T, "gradient of the input"),
            Equation(dw3, z.T * dy, "gradient of W_3"), Equation(dw2, x.T * dx2, "gradient of W_2"),
            Equation(dw1, x.T * dx1, "gradient of W_1")]


def _gathers(shards, wholes, index: str, group) -> list[Equation]:
    """All-gathers of weight shards into the weights the products use."""
    return [Equation(whole, Collective("all-gather", shard, index, group),
                     f"{whole.name.split('^')[0]} from its shards") for shard, whole in zip(shards, wholes)]


def _weights(tag: str, hidden) -> tuple[sp.MatrixSymbol, ...]:
    return _m("W_1", tag, D, hidden), _m("W_2", tag, D, hidden), _m("W_3", tag, hidden, D)


def data_parallel_backward() -> Program:
    """§8.2: each device's batch shard, full weights; the partial weight gradients all-reduced."""
    tag, rows = "^(i)", B / N_DP
    w = _weights("", D_FF)
    x, dy = _m("x", tag, rows, D), _m("dy", tag, rows, D)
    equations = _backward(x, *w, dy, tag, "dx", ("dWbar_1", "dWbar_2", "dWbar_3"))
    for k, weight in zip("321", w[::-1]):
        partial = _m(f"dWbar_{k}", tag, *weight.shape)
        equations.append(Equation(sp.MatrixSymbol(f"dW_{k}", *weight.shape),
                                  Collective("all-reduce", partial, "i", N_DP), f"sum of the W_{k} gradients"))
    return tuple(equations)


def _fsdp_shards():
    tag, n = "^(i)", N_FSDP
    return (_m("W_1", tag, D / n, D_FF), _m("W_2", tag, D / n, D_FF), _m("W_3", tag, D_FF / n, D))


def fsdp_forward() -> Program:
    """§8.3: all-gather the weights (each sharded by rows), then the batch-sharded forward."""
    w = _weights("", D_FF)
    return tuple(_gathers(_fsdp_shards(), w, "i", N_FSDP) + _forward(_m("x", "^(i)", B / N_FSDP, D), *w, "^(i)"))


def fsdp_backward() -> Program:
    """§8.3: gather the weights again, the batch-sharded backward, reduce-scatter the weight gradients."""
    shards, w, rows = _fsdp_shards(), _weights("", D_FF), B / N_FSDP
    x, dy = _m("x", "^(i)", rows, D), _m("dy", "^(i)", rows, D)
    equations = _gathers(shards, w, "i", N_FSDP) + _backward(x, *w, dy, "^(i)", "dx", ("dWbar_1", "dWbar_2", "dWbar_3"))
    for k, shard, weight in zip("321", shards[::-1], w[::-1]):
        partial = _m(f"dWbar_{k}", "^(i)", *weight.shape)
        equations.append(Equation(_m(f"dW_{k}", "^(i)", *shard.shape),
                                  Collective("reduce-scatter", partial, "i", N_FSDP), f"sum of the W_{k} gradients"))
    return tuple(equations)


def tensor_parallel_forward() -> Program:
    """§8.4: W1, W2 split by columns, W3 by rows; the partial outputs all-reduced."""
    x = sp.MatrixSymbol("x", B, D)
    equations = _forward(x, *_weights("^(i)", D_FF / N_TP), "^(i)")
    equations.append(Equation(sp.MatrixSymbol("y", B, D), Collective("all-reduce", equations[-1].lhs, "i", N_TP),
                              "sum of the partial outputs"))
    return tuple(equations)


def tensor_parallel_backward() -> Program:
    """tp_calcs (a): every device has dy whole; its shards' gradients are its own; dx is all-reduced."""
    x, dy = sp.MatrixSymbol("x", B, D), sp.MatrixSymbol("dy", B, D)
    equations = _backward(x, *_weights("^(i)", D_FF / N_TP), dy, "^(i)", "dxbar", ("dW_1", "dW_2", "dW_3"))
    partial = equations[3].lhs
    reduce = Equation(sp.MatrixSymbol("dx", B, D), Collective("all-reduce", partial, "i", N_TP),
                      "sum of the partial input gradients")
    return tuple(equations[:4] + [reduce] + equations[4:])


def fsdp_tp_forward() -> Program:
    """§8.5: device (i, j) gathers its TP shard over the FSDP axis j, runs the TP forward on batch
    shard j, and all-reduces the partial outputs over the TP axis i."""
    nf, nt = N_FSDP, N_TP
    shards = (_m("W_1", "^(i,j)", D / nf, D_FF / nt), _m("W_2", "^(i,j)", D / nf, D_FF / nt),
              _m("W_3", "^(i,j)", D_FF / nt, D / nf))
    w = _weights("^(i)", D_FF / nt)
    equations = _gathers(shards, w, "j", nf) + _forward(_m("x", "^(j)", B / nf, D), *w, "^(i,j)")
    equations.append(Equation(_m("y", "^(j)", B / nf, D), Collective("all-reduce", equations[-1].lhs, "i", nt),
                              "sum of the partial outputs"))
    return tuple(equations)
