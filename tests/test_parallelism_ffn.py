"""The §8 FFN's equations (cs336report.accounting.parallelism.ffn) run on numbers, device by device, against
torch's autograd of the whole FFN: each split's outputs and gradients are the whole FFN's, cut as the split
says. Also: a shard of the wrong shape is refused, and only matrix products cost FLOPs."""

import pytest
import sympy as sp
import torch

from cs336report.accounting.parallelism import Setting, ffn
from cs336report.accounting.parallelism.setting import D_FF, N_DP, N_FSDP, N_TP, B, D


def _f(t):
    return torch.nn.functional.silu(t)


def _f_prime(t):
    s = torch.sigmoid(t)
    return s * (1 + t * (1 - s))


def _evaluate(expr, env):
    """One device's value of a program's matrix expression; ``env`` maps names to tensors."""
    if isinstance(expr, sp.MatrixSymbol):
        return env[expr.name]
    if isinstance(expr, ffn.Elementwise):
        return {"f": _f, "f'": _f_prime}[expr.args[0].name](_evaluate(expr.args[1], env))
    if isinstance(expr, sp.Transpose):
        return _evaluate(expr.arg, env).T
    if isinstance(expr, sp.MatMul):
        a, b = (_evaluate(x, env) for x in expr.args)
        return a @ b
    if isinstance(expr, sp.MatAdd):
        return sum(_evaluate(x, env) for x in expr.args)
    if isinstance(expr, sp.HadamardProduct):
        out = _evaluate(expr.args[0], env)
        for x in expr.args[1:]:
            out = out * _evaluate(x, env)
        return out
    raise TypeError(type(expr))


def _key(coords: dict) -> tuple:
    return tuple(sorted(coords.items()))


def _split_dim(whole, piece) -> int:
    return 0 if sp.simplify(whole.shape[0] - piece.shape[0]) != 0 else 1


def _run(program, envs: dict, sizes: dict) -> dict:
    """Run a program on devices keyed by their coordinates; ``sizes`` gives each group's device count."""
    for eq in program:
        if not isinstance(eq.rhs, ffn.Collective):
            for env in envs.values():
                env[eq.lhs.name] = _evaluate(eq.rhs, env)
            continue
        c, n = eq.rhs, sizes[eq.rhs.group]
        results = {}
        for key in envs:
            coords = dict(key)
            parts = [_evaluate(c.operand, envs[_key({**coords, c.index: k})]) for k in range(n)]
            if c.kind == "all-reduce":
                results[key] = sum(parts)
            elif c.kind == "all-gather":
                results[key] = torch.cat(parts, dim=_split_dim(eq.lhs, c.operand))
            else:  # reduce-scatter: each device keeps its own piece of the sum
                results[key] = torch.chunk(sum(parts), n, dim=_split_dim(c.operand, eq.lhs))[coords[c.index]]
        for key, result in results.items():
            envs[key][eq.lhs.name] = result
    return envs


SMALL = {"B": 6, "D": 4, "D_FF": 6}


@pytest.fixture(scope="module")
def ffn_reference():
    """The whole FFN and its gradients for one dy, by torch's autograd (float64)."""
    g = torch.Generator().manual_seed(0)
    b, d, f = SMALL["B"], SMALL["D"], SMALL["D_FF"]
    t = {k: torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=k != "dy")
         for k, shape in (("x", (b, d)), ("W1", (d, f)), ("W2", (d, f)), ("W3", (f, d)), ("dy", (b, d)))}
    x1, x2 = t["x"] @ t["W1"], t["x"] @ t["W2"]
    z = _f(x1) * x2
    y = z @ t["W3"]
    y.backward(t["dy"])
    out = {k: v.detach() for k, v in t.items()}
    out.update(x1=x1.detach(), x2=x2.detach(), z=z.detach(), y=y.detach(),
               **{f"d{k}": t[k].grad for k in ("x", "W1", "W2", "W3")})
    return out


def _rows(tensor, k, n):
    return torch.chunk(tensor, n, dim=0)[k]


def _cols(tensor, k, n):
    return torch.chunk(tensor, n, dim=1)[k]


def test_data_parallel_backward_gives_the_whole_gradients(ffn_reference):
    r, n = ffn_reference, 3
    envs = {_key({"i": k}): {"x^(i)": _rows(r["x"], k, n), "dy^(i)": _rows(r["dy"], k, n), "W_1": r["W1"],
                             "W_2": r["W2"], "W_3": r["W3"], "x_1^(i)": _rows(r["x1"], k, n),
                             "x_2^(i)": _rows(r["x2"], k, n), "z^(i)": _rows(r["z"], k, n)} for k in range(n)}
    _run(ffn.data_parallel_backward(), envs, {N_DP: n})
    for k in range(n):
        env = envs[_key({"i": k})]
        torch.testing.assert_close(env["dx^(i)"], _rows(r["dx"], k, n))
        for w in ("W1", "W2", "W3"):
            torch.testing.assert_close(env[f"dW_{w[1]}"], r[f"d{w}"])


def test_fsdp_forward_and_backward_give_each_shard_its_gradient(ffn_reference):
    r, n = ffn_reference, 2
    envs = {_key({"i": k}): {"x^(i)": _rows(r["x"], k, n), "dy^(i)": _rows(r["dy"], k, n),
                             "W_1^(i)": _rows(r["W1"], k, n), "W_2^(i)": _rows(r["W2"], k, n),
                             "W_3^(i)": _rows(r["W3"], k, n)} for k in range(n)}
    _run(ffn.fsdp_forward() + ffn.fsdp_backward(), envs, {N_FSDP: n})
    for k in range(n):
        env = envs[_key({"i": k})]
        torch.testing.assert_close(env["y^(i)"], _rows(r["y"], k, n))
        torch.testing.assert_close(env["dx^(i)"], _rows(r["dx"], k, n))
        for w in ("W1", "W2", "W3"):
            torch.testing.assert_close(env[f"dW_{w[1]}^(i)"], _rows(r[f"d{w}"], k, n))


def test_tensor_parallel_equations_give_the_whole_output_and_input_gradient(ffn_reference):
    r, n = ffn_reference, 3
    envs = {_key({"i": k}): {"x": r["x"], "dy": r["dy"], "W_1^(i)": _cols(r["W1"], k, n),
                             "W_2^(i)": _cols(r["W2"], k, n), "W_3^(i)": _rows(r["W3"], k, n)} for k in range(n)}
    _run(ffn.tensor_parallel_forward() + ffn.tensor_parallel_backward(), envs, {N_TP: n})
    for k in range(n):
        env = envs[_key({"i": k})]
        torch.testing.assert_close(env["y"], r["y"])
        torch.testing.assert_close(env["dx"], r["dx"])
        torch.testing.assert_close(env["dW_1^(i)"], _cols(r["dW1"], k, n))
        torch.testing.assert_close(env["dW_2^(i)"], _cols(r["dW2"], k, n))
        torch.testing.assert_close(env["dW_3^(i)"], _rows(r["dW3"], k, n))


def test_two_dimensional_forward_gives_each_batch_shard_its_output(ffn_reference):
    r, nt, nf = ffn_reference, 3, 2
    envs = {}
    for i in range(nt):
        for j in range(nf):
            envs[_key({"i": i, "j": j})] = {
                "x^(j)": _rows(r["x"], j, nf), "W_1^(i,j)": _cols(_rows(r["W1"], j, nf), i, nt),
                "W_2^(i,j)": _cols(_rows(r["W2"], j, nf), i, nt), "W_3^(i,j)": _cols(_rows(r["W3"], i, nt), j, nf)}
    _run(ffn.fsdp_tp_forward(), envs, {N_FSDP: nf, N_TP: nt})
    for key, env in envs.items():
        j = dict(key)["j"]
        torch.testing.assert_close(env["y^(j)"], _rows(r["y"], j, nf))
        assert env["W_1^(i)"].shape == (4, 2) and env["W_3^(i)"].shape == (2, 4)  # (D, D_FF/N_TP), (D_FF/N_TP, D)


def test_a_shard_of_the_wrong_shape_is_refused():
    x, w3 = sp.MatrixSymbol("x", B, D), sp.MatrixSymbol("W_3^(i)", D_FF, D / N_TP)  # W3 split by columns
    z = sp.MatrixSymbol("z^(i)", B, D_FF / N_TP)
    with pytest.raises(sp.ShapeError):
        ffn.Equation(sp.MatrixSymbol("y^(i)", B, D), z * w3, "down-projection")
    with pytest.raises(sp.ShapeError):  # an all-gather must end N times as large as its pieces
        ffn.Equation(sp.MatrixSymbol("W", D, D_FF), ffn.Collective("all-gather", x, "i", N_FSDP), "gather")


def test_matrix_products_cost_two_flops_a_multiply_add_and_the_rest_nothing():
    a, b = sp.MatrixSymbol("a", 3, 5), sp.MatrixSymbol("b", 5, 7)
    product = ffn.Equation(sp.MatrixSymbol("c", 3, 7), a * b, "product")
    assert product.flops(Setting()) == 2 * 3 * 5 * 7
    elementwise = ffn.Equation(sp.MatrixSymbol("e", 3, 5), sp.hadamard_product(a, ffn.Elementwise("f", a)), "gate")
    assert elementwise.flops(Setting()) == 0
