"""The time limit around a student's import and cells (cs336report/machine/time_limit.py)."""

from __future__ import annotations

import signal
import time

import pytest

from cs336report.machine.time_limit import TimeLimitExceeded, time_limit


def test_a_block_past_its_limit_is_stopped_naming_it():
    started = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match="the nap ran past its time limit of 0.2 s"):
        with time_limit(0.2, "the nap"):
            time.sleep(5)
    assert time.monotonic() - started < 2
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0  # no timer left behind


def test_an_inner_limit_gives_back_what_is_left_of_the_outer_one():
    with pytest.raises(TimeLimitExceeded, match="outer"):
        with time_limit(0.6, "outer"):
            with time_limit(5, "inner, longer: the outer one stays"):
                pass
            with time_limit(0.1, "inner, shorter"):
                pass
            assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.6
            time.sleep(5)


def test_no_limit_runs_the_block_as_it_is():
    with time_limit(None, "anything"):
        time.sleep(0.01)
