"""cs336report's own suite of the handout's test cases, run through the handout's adapters.

The cases are those the course grades (FlashAttention-2 forward and backward in PyTorch and
Triton; the two overlapping DDP wrappers; the sharded optimizer; the 2026 edition's FSDP), written
here from the handout's description, each compared against a float32 reference. Every test records the
largest absolute deviation it saw as the JUnit property ``max_abs_error`` (before asserting, so
a failing test records it too). The handout_tests experiment runs them with pytest::

    TRITON_INTERPRET=1 python -m pytest cs336report/handout_suite/test_attention.py --junitxml=out.xml

The adapters are ours (:mod:`cs336report.student.adapters`) unless ``CS336REPORT_CHECKOUT`` names an
assignment checkout, whose ``tests/adapters.py`` is then used (a checkout can run this suite
as its own tests by re-exporting these modules). Test names and parameters follow the
handout's, so a result reads the same whichever suite produced it.
"""

from __future__ import annotations

import os

import torch

CHECKOUT_ENV = "CS336REPORT_CHECKOUT"
TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}  # the handout's tolerance for float32


def adapters():
    """The adapters module under test: the checkout's tests/adapters.py, or ours."""
    checkout = os.environ.get(CHECKOUT_ENV)
    if checkout:
        from ..student.resolve import load_adapters

        return load_adapters(checkout)
    from ..student import adapters as builtin

    return builtin


def max_abs_error(pairs) -> float:
    """The largest |actual - expected| over (actual, expected) tensor pairs, in float32."""
    return max(float((a.detach().float() - e.detach().float()).abs().max()) for a, e in pairs)


def record_and_compare(record_property, pairs) -> None:
    """Record ``max_abs_error`` over ``pairs``, then assert each pair is close (the handout's tolerance)."""
    record_property("max_abs_error", max_abs_error(pairs))
    for actual, expected in pairs:
        torch.testing.assert_close(actual.detach().float(), expected.detach().float(), **TOLERANCE)
