"""Reading a record's ``data``, or a nested object of it, as its dataclass: :func:`typed` for a
record's ``data`` (its experiment's shape from ``SHAPES``), :func:`read_as` for a nested object
(``data.link``, a record's ``config`` or ``provenance``), :func:`phase_stats` for one phase's
statistics; a field the object lacks is None."""

from __future__ import annotations

import dataclasses

from .registry import SHAPES
from .timing import Stats


def _fields(shape: type) -> dict[str, bool]:
    """Each field of ``shape`` and whether it is required."""
    return {f.name: f.default is dataclasses.MISSING for f in dataclasses.fields(shape)}


def read_as(shape: type, value: dict | None):
    """A nested object of a record (``data.link``) as its dataclass ``shape``; the fields it lacks,
    or all where it is absent, None."""
    value = value or {}
    return shape(**{name: value.get(name) for name in _fields(shape)})


def phase_stats(phase_stats_s: dict | None, phase: str) -> Stats:
    """The statistics of one phase of a ``phase_stats_s`` object (each None where it has none)."""
    return read_as(Stats, (phase_stats_s or {}).get(phase))


def typed(record: dict, shape: type | None = None):
    """``record``'s data as its experiment's dataclass, or as ``shape`` (one that extends it, for a
    reader of records of several experiments); the optional fields it lacks are None (and of a
    record that failed, every field it lacks)."""
    shape = shape or SHAPES[record["experiment"]]
    data = record.get("data") or {}
    return shape(**{name: data.get(name) for name in _fields(shape)})
