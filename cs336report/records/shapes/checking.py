"""Checking a record's ``data`` against its experiment's declared shape: :class:`ShapeError` and
:func:`check`, which records.store calls on every record it saves and loads, with the JSON types a
field's annotation admits (``_JSON_TYPES``)."""

from __future__ import annotations

import types
import typing
from typing import Any

from .reading import _fields
from .registry import SHAPES


class ShapeError(ValueError):
    """A record's ``data`` that does not have its experiment's declared shape; ``field`` names the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"data.{field}: {message}" if field else message)
        self.field = field


# a JSON array is a list; a tuple is one before it is written (dataclasses.asdict keeps tuples)
_JSON_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "list": (list, tuple),
               "dict": (dict,), "None": (type(None),), "Any": (object,)}


def _allowed(annotation) -> tuple[tuple[type, ...], tuple[str, ...]]:
    """The Python types a JSON value of a field annotated ``annotation`` may have, and their names."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    names = tuple("None" if a is type(None) else getattr(a, "__name__", str(a)) for a in args)
    return tuple(t for name in names for t in _JSON_TYPES[name]), names


def _hints(shape: type) -> dict[str, Any]:
    return typing.get_type_hints(shape)


def check(experiment: str, status: str, data) -> None:
    """Raise :class:`ShapeError` where ``data`` does not have ``experiment``'s declared shape."""
    shape = SHAPES.get(experiment)
    if shape is None:
        raise ShapeError("", f"no declared shape for experiment {experiment!r} (cs336report/records/shapes/)")
    if not isinstance(data, dict):
        raise ShapeError("", f"data is {type(data).__name__}, expected an object")
    fields, hints = _fields(shape), _hints(shape)
    if status == "ok":
        missing = [name for name, required in fields.items() if required and name not in data]
        if missing:
            raise ShapeError(missing[0], f"missing (required in a {shape.__name__} record)")
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ShapeError(unknown[0], f"not a field of {shape.__name__} (declare it in cs336report/records/shapes/)")
    for name, value in data.items():
        if name not in hints:
            continue
        allowed, names = _allowed(hints[name])
        is_bool = isinstance(value, bool)
        if not isinstance(value, allowed) or (is_bool and bool not in allowed and object not in allowed):
            raise ShapeError(name, f"is {type(value).__name__}, expected {' | '.join(names)}")
