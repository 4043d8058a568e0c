"""The names of benchmarking's cells, and the settings a name spells out: kept apart from the
experiment so that parsing a profile of a cell (nsys_step) imports no torch."""

from __future__ import annotations

import re

MODES = ("forward", "forward_backward", "train_step")


def cell_name(cell: dict) -> str:
    name = f"{cell['implementation']}-{cell['precision']}-{cell['size']}-ctx{cell['context']}-{cell['mode']}"
    if "warmup_study" in cell:
        name += f"-w{cell['warmup_steps']}"
    return name


def pair_cell_name(cell: dict) -> str:
    """The name of a cell that times every precision of one model (benchmarking_bf16_pairs): no precision in it."""
    return f"{cell['implementation']}-{cell['size']}-ctx{cell['context']}-{cell['mode']}"


CELL_NAME_FORM = "<implementation>-<precision>-<size>-ctx<N>-<mode>"
_CELL_NAME = re.compile(r"(?P<implementation>[^-]+)-(?P<precision>[^-]+)-(?P<size>.+)-ctx(?P<context>\d+)"
                        r"-(?P<mode>" + "|".join(MODES) + r")(?:-w(?P<warmup_steps>\d+))?")


def cell_from_name(name: str) -> dict | None:
    """The settings a name written by :func:`cell_name` spells out, or None when it is not one.

    Gives implementation, precision, size, context and mode (and warmup_steps for a warm-up
    study's ``-wN``); the model's shape and the batch are not part of the name.
    """
    m = _CELL_NAME.fullmatch(name)
    if not m:
        return None
    cell = {k: v for k, v in m.groupdict().items() if v is not None}
    cell["context"] = int(cell["context"])
    if "warmup_steps" in cell:
        cell["warmup_steps"] = int(cell["warmup_steps"])
    return cell
