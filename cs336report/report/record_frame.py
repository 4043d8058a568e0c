"""Records as a frame: the nested fields a section reads, one column each, named as
pandas.json_normalize names them (which flattens the records where the types are inferred).

A column is named by its dotted path in the record (``data.stats_s.mean``,
``config.model.d_model``); a record that lacks the field, or has null on the way to it, has None
there, or the column's default. The columns' types are inferred from the values as
``pandas.DataFrame`` infers them from rows of dicts (an int column with a gap holds floats and NaN);
with ``exact=True`` every column holds the record's values as they are (an int stays an int, an
absent field, or a NaN, is None).

    df = record_frame(records, {"mean_s": "data.stats_s.mean", "gpu": "provenance.gpu"},
                      defaults={"mean_s": math.nan})
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd


def record_frame(records: list[dict], columns: Mapping[str, str], defaults: Mapping | None = None,
                 exact: bool = False) -> pd.DataFrame:
    """One row per record (in order), one column per entry of ``columns`` (its name -> the dotted
    path of the field it holds); where a record lacks the field, the column's entry in ``defaults``,
    else None. ``exact``: object columns holding the records' own values (see the module's note)."""
    tops = {path.split(".", 1)[0] for path in columns.values()}
    # only the parts of the records that are read are flattened (a record's data can be large)
    parts = [{top: r[top] for top in tops if top in r} for r in records]
    if exact:
        return _exact_frame(parts, columns, defaults or {})
    flat = pd.json_normalize(parts)
    frame = flat.reindex(columns=list(columns.values())).astype(object)
    frame.columns = list(columns)
    frame = frame.where(frame.notna(), None)
    for column, default in (defaults or {}).items():
        frame[column] = [default if value is None else value for value in frame[column]]
    return pd.DataFrame(frame.to_dict("records"), columns=list(columns))


def _flat(part: Mapping, prefix: str = "", out: dict | None = None) -> dict:
    """``part``'s leaves by dotted path, as pandas.json_normalize names them: nested mappings are
    walked (an empty one leaves nothing), every other value, lists included, is a leaf."""
    out = {} if out is None else out
    for key, value in part.items():
        if isinstance(value, dict):
            _flat(value, f"{prefix}{key}.", out)
        else:
            out[f"{prefix}{key}"] = value
    return out


def _exact_frame(parts: list[dict], columns: Mapping[str, str], defaults: Mapping) -> pd.DataFrame:
    """record_frame's ``exact`` frame: each record flattened alone, so that no column's type is
    widened to fit another record's values."""
    paths = list(columns.values())
    rows = []
    for part in parts:
        flat = _flat(part)
        rows.append([flat.get(path) for path in paths])
    frame = pd.DataFrame(rows, columns=paths, dtype=object)
    frame.columns = list(columns)
    frame = frame.where(frame.notna(), None)
    for column, default in defaults.items():
        frame[column] = pd.Series([default if value is None else value for value in frame[column]], dtype=object)
    return frame
