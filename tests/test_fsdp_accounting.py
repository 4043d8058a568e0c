"""fsdp_accounting (a): bytes per rank against numbers worked by hand for the 2026 handout's xl."""

from cs336report import editions
from cs336report.accounting.fsdp import accounting, norm_params
from cs336report.names.spec import ModelSpec

# 2026 xl: d 2560, d_ff 10240, 32 layers, vocab 10000. By hand: a block has 4 d^2 + 3 d d_ff + 2 d =
# 104,862,720 parameters; 32 of them, the embedding and LM head (2 x 25,600,000) and the final norm
# (2,560) make 3,406,809,600, of which (2 x 32 + 1) x 2,560 = 166,400 are RMSNorm gains.
P, NORMS = 3_406_809_600, 166_400


def _xl() -> ModelSpec:
    return ModelSpec(**{k: v for k, v in editions.get(2026).model("xl").as_config().items()})


def test_the_xl_rows_are_the_hand_worked_bytes():
    out = accounting(_xl(), 2)
    assert out["params"] == P and norm_params(_xl()) == NORMS
    rows = {row["scheme"]: row for row in out["rows"]}
    assert rows["no sharding"]["total_bytes"] == 16 * P == 54_508_953_600
    assert rows["optimizer state sharding"]["total_bytes"] == 12 * P == 40_881_715_200
    # FSDP: half of the sharded parameters plus every norm gain, times 4 bytes x (param, grad, m, v)
    own = (P - NORMS) // 2 + NORMS
    assert own == 1_703_488_000
    assert rows["FSDP"]["total_bytes"] == 16 * own == 27_255_808_000
    assert out["saving"]["bytes"] == 40_881_715_200 - 27_255_808_000


def test_more_ranks_shard_more_and_norms_stay_whole():
    two, eight = accounting(_xl(), 2), accounting(_xl(), 8)
    fsdp2, fsdp8 = two["rows"][2], eight["rows"][2]
    assert fsdp8["params_bytes"] < fsdp2["params_bytes"]
    assert fsdp8["params_bytes"] == 4 * ((P - NORMS) / 8 + NORMS)
    assert two["rows"][1]["params_bytes"] == eight["rows"][1]["params_bytes"] == 4 * P  # ZeRO-1 keeps them
