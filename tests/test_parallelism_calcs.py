"""The §8 calculation problems (2026 problems 22-26): every answer checked against arithmetic worked out here
by hand, the limiting cases, and the records' shape (the equations themselves: test_parallelism_ffn.py).

The hand-worked setting: B = 2^20 rows, D = 4096, D_FF = 16384, C = 1e15 FLOP/s, W = 4e11 B/s, so
B·W/C = 419.4304 and D_FF·W/C = 6.5536; D·D_FF = 2^26 and B·D·D_FF = 2^46.
"""

import json

import pytest
import sympy as sp

from cs336report.accounting.parallelism import DERIVATIONS, Derivation, Setting
from cs336report.accounting.parallelism.alternate_ring_all_reduce import simulate
from cs336report.accounting.parallelism.records import parse
from cs336report.accounting.parallelism.setting import D_FF, N_DP, N_FSDP, N_TP, B, C, D, N, S, W

HAND = {"B": 2**20, "D": 4096, "D_FF": 16384, "C": 1e15, "W": 4e11}


def _answers(derivation: Derivation, part: str) -> list:
    return list(derivation.part(part).answers)


def _same(expr, expected) -> bool:
    return sp.simplify(expr - expected) == 0


def _bound(step):
    relation = parse(step)
    assert isinstance(relation, sp.Le), step.sympy
    return relation.lhs, relation.rhs


# --- alternate_ring_all_reduce (§8.1) ----------------------------------------------------------------


def test_alternate_all_reduce_takes_n_minus_one_whole_tensor_steps():
    d = DERIVATIONS["alternate_ring_all_reduce"](Setting.with_values(S=1e9, N=8, W=4e11))
    (answer,) = _answers(d, "")
    assert _same(parse(answer), (N - 1) * S / W)
    assert answer.value == pytest.approx(7 * 1e9 / 4e11)  # 0.0175 s
    steps = {s.what: s for s in d.part("").steps}
    ratio = next(s for what, s in steps.items() if "over that one's" in what)
    assert _same(parse(ratio), N / 2) and ratio.value == pytest.approx(4)
    ring = next(s for what, s in steps.items() if "for comparison" in what)
    assert ring.value == pytest.approx(2 * 7 / 8 * 1e9 / 4e11)  # 0.004375 s


@pytest.mark.parametrize("n, seconds", [(1, 0.0), (2, 1e9 / 4e11)])
def test_alternate_all_reduce_limits(n, seconds):
    # one device sends nothing; on two devices both algorithms send one tensor's worth each
    d = DERIVATIONS["alternate_ring_all_reduce"](Setting.with_values(S=1e9, N=n, W=4e11))
    assert _answers(d, "")[0].value == pytest.approx(seconds)
    assert seconds == pytest.approx(2 * (n - 1) / n * 1e9 / 4e11)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_the_schedule_all_reduces_sending_one_whole_tensor_a_step(n):
    run = simulate(n, chunks=3)
    assert all(total == run["total"] for total in run["sums"])
    assert run["total"][0] == sum(10**i for i in range(n))  # every device's tensor counted once
    assert len(run["sent"]) == n - 1 and all(share == 1 for step in run["sent"] for share in step)


# --- data_parallel_calcs (§8.2) ------------------------------------------------------------------------


def test_data_parallel_answers_by_hand():
    d = DERIVATIONS["data_parallel_calcs"](Setting.with_values(N_DP=64, **HAND))
    (flops,), (comm,), (limit,) = (_answers(d, p) for p in "abc")
    # six products of 2·(B/N)·D·D_FF each: dz, the two terms of dx, dW1, dW2, dW3
    assert _same(parse(flops), 12 * B * D * D_FF / N_DP)
    assert flops.value == 6 * 2 * (2**20 // 64) * 4096 * 16384 == 13_194_139_533_312
    # three gradients of 2·D·D_FF bytes, all-reduced: 2·(N - 1)/N of the bytes at W
    assert _same(parse(comm), 2 * (N_DP - 1) / N_DP * 3 * 2 * D * D_FF / W)
    assert comm.value == pytest.approx(2 * 63 / 64 * 3 * 2 * 2**26 / 4e11)  # 0.00198180864 s
    lhs, rhs = _bound(limit)
    assert lhs == N_DP and _same(rhs, 1 + B * W / C)
    assert limit.value == pytest.approx(1 + 2**20 * 4e11 / 1e15)  # 420.4304 devices


def test_data_parallel_bound_is_where_communication_meets_computation():
    d = DERIVATIONS["data_parallel_calcs"]()
    comm, flops = parse(_answers(d, "b")[0]), parse(_answers(d, "a")[0])
    _, limit = _bound(_answers(d, "c")[0])
    assert _same(comm.subs(N_DP, limit), (flops / C).subs(N_DP, limit))
    values = {B: 2**20, D: 4096, D_FF: 16384, C: 1e15, W: 4e11}
    above = {**values, N_DP: float(limit.subs(values)) * 1.01}
    below = {**values, N_DP: float(limit.subs(values)) * 0.99}
    assert comm.subs(above) > (flops / C).subs(above) and comm.subs(below) < (flops / C).subs(below)


# --- fsdp_calcs (§8.3) ---------------------------------------------------------------------------------


def test_fsdp_answers_by_hand():
    d = DERIVATIONS["fsdp_calcs"](Setting.with_values(N_FSDP=64, **HAND))
    (bwd_flops, fwd_flops), (bwd_comm, fwd_comm), (bwd_limit, fwd_limit) = (_answers(d, p) for p in "abc")
    assert "backward" in bwd_flops.what and "forward" in fwd_flops.what  # the handout's order
    assert _same(parse(bwd_flops), 12 * B * D * D_FF / N_FSDP) and _same(parse(fwd_flops), 6 * B * D * D_FF / N_FSDP)
    assert bwd_flops.value == 13_194_139_533_312 and fwd_flops.value == 3 * 2 * 2**14 * 4096 * 16384
    # backward: gather the three weights, reduce-scatter their gradients; forward: the gather only
    gather = (N_FSDP - 1) / N_FSDP * 3 * 2 * D * D_FF / W
    assert _same(parse(bwd_comm), 2 * gather) and _same(parse(fwd_comm), gather)
    assert fwd_comm.value == pytest.approx(63 / 64 * 6 * 2**26 / 4e11)  # 0.00099090432 s
    assert bwd_comm.value == pytest.approx(2 * fwd_comm.value)
    for limit in (bwd_limit, fwd_limit):
        lhs, rhs = _bound(limit)
        assert lhs == N_FSDP and _same(rhs, 1 + B * W / C) and limit.value == pytest.approx(420.4304)


# --- tp_calcs (§8.4) -----------------------------------------------------------------------------------


def test_tensor_parallel_answers_by_hand():
    d = DERIVATIONS["tp_calcs"](Setting.with_values(N_TP=4, **HAND))
    (fwd_flops, bwd_flops), (fwd_comm, bwd_comm), (bwd_limit, fwd_limit) = (_answers(d, p) for p in "bcd")
    assert _same(parse(fwd_flops), 6 * B * D * D_FF / N_TP) and _same(parse(bwd_flops), 12 * B * D * D_FF / N_TP)
    assert fwd_flops.value == 3 * 2 * 2**20 * 4096 * (16384 // 4)
    # forward: all-reduce of y (B, D); backward: all-reduce of dx (B, D)
    for comm in (fwd_comm, bwd_comm):
        assert _same(parse(comm), 2 * (N_TP - 1) / N_TP * 2 * B * D / W)
        assert comm.value == pytest.approx(2 * 3 / 4 * 2 * 2**32 / 4e11)  # 0.03221225472 s
    assert "backward" in bwd_limit.what and "forward" in fwd_limit.what  # (d) asks backward first
    assert _same(_bound(bwd_limit)[1], 1 + 3 * D_FF * W / C) and bwd_limit.value == pytest.approx(1 + 3 * 6.5536)
    assert _same(_bound(fwd_limit)[1], 1 + 3 * D_FF * W / (2 * C))
    assert fwd_limit.value == pytest.approx(1 + 1.5 * 6.5536)  # 10.8304 devices


def test_tensor_parallel_backward_equations_are_the_ones_asked_for():
    answers = _answers(DERIVATIONS["tp_calcs"](), "a")
    assert all(a.kind == "equation" for a in answers)
    lhs = [a.sympy.split(" = ")[0] for a in answers]
    assert lhs == ["dz^(i)", "dx_2^(i)", "dx_1^(i)", "dxbar^(i)", "dx", "dW_3^(i)", "dW_2^(i)", "dW_1^(i)"]
    collectives = [a for a in answers if "all-" in a.sympy or "reduce-scatter" in a.sympy]
    assert [a.sympy for a in collectives] == ["dx = all-reduce_i({dxbar^(i)})"]
    notes = {a.sympy.split(" = ")[0]: a.note for a in answers}
    assert notes["dz^(i)"].startswith("shape (B, D_FF/N_TP)") and notes["dW_3^(i)"].startswith("shape (D_FF/N_TP, D)")


# --- fsdp_tp_calcs (§8.5) -------------------------------------------------------------------------------


def test_two_dimensional_answers_by_hand():
    d = DERIVATIONS["fsdp_tp_calcs"](Setting.with_values(N_FSDP=64, N_TP=4, **HAND))
    (flops,), (comm,), (overlapped,), (sequential,) = (_answers(d, p) for p in "abcd")
    assert _same(parse(flops), 6 * B * D * D_FF / (N_FSDP * N_TP))
    assert flops.value == 3 * 2 * (2**20 // 64) * 4096 * (16384 // 4)
    fsdp_axis = (N_FSDP - 1) / N_FSDP * 3 * 2 * D * (D_FF / N_TP) / W  # gather of (D, D_FF/N_TP) slices
    tp_axis = 2 * (N_TP - 1) / N_TP * 2 * (B / N_FSDP) * D / W  # all-reduce of (B/N_FSDP, D)
    assert _same(parse(comm), sp.Max(fsdp_axis, tp_axis))
    assert comm.value == pytest.approx(max(63 / 64 * 6 * 2**26 / 4 / 4e11, 2 * 3 / 4 * 2 * 2**14 * 4096 / 4e11))
    assert _same(_bound(overlapped)[1], (1 + B * W / C) * (1 + 3 * D_FF * W / (2 * C)))
    assert overlapped.value == pytest.approx(420.4304 * 10.8304)  # 4553.42940416 devices
    m = 3 * B * D_FF * W / C + 3 * D_FF + 2 * B
    assert _same(_bound(sequential)[1], m**2 / (24 * B * D_FF))
    m_hand = 3 * 2**34 * 4e-4 + 3 * 16384 + 2 * 2**20  # 22,762,147.0208
    assert sequential.value == pytest.approx(m_hand**2 / (24 * 2**34))  # 1256.595 devices


def test_two_dimensional_best_split_spends_the_budget_and_is_a_maximum():
    d = DERIVATIONS["fsdp_tp_calcs"](Setting.with_values(**HAND))
    steps = {s.what: s for s in d.part("d").steps}
    nf, nt = steps["N_FSDP where N along the boundary is largest"].value, steps["N_TP there"].value
    bwc, fwc = 2**20 * 4e-4, 16384 * 4e-4

    def slack(f, t):  # compute bound while 3·D_FF·(N_FSDP - 1) + 2·B·(N_TP - 1) <= 3·B·D_FF·W/C
        return 3 * 2**20 * 16384 * 4e-4 - 3 * 16384 * (f - 1) - 2 * 2**20 * (t - 1)

    assert slack(nf, nt) == pytest.approx(0, abs=1e-9 * 3 * 2**20 * 16384 * 4e-4)
    assert nf == pytest.approx((3 * 2**20 * fwc + 3 * 16384 + 2 * 2**20) / (6 * 16384))
    for shift in (0.9, 1.1):  # other splits on the boundary give fewer devices
        f = nf * shift
        t = 1 + (3 * 2**20 * fwc - 3 * 16384 * (f - 1)) / (2 * 2**20)
        assert f * t < nf * nt
    assert nf * nt < (1 + bwc) * (1 + 1.5 * fwc)  # fewer than with the axes overlapped


@pytest.mark.parametrize("rows, width, below_one, alone", [
    # one row: the best split wants N_FSDP ≈ 0.5, so tensor parallelism alone gives the bound, 1 + 1.5·D_FF·W/C
    (1, 16384, "N_FSDP where N along the boundary is largest", 1 + 1.5 * 16384 * 4e-4),
    # a hidden layer one value wide: the best split wants N_TP ≈ 0.5, so FSDP alone does, 1 + B·W/C
    (2**20, 1, "N_TP there", 1 + 2**20 * 4e-4),
])
def test_two_dimensional_falls_back_to_one_axis_when_the_split_needs_less_than_one_device(rows, width, below_one,
                                                                                        alone):
    d = DERIVATIONS["fsdp_tp_calcs"](Setting.with_values(B=rows, D=4096, D_FF=width, C=1e15, W=4e11))
    steps = {s.what.split(" (")[0]: s for s in d.part("d").steps}
    assert steps[below_one].value == pytest.approx(0.5, abs=0.01)
    assert steps["largest N in every case"].value == pytest.approx(alone)


def test_two_dimensional_reduces_to_each_axis_alone():
    fsdp, tp = (DERIVATIONS[p]() for p in ("fsdp_calcs", "tp_calcs"))
    two_d = DERIVATIONS["fsdp_tp_calcs"]()
    flops = parse(_answers(two_d, "a")[0])
    assert _same(flops.subs(N_TP, 1), parse(_answers(fsdp, "a")[1]))  # FSDP forward
    assert _same(flops.subs(N_FSDP, 1), parse(_answers(tp, "b")[0]))  # TP forward
    comm = parse(_answers(two_d, "b")[0])
    extra = sp.Symbol("k", nonnegative=True)  # device counts are at least 1: N = 1 + k
    for group, alone in ((N_FSDP, parse(_answers(fsdp, "b")[1])), (N_TP, parse(_answers(tp, "c")[0]))):
        other = ({N_FSDP, N_TP} - {group}).pop()
        assert _same(comm.subs(other, 1).subs(group, 1 + extra), alone.subs(group, 1 + extra))


# --- limits and the many-devices form ---------------------------------------------------------------


def test_one_device_communicates_nothing():
    ones = {N: 1, N_DP: 1, N_FSDP: 1, N_TP: 1}
    for name, part in (("alternate_ring_all_reduce", ""), ("data_parallel_calcs", "b"), ("fsdp_calcs", "b"),
                       ("tp_calcs", "c"), ("fsdp_tp_calcs", "b")):
        for answer in _answers(DERIVATIONS[name](), part):
            assert parse(answer).subs(ones) == 0, (name, answer.sympy)


def test_many_devices_drops_the_rings_share():
    s = Setting.with_values(many_devices=True, **HAND)
    dp = DERIVATIONS["data_parallel_calcs"](s)
    assert _same(parse(_answers(dp, "b")[0]), 12 * D * D_FF / W)
    assert _same(_bound(_answers(dp, "c")[0])[1], B * W / C)
    two_d = DERIVATIONS["fsdp_tp_calcs"](s)
    assert _same(_bound(_answers(two_d, "c")[0])[1], 3 * B * D_FF * W**2 / (2 * C**2))
    assert _same(_bound(_answers(two_d, "d")[0])[1], 3 * B * D_FF * W**2 / (8 * C**2))
    assert _answers(two_d, "d")[0].value == pytest.approx(3 * 2**34 * 4e11**2 / (8 * 1e30))  # 1030.79 devices
    # the exact derivation gives the same forms as a step
    exact = {st.what: st for st in DERIVATIONS["fsdp_tp_calcs"]().part("d").steps}
    assert _same(_bound(exact["for many devices, (N - 1)/N taken as 1"])[1], 3 * B * D_FF * W**2 / (8 * C**2))


# --- the records ------------------------------------------------------------------------------------


SUBQUESTIONS = {"alternate_ring_all_reduce": ("", 1), "data_parallel_calcs": ("abc", 3), "fsdp_calcs": ("abc", 3),
                "tp_calcs": ("abcd", 4), "fsdp_tp_calcs": ("abcd", 4)}
SECTIONS = {"alternate_ring_all_reduce": "8.1", "data_parallel_calcs": "8.2", "fsdp_calcs": "8.3",
            "tp_calcs": "8.4", "fsdp_tp_calcs": "8.5"}


@pytest.mark.parametrize("problem", list(SUBQUESTIONS))
def test_a_derivation_is_json_with_its_parts_in_order(problem):
    d = DERIVATIONS[problem](Setting.with_values(N=4, N_DP=4, N_FSDP=4, N_TP=2, S=1e6, **HAND))
    letters, count = SUBQUESTIONS[problem]
    assert [p.part for p in d.parts] == (list(letters) or [""]) and len(d.parts) == count
    assert d.problem == problem and d.section == SECTIONS[problem]
    data = json.loads(json.dumps(d.as_dict()))
    assert Derivation.from_dict(data) == d
    assert data["setting"]["values"]["D_FF"] == 16384 and data["setting"]["bytes_per_value"] == 2
    for part in d.parts:
        assert part.ask and part.answers and part.steps
        for step in part.steps + part.answers:
            assert step.what and step.sympy and step.latex
            if step.kind == "equation":
                assert step.value is None
                continue
            expr = parse(step)
            assert sp.latex(expr) == step.latex  # the two forms say the same thing
            assert step.value is not None, (problem, step.what)  # every symbol has a number here
        for answer in part.answers:
            assert answer.note, (problem, answer.what)  # each answer carries its reason


def test_without_numbers_every_step_stays_symbolic():
    for problem, derive in DERIVATIONS.items():
        for part in derive().parts:
            assert all(s.value is None for s in part.steps + part.answers), problem


def test_setting_refuses_unknown_symbols_and_impossible_values():
    with pytest.raises(ValueError, match="N_PP"):
        Setting.with_values(N_PP=2)
    with pytest.raises(ValueError, match="N_TP must be at least 1"):
        Setting.with_values(N_TP=0.5)
    with pytest.raises(ValueError, match="W must be positive"):
        Setting.with_values(W=0)
    s = Setting.with_values(B=8, W=1e9, many_devices=True)
    assert Setting.from_dict(json.loads(json.dumps(s.as_dict()))) == s
