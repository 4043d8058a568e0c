"""A time limit on a block of code that runs someone else's code (a student's import or cell).

``with time_limit(60, "importing tests/adapters.py"):`` raises :class:`TimeLimitExceeded` (a
``TimeoutError``) naming what ran, once the block has run that many seconds. It uses the process's
real-time interval timer (``SIGALRM``), so it holds in the main thread of a POSIX process; elsewhere
(another thread, no ``setitimer``) the block runs without a limit. Python code is interrupted
between bytecodes: a call blocked inside C code ends first. A limit inside another one keeps the
shorter of the two.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager


class TimeLimitExceeded(TimeoutError):
    """A block ran past its :func:`time_limit`."""


@contextmanager
def time_limit(seconds: float | None, what: str):
    """Run the block for at most ``seconds`` (None or 0: no limit); past it, :class:`TimeLimitExceeded`
    whose message names ``what`` and the limit."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer_left = signal.getitimer(signal.ITIMER_REAL)[0]
    if outer_left and outer_left <= seconds:  # an enclosing limit comes first: it stays in force
        yield
        return

    def expire(signum, frame):
        raise TimeLimitExceeded(f"{what} ran past its time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:  # the enclosing limit goes on with what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 1e-3))
