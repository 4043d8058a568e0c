"""Phase analysis of profiles annotated the handout's way (cs336report.parsers.kernel_ranges)."""

from pathlib import Path

import pytest

from cs336report.parsers import kernel_ranges, nsys
from cs336report.parsers.kernel_records import kernel_rows

FIXTURES = Path(__file__).parent / "fixtures" / "nsys"


def test_one_warmup_range_around_all_warmup_steps():
    # 5 warm-up steps inside ONE 'warmup' range, then 10 measured steps; one 100 µs kernel a forward
    frames = nsys.parse_exports(FIXTURES / "warmup_one_range" / "stats")
    data = kernel_ranges.summarise(frames, cell={"mode": "forward"})
    assert data["measured_steps"] == 10 and data["warmup_in_export"] == 5
    assert data["checks"]["warmup_steps"] == {"warmup_ranges": 1, "steps": 5, "counted_from": "forward"}
    assert data["phases"]["forward"]["kernel_ns_per_step"] == pytest.approx(100_000)
    assert data["phases"]["forward"]["kernel_instances_per_step"] == pytest.approx(1)
    assert data["phases"]["forward"]["wall_ns_per_step"] == pytest.approx(500_000)
    assert all(v["ok"] for v in data["checks"]["range_instances"].values())
    assert data["checks"]["per_step"]["ok"]


def test_failed_range_count_flags_the_per_step_figures():
    frames = nsys.parse_exports(FIXTURES / "handout_ranges" / "stats")
    nvtx = frames["nvtx_sum"].copy()
    nvtx.loc[nvtx["range"] == "computing softmax", "instances"] = 5.0  # one softmax range lost
    frames["nvtx_sum"] = nvtx
    data = kernel_ranges.summarise(frames, cell={"mode": "forward", "model": {"num_layers": 2}})
    check = data["checks"]["per_step"]
    assert check["ok"] is False and "softmax 5/6" in check["message"]
    assert check["message"] in data["warnings"]


def test_handout_attention_range_names_are_recognised():
    frames = nsys.parse_exports(FIXTURES / "handout_ranges" / "stats")
    data = kernel_ranges.summarise(frames, cell={"mode": "forward", "model": {"num_layers": 2}})
    by_range = {}
    for k in kernel_rows(data["kernels"]):
        by_range.setdefault(k["range"], set()).add(k["name"])
    assert by_range["attention_scores"] == {"ampere_sgemm_64x64_tn"}
    assert by_range["softmax"] == {"softmax_warp_forward"}
    assert by_range["attention_value"] == {"ampere_sgemm_64x64_nn"}
    assert data["phases"]["softmax"]["kernel_ns_per_step"] == pytest.approx(60_000)
    assert data["checks"]["range_instances"]["softmax"] == {"observed": 6, "expected": 6, "ok": True}
    assert "computing softmax" in data["range_names"]


def test_unknown_attention_names_are_listed():
    frames = nsys.parse_exports(FIXTURES / "handout_ranges" / "stats")
    for key in ("nvtx_sum", "nvtx_kern_sum"):
        frame = frames[key].copy()
        frame["range"] = frame["range"].str.replace("computing ", "my ").str.replace("scaled dot", "my")
        frames[key] = frame
    data = kernel_ranges.summarise(frames, cell={"mode": "forward", "model": {"num_layers": 2}})
    note = [w for w in data["warnings"] if "no attention ranges" in w]
    assert note and "my softmax" in note[0] and "my attention scores" in note[0]


def test_sanity_table_says_when_the_per_step_check_failed():
    from cs336report.report.sections.nsys_profile import cell_frame, checks_table

    frames = nsys.parse_exports(FIXTURES / "handout_ranges" / "stats")
    nvtx = frames["nvtx_sum"].copy()
    nvtx.loc[nvtx["range"] == "computing softmax", "instances"] = 5.0
    frames["nvtx_sum"] = nvtx
    cell = {"mode": "forward", "size": "small", "context": 128, "model": {"num_layers": 2}}
    record = {"experiment": "nsys_profile", "cell": "c", "status": "ok", "config": cell, "_path": "c.json",
              "data": kernel_ranges.summarise(frames, cell=cell)}
    table, _ = checks_table(cell_frame([record], []))
    assert any("softmax 5/6" in c.text for c in table.rows[0])
