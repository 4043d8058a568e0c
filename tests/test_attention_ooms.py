"""pytorch_attention's out-of-memory reading on frames built here: the 80 GB prediction where no cell
ran out, and the forward/backward split where some did."""

import pandas as pd

from cs336report.report.sections.pytorch_attention.ooms import oom_causes, on_80_gb

GiB = 2**30
B = 8


def cell(d, seq, status="ok", k_peak=6.0, k_fwd=4.0, phase=None, error=None):
    m = B * seq**2 * 4
    ok = status == "ok" or phase == "backward passes"
    return {"d": d, "seq": seq, "batch": B, "status": status, "oom_phase": phase, "error": error,
            "matrix_bytes": float(m), "peak_bytes": k_peak * m if status == "ok" else float("nan"),
            "fwd_peak_bytes": k_fwd * m if ok else float("nan"), "gpu_memory_bytes": 140.0 * GiB,
            "source": f"pytorch_attention/naive-d{d}-s{seq}.json.gz"}


def test_on_80_gb_predicts_the_first_seq_beyond_the_grid_where_nothing_ran_out():
    df = pd.DataFrame([cell(d, s) for d in (16, 64) for s in (256, 1024, 4096, 8192, 16384)])
    p = on_80_gb(df)
    # 6 matrices of 8·T²·4 bytes fit 80e9 bytes up to T = sqrt(80e9 / 192) = 20,412
    assert p["fits"] == "20,400" and p["first"] == 32768 and p["seq"] == 16384
    assert p["in_forward"] is True  # 4 matrices at 32768 are 128 GiB, beyond 74.5 GiB
    small = on_80_gb(df[df["seq"] <= 4096])
    assert small["first"] == 32768  # the grid's largest doubled until beyond the limit


def test_on_80_gb_takes_the_first_grid_seq_beyond_the_limit():
    df = pd.DataFrame([cell(16, s) for s in (256, 4096, 24576)] + [cell(16, 65536, "oom", phase="timed forward passes")])
    p = on_80_gb(df, card_bytes=5e11)  # fits up to sqrt(5e11 / 192) = 51,031
    assert p["seq"] == 24576 and p["first"] == 65536


def test_oom_causes_splits_forward_from_backward_failures():
    msg = ("CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
           "10.84 GiB is free. Of the allocated memory 96.16 GiB is allocated by PyTorch, and 32.00 GiB is reserved "
           "by PyTorch but unallocated.")
    rows = [cell(16, 32768, "oom", phase="backward passes", error="Tried to allocate 32.00 GiB"),
            cell(32, 32768, "oom", phase="timed forward passes", error=msg), cell(16, 16384), cell(32, 16384)]
    o = oom_causes(pd.DataFrame(rows))
    assert o["seq"] == 32768 and o["n_forward"] == "4.0" and o["forward_need"] == "128 GiB"
    assert [t["d"] for t in o["through"]] == [16] and [f["d"] for f in o["forward"]] == [32]
    f = o["forward"][0]
    assert f["ordinal"] == "fourth" and f["is_matrix"] and f["fragmented"] and o["within"]
    # every cell failing in the same phase leaves nothing to tell apart
    assert oom_causes(pd.DataFrame(rows[:1] + rows[2:])) is None
    assert oom_causes(pd.DataFrame(rows[2:])) is None
