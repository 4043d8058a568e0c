"""A Transformer cell that cannot fit its card, told before it runs, and the analytic bytes that every
out-of-memory record of such a cell carries (:mod:`cs336report.accounting.fits`).

:func:`check` runs where the model is built (:func:`cs336report.lm.build.build_model`): a cell whose
step must hold more than the card's memory at one moment raises :class:`PredictedOutOfMemory`, which
the runner records as ``oom`` with ``data.memory_needed`` (``predicted``: True, not measured). A cell
that runs and runs out of memory gets the same ``data.memory_needed`` (``predicted``: False) from
:func:`memory_needed`.
"""

from __future__ import annotations

import torch

from ..accounting import fits

GiB = 2**30


class PredictedOutOfMemory(RuntimeError):
    """The step cannot fit the card by the accounting: recorded as out of memory without running."""

    result_status = "oom"

    def __init__(self, cell: dict, capacity: int):
        self.partial_data = {"memory_needed": fits.needed(cell, capacity, predicted=True)}
        certain = self.partial_data["memory_needed"]["certain_bytes"]
        super().__init__(f"out of memory (predicted, not run): the step must hold {certain / GiB:.1f} GiB at once "
                         f"({self.partial_data['memory_needed']['certain_moment']}) and the card has "
                         f"{capacity / GiB:.1f} GiB")


def capacity(device: str) -> int:
    """The card's memory in bytes (torch's total_memory)."""
    return torch.cuda.get_device_properties(torch.device(device)).total_memory


def check(cell: dict) -> None:
    """Raise :class:`PredictedOutOfMemory` where ``cell`` cannot fit its CUDA device."""
    if not fits.applies(cell) or not torch.cuda.is_available():
        return
    total = capacity(cell["device"])
    if fits.certain_not_to_fit(cell, total):
        raise PredictedOutOfMemory(cell, total)


def memory_needed(cell: dict) -> dict | None:
    """The analytic bytes of a cell that ran out of memory (None for a cell they do not describe)."""
    if not fits.applies(cell):
        return None
    return fits.needed(cell, capacity(cell["device"]) if torch.cuda.is_available() else None)
