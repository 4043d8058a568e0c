"""record_frame: the nested fields of records as columns, exact or with pandas' inferred types."""

import math

import pandas as pd

from cs336report.report.record_frame import record_frame

RECORDS = [
    {"data": {"stats_s": {"mean": 1, "raw": [1, 2]}, "model": {"d_model": 64}, "empty": {}}, "provenance": {"gpu": "H100"}},
    {"data": {"stats_s": {"mean": 2.5, "raw": []}, "model": None, "n": math.nan}, "config": {3: "three"}},
    {"data": {"stats_s": None}, "provenance": {"gpu": None}},
    {"other": 1},
]
COLUMNS = {"mean": "data.stats_s.mean", "raw": "data.stats_s.raw", "d_model": "data.model.d_model",
           "model": "data.model", "empty": "data.empty", "n": "data.n", "gpu": "provenance.gpu",
           "three": "config.3", "missing": "data.nowhere"}


def _by_json_normalize(records, columns, defaults):
    """The exact frame's definition: each record flattened alone by pandas.json_normalize."""
    tops = {path.split(".", 1)[0] for path in columns.values()}
    rows = [pd.json_normalize({t: r[t] for t in tops if t in r}).to_dict("records")[0] for r in records]
    frame = pd.DataFrame(rows, columns=list(columns.values()), dtype=object)
    frame.columns = list(columns)
    frame = frame.where(frame.notna(), None)
    for column, default in defaults.items():
        frame[column] = pd.Series([default if v is None else v for v in frame[column]], dtype=object)
    return frame


def test_the_exact_frame_holds_what_json_normalize_gives_each_record_alone():
    defaults = {"mean": -1, "missing": "none"}
    got = record_frame(RECORDS, COLUMNS, defaults, exact=True)
    want = _by_json_normalize(RECORDS, COLUMNS, defaults)
    assert list(got.columns) == list(COLUMNS) and (got.dtypes == object).all()
    assert got.to_dict("records") == want.to_dict("records")
    first, second = got.to_dict("records")[:2]
    assert first["mean"] == 1 and type(first["mean"]) is int  # not widened by the 2.5 below it
    assert first["raw"] == [1, 2] and first["d_model"] == 64 and first["gpu"] == "H100"
    assert first["model"] is None and first["empty"] is None  # a mapping is not a leaf
    assert second["n"] is None and second["three"] == "three" and second["missing"] == "none"
    assert got["mean"].tolist() == [1, 2.5, -1, -1]


def test_the_inferred_frame_widens_a_column_to_fit_every_record():
    got = record_frame(RECORDS, {"mean": "data.stats_s.mean"}, {"mean": math.nan})
    assert got["mean"].dtype == float and got["mean"].tolist()[:2] == [1.0, 2.5]
    assert math.isnan(got["mean"].tolist()[3])
