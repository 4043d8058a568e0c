"""Progress lines: each phase of a cell says so in the job's log."""

import re

from cs336report.measure.timing import time_steps


def test_timing_steps_prints_a_line_per_phase(capsys):
    calls = []
    time_steps(lambda: calls.append(1), warmup=2, measured=3, device="cpu")
    lines = capsys.readouterr().err.splitlines()
    assert len(calls) == 5
    assert [re.sub(r"^\[cs336report \d\d:\d\d:\d\d\] ", "", line) for line in lines] == [
        "warm-up: 2 steps", "timing 3 steps"]


def test_no_warm_up_line_without_warm_up(capsys):
    time_steps(lambda: None, warmup=0, measured=1, device="cpu")
    assert capsys.readouterr().err.endswith("] timing 1 step\n")
