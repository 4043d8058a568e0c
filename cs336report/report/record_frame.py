"""Records as a frame: the nested fields a section reads, one column each, by pandas.json_normalize.

A column is named by its dotted path in the record (``data.stats_s.mean``,
``config.model.d_model``); a record that lacks the field, or has null on the way to it, has None
there, or the column's default. The columns' types are inferred from the values as
``pandas.DataFrame`` infers them from rows of dicts.

    df = record_frame(records, {"mean_s": "data.stats_s.mean", "gpu": "provenance.gpu"},
                      defaults={"mean_s": math.nan})
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd


def record_frame(records: list[dict], columns: Mapping[str, str], defaults: Mapping | None = None) -> pd.DataFrame:
    """One row per record (in order), one column per entry of ``columns`` (its name -> the dotted
    path of the field it holds); where a record lacks the field, the column's entry in ``defaults``,
    else None."""
    tops = {path.split(".", 1)[0] for path in columns.values()}
    # only the parts of the records that are read are flattened (a record's data can be large)
    flat = pd.json_normalize([{top: r[top] for top in tops if top in r} for r in records])
    frame = flat.reindex(columns=list(columns.values())).astype(object)
    frame.columns = list(columns)
    frame = frame.where(frame.notna(), None)
    for column, default in (defaults or {}).items():
        frame[column] = [default if value is None else value for value in frame[column]]
    return pd.DataFrame(frame.to_dict("records"), columns=list(columns))
