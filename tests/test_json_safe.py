"""One JSON cleaner (``trainspect._json_safe.json_safe``) behind the verdict files, the report and the plugin."""

from __future__ import annotations

import enum
import json
import math

import numpy as np
import pandas as pd
import pytest

from trainspect._json_safe import json_safe
from trainspect.report.render import script_json
from trainspect.rules.verdict import Series, Status, Verdict, _json_safe


class _Colour(enum.Enum):
    RED = "red"


def test_non_finite_floats_become_null_or_the_verdict_files_strings() -> None:
    values = [math.nan, math.inf, -math.inf, np.float32("nan"), np.float64("-inf"), 1.5]
    assert json_safe(values) == [None, None, None, None, None, 1.5]
    assert json_safe(values, nonfinite="string") == ["NaN", "Infinity", "-Infinity", "NaN", "-Infinity", 1.5]
    assert _json_safe(values) == json_safe(values, nonfinite="string")


def test_numpy_enums_bytes_keys_and_unknown_objects() -> None:
    marker = object()
    got = json_safe(
        {
            1: np.int64(3),
            "b": np.bool_(True),
            "c": np.float32(0.5),
            "d": np.arange(3),
            "e": _Colour.RED,
            "f": Status.ISSUES_FOUND,
            "g": b"ok\xff",
            "h": (1, [2]),
            "i": marker,
        }
    )
    assert got == {
        "1": 3,
        "b": True,
        "c": 0.5,
        "d": [0, 1, 2],
        "e": "red",
        "f": "IssuesFound",
        "g": "ok\ufffd",
        "h": [1, [2]],
        "i": marker,
    }
    assert type(got["1"]) is int and type(got["b"]) is bool and type(got["c"]) is float
    with pytest.raises(TypeError):
        json.dumps(got, allow_nan=False)  # an unknown object is the caller's: json.dumps' default decides
    del got["i"]
    json.dumps(got, allow_nan=False)


def test_a_long_series_of_plain_numbers_is_copied_and_a_non_finite_one_is_cleaned() -> None:
    series = tuple(float(i) for i in range(100))
    out = json_safe(series)
    assert out == list(series) and isinstance(out, list)
    assert json_safe((*series, math.nan))[-1] is None
    assert json_safe([True] * 20) == [True] * 20 and json_safe([10**400] * 9) == [10**400] * 9


def test_verdicts_round_trip_their_non_finite_values() -> None:
    v = Verdict(
        rule="R",
        status=Status.ISSUES_FOUND,
        details={"x": np.float32("inf"), "n": np.int32(2)},
        series=(Series("s", (1.0, 2.0), (math.nan, 3.0)),),
    )
    d = v.to_dict()
    assert d["details"] == {"x": "Infinity", "n": 2} and d["series"][0]["y"] == ["NaN", 3.0]
    back = Verdict.from_dict(json.loads(json.dumps(d)))
    assert math.isnan(back.series[0].y[0]) and back.series[0].y[1] == 3.0


def test_the_report_charts_and_the_plugin_rows_use_it() -> None:
    pytest.importorskip("tensorboard")
    from trainspect.tb_plugin.profiler_view import records

    frame = pd.DataFrame({"a": [1.0, np.nan], "b": np.array([1, 2], dtype=np.int64), "c": [True, False]})
    rows = records(frame)
    assert rows == [{"a": 1.0, "b": 1, "c": True}, {"a": None, "b": 2, "c": False}]
    json.dumps(rows, allow_nan=False)
    chart = json_safe({"series": [{"data": [np.float32(1.0), np.float32("nan"), np.int64(4)]}]})
    assert json.loads(script_json(chart)) == {"series": [{"data": [1.0, None, 4]}]}  # no "nan" strings, no "4"
