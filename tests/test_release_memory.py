"""release_memory's frozen collections, and their end with each cell."""

import gc

from cs336report.measure import timing as measure


def test_release_memory_freezes_what_survives_and_thaw_ends_it():
    measure.thaw()
    kept = [object() for _ in range(1000)]
    measure.release_memory("cpu")
    try:
        assert gc.get_freeze_count() >= len(kept)
    finally:
        measure.thaw()
    assert gc.get_freeze_count() == 0


def test_a_cell_ends_with_nothing_frozen(tmp_path):
    from cs336report.run.runner import run_cell

    measure.release_memory("cpu")  # as a cell's measurement would, before the end of the cell
    record = run_cell("communication_accounting", "xxl", {"device": "cpu", "setting": {"tokens": 2048}},
                      tmp_path / "r.json")
    assert record["status"] == "ok" and gc.get_freeze_count() == 0
