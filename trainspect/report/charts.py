"""ECharts options for the report, built from analysis results, with server-side downsampling.

Every series is reduced to at most ``max_points`` buckets (bucket means, plus the bucket maximum where peaks
matter), so an hour of 100 ms samples on 72 metrics stays a few hundred kilobytes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "elapsed_labels",
    "downsample",
    "wants_log",
    "line_chart",
    "pie_chart",
    "bar_chart",
    "heatmap_chart",
    "MAX_POINTS",
]

MAX_POINTS = 600
_PALETTE = ["#5470c6", "#91cc75", "#fac858", "#ee6666", "#73c0de", "#3ba272", "#fc8452", "#9a60b4", "#ea7ccc"]


def downsample(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, max_points: int = MAX_POINTS, how: str = "mean"
) -> tuple[np.ndarray, np.ndarray]:
    """Reduce (x, y) to at most ``max_points`` equal-count buckets (``how``: ``mean`` or ``max``), NaNs ignored.

    Example:
        >>> x, y = downsample(range(10), range(10), 5)
        >>> [float(v) for v in y]
        [0.5, 2.5, 4.5, 6.5, 8.5]
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    n = len(xa)
    if n <= max_points:
        return xa, ya
    edges = np.linspace(0, n, max_points + 1).astype(np.int64)
    starts = edges[:-1]
    ok = np.isfinite(ya)
    if how == "max":
        vals = np.maximum.reduceat(np.where(ok, ya, -np.inf), starts)
        vals[~np.isfinite(vals)] = np.nan
    else:
        sums = np.add.reduceat(np.where(ok, ya, 0.0), starts)
        counts = np.add.reduceat(ok.astype(np.int64), starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            vals = sums / counts
    return xa[starts], vals


def _r(v: float, digits: int = 4) -> float | None:
    """``v`` rounded to ``digits`` significant digits (``None`` when not finite): 1e-7 stays 1e-7."""
    return float(f"{v:.{digits}g}") if np.isfinite(v) else None


def _pairs(x: np.ndarray, y: np.ndarray, x_scale: float = 1.0, digits: int = 4) -> list[list[Any]]:
    return [[round(float(a) * x_scale, 3), _r(float(b), digits)] for a, b in zip(x, y, strict=True)]


def wants_log(values: Sequence[np.ndarray], threshold: float | None = None, span: float = 1e3) -> bool:
    """Whether a log axis reads better: every finite value positive and spanning more than ``span`` (x1000).

    Example:
        >>> wants_log([np.array([1e-7, 1e-3, 2.0])]), wants_log([np.array([0.0, 5.0])])
        (True, False)
    """
    finite = [v[np.isfinite(v)] for v in values]
    flat = np.concatenate(finite) if finite else np.zeros(0)
    if threshold is not None and np.isfinite(threshold):
        flat = np.append(flat, threshold)
    return bool(len(flat) and flat.min() > 0 and flat.max() / flat.min() > span)


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%H:%M:%S UTC")


def _spread(xs: np.ndarray, limit: int = 400) -> np.ndarray:
    return xs if len(xs) <= limit else xs[np.linspace(0, len(xs) - 1, limit).round().astype(int)]


def _nonfinite(name: str, x: np.ndarray, y: np.ndarray, scale: float, top: float, unit: str) -> list[dict[str, Any]]:
    """A marker series at the steps where ``y`` is NaN/Inf, placed at the chart's top, and a line at the first."""
    bad = x[~np.isfinite(y)]
    if not len(bad):
        return []
    first = float(bad[0])
    where = f"step {first:.0f}" if unit == "step" else "here"
    return [
        {
            "name": f"NaN/Inf in {name}",
            "type": "scatter",
            "symbol": "triangle",
            "symbolSize": 9,
            "z": 6,
            "itemStyle": {"color": "#7b1fa2"},
            "data": [[round(float(a) * scale, 3), top] for a in _spread(bad)],
            "markLine": {
                "symbol": "none",
                "silent": True,
                "lineStyle": {"color": "#7b1fa2", "type": "dashed"},
                "label": {"formatter": f"first NaN/Inf: {where}", "position": "insideEndTop"},
                "data": [{"xAxis": round(first * scale, 3)}],
            },
        }
    ]


def _triggers(x: np.ndarray, y: np.ndarray, mark_x: Sequence[float], scale: float) -> dict[str, Any]:
    """Trigger steps as red markers on the series (the watched value at that step, or the nearest one)."""
    ok = np.isfinite(y)
    xs, ys = x[ok], y[ok]
    marks = _spread(np.asarray(mark_x, dtype=np.float64))
    data = []
    if len(xs):
        order = np.argsort(xs)
        idx = np.clip(np.searchsorted(xs[order], marks), 0, len(xs) - 1)
        data = [[round(float(m) * scale, 3), _r(float(ys[order][i]))] for m, i in zip(marks, idx, strict=True)]
    return {
        "name": f"triggers ({len(mark_x)})",
        "type": "scatter",
        "symbol": "diamond",
        "symbolSize": 9,
        "z": 5,
        "itemStyle": {"color": "#d32f2f"},
        "data": data,
    }


def line_chart(
    series: Mapping[str, tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray]],
    title: str = "",
    x_type: str = "time",
    y_name: str = "",
    max_points: int = MAX_POINTS,
    mark_x: Sequence[float] = (),
    threshold: float | None = None,
    y_unit: str = "",
    x_name: str | None = None,
    log: bool | None = None,
) -> dict[str, Any]:
    """A line chart of named (x, y) series; ``x_type`` ``time`` takes epoch seconds, ``value`` takes steps.

    The y axis is logarithmic when ``log`` (default: when every value is positive and they span more than three
    orders of magnitude); ``y_unit`` (``%``, ``s``, ``B``, ``B/s``, ``count``) picks the tick and tooltip format;
    ``mark_x`` (trigger steps) become markers on the first series, ``threshold`` a labelled line, NaN/Inf values
    markers at the top with a line at the first one.
    """
    scale = 1.0
    arrays = {k: (np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)) for k, (x, y) in series.items()}
    t0 = None
    if x_type == "time":  # elapsed seconds: readable ticks for a 1-second run and for a 10-hour one alike
        firsts = [float(np.nanmin(x)) for x, _y in arrays.values() if len(x)]
        t0 = min(firsts) if firsts else 0.0
        arrays = {k: (x - t0, y) for k, (x, y) in arrays.items()}
        mark_x = [float(m) - t0 for m in mark_x]
    log = wants_log([y for _x, y in arrays.values()], threshold) if log is None else log
    finite = [y[np.isfinite(y)] for _x, y in arrays.values()]
    flat = np.concatenate(finite) if finite else np.zeros(0)
    top = _r(float(flat.max())) if len(flat) else (1.0 if log else 0.0)
    out: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    for i, (name, (x, y)) in enumerate(arrays.items()):
        xs, ys = downsample(x, y, max_points)
        item: dict[str, Any] = {
            "name": name,
            "type": "line",
            "showSymbol": len(xs) < 40,
            "symbolSize": 4,
            "data": _pairs(xs, ys, scale),
            "lineStyle": {"width": 1.5},
        }
        if i == 0 and threshold is not None and np.isfinite(threshold) and (threshold > 0 or not log):
            item["markLine"] = {
                "symbol": "none",
                "silent": True,
                "data": [{"yAxis": float(threshold)}],
                "label": {"formatter": f"threshold {threshold:g}", "position": "insideEndTop"},
                "lineStyle": {"color": "#d32f2f", "type": "dashed"},
            }
        if i == 0 and len(mark_x):
            extra.append(_triggers(x, y, mark_x, scale))
        extra += _nonfinite(name, x, y, scale, top if top is not None else 0.0, "s" if t0 is not None else "step")
        out.append(item)
    default_name = "step" if t0 is None else f"time since {_clock(t0)}"
    x_axis: dict[str, Any] = {
        "type": "value",
        "name": x_name if x_name is not None else default_name,
        "nameLocation": "middle",
        "nameGap": 26,
        "min": "dataMin",
        "max": "dataMax",
        "axisLabel": {"hideOverlap": True},
        "tsUnit": "step" if t0 is None else "elapsed",
    }
    if t0 is None:
        x_axis["minInterval"] = 1
    y_axis: dict[str, Any] = {
        "type": "log" if log else "value",
        "name": y_name + (" (log scale)" if log else ""),
        "scale": True,
        "tsUnit": y_unit,
        "axisLabel": {"hideOverlap": True},
    }
    if y_unit == "count":
        y_axis["minInterval"] = 1
    return {
        "title": {"text": title, "textStyle": {"fontSize": 13}},
        "tooltip": {"trigger": "axis", "confine": True},
        "legend": {"type": "scroll", "top": 22},
        "grid": {"top": 64, "left": 70, "right": 40, "bottom": 70},
        "dataZoom": [{"type": "inside"}, {"type": "slider", "height": 16, "bottom": 4}],
        "xAxis": x_axis,
        "yAxis": y_axis,
        "tsUnit": y_unit,
        "color": _PALETTE,
        "series": out + extra,
    }


def pie_chart(values: Mapping[str, float], title: str = "") -> dict[str, Any]:
    """A pie chart of named values (zero values dropped)."""
    data = [{"name": k, "value": round(float(v), 3)} for k, v in values.items() if v and np.isfinite(v)]
    return {
        "title": {"text": title, "textStyle": {"fontSize": 13}},
        "tooltip": {"trigger": "item", "formatter": "{b}: {c} ({d}%)"},
        "legend": {"bottom": 0, "type": "scroll"},
        "color": _PALETTE,
        "series": [
            {
                "type": "pie",
                "radius": ["28%", "52%"],
                "center": ["50%", "54%"],
                "data": data,
                "avoidLabelOverlap": True,
                "minShowLabelAngle": 4,
                "percentPrecision": 1,
                "label": {"formatter": "{b}: {d}%", "overflow": "break"},
                "labelLayout": {"hideOverlap": True},
            }
        ],
    }


def bar_chart(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    title: str = "",
    x_name: str = "",
    y_name: str = "",
    horizontal: bool = False,
    y_unit: str = "",
) -> dict[str, Any]:
    """A bar chart (one bar group per category, one colour per series); ``y_unit`` ``count`` gives integer ticks."""
    label: dict[str, Any] = {"hideOverlap": True}
    if horizontal:
        label.update(width=150, overflow="truncate")
    cat_axis = {
        "type": "category",
        "data": list(categories),
        "name": x_name,
        "axisLabel": label,
        "nameLocation": "middle",
        "nameGap": 150 if horizontal else 26,
    }
    val_axis: dict[str, Any] = {"type": "value", "name": y_name, "tsUnit": y_unit}
    if y_unit == "count":
        val_axis["minInterval"] = 1
    return {
        "title": {"text": title, "textStyle": {"fontSize": 13}},
        "tooltip": {"trigger": "axis"},
        "legend": {"top": 22, "type": "scroll"},
        "grid": {"top": 60, "left": 170 if horizontal else 60, "right": 30, "bottom": 50, "containLabel": False},
        "tsUnit": y_unit,
        "xAxis": val_axis if horizontal else cat_axis,
        "yAxis": cat_axis if horizontal else val_axis,
        "color": _PALETTE,
        "series": [
            {"name": k, "type": "bar", "data": [None if not np.isfinite(v) else round(float(v), 6) for v in vals]}
            for k, vals in series.items()
        ],
    }


def elapsed_labels(seconds: Sequence[float]) -> list[str]:
    """Distinct labels of elapsed times: as many decimals as the spacing needs, minutes past 10 minutes.

    Example:
        >>> elapsed_labels([0, 0.25, 0.5]), elapsed_labels([0, 30, 60]), elapsed_labels([0, 600, 1200])
        (['0.0 s', '0.2 s', '0.5 s'], ['0 s', '30 s', '60 s'], ['0:00', '10:00', '20:00'])
    """
    vals = [float(v) for v in seconds]
    if not vals:
        return []
    step = min((b - a for a, b in zip(vals, vals[1:], strict=False) if b > a), default=1.0)
    if vals[-1] >= 600 and step >= 1:
        return [f"{int(v + 1e-9) // 60}:{int(v + 1e-9) % 60:02d}" for v in vals]
    digits = 0 if step >= 1 else min(6, int(np.ceil(-np.log10(step) - 1e-9)))
    scale = 10**digits  # truncated, not rounded: values at least 10**-digits apart stay distinct
    return [f"{np.floor(v * scale + 1e-6) / scale:.{digits}f} s" for v in vals]


def heatmap_chart(hm: Mapping[str, Any], title: str = "", max_marks: int = 100) -> dict[str, Any]:
    """The utilisation heatmap (``trainspect.profiler.heatmap`` output): rows by time buckets, 0-100 %.

    Step boundaries are drawn as vertical lines when there are at most ``max_marks`` distinct buckets holding
    one; denser boundaries would cover the whole chart and are summarised in the title instead.
    """
    times = list(hm["times"])
    t0 = times[0] if times else 0.0
    labels = elapsed_labels([t - t0 for t in times])
    data = [[c, r, v] for r, row in enumerate(hm["values"]) for c, v in enumerate(row) if v is not None]
    width = float(hm.get("bucket_s") or 1.0)
    marks = sorted({min(int((b - t0) / width), len(times) - 1) for b in hm.get("step_boundaries", [])}) if times else []
    series: dict[str, Any] = {
        "type": "heatmap",
        "data": data,
        "progressive": 10**6,
        "progressiveThreshold": 10**7,
        "animation": False,
    }
    subtitle = ""
    if 0 < len(marks) <= max_marks:
        series["markLine"] = {
            "symbol": "none",
            "silent": True,
            "label": {"show": False},
            "lineStyle": {"color": "#ff6f00", "width": 1.5, "type": "solid", "opacity": 0.9},
            "data": [{"xAxis": labels[m]} for m in marks],
        }
        subtitle = "orange lines: step starts"
    elif marks:
        subtitle = f"step starts in {len(marks)} of {len(times)} time buckets (too dense to mark)"
    return {
        "title": {"text": title, "subtext": subtitle, "textStyle": {"fontSize": 13}},
        "tooltip": {"position": "top"},
        "grid": {"top": 60, "left": 60, "right": 90, "bottom": 50},
        "xAxis": {
            "type": "category",
            "data": labels,
            "name": "time since start",
            "nameLocation": "middle",
            "nameGap": 26,
            "axisLabel": {"hideOverlap": True},
        },
        "yAxis": {"type": "category", "data": list(hm["rows"]), "inverse": True},
        "visualMap": {
            "min": 0,
            "max": 100,
            "calculable": True,
            "orient": "vertical",
            "right": 10,
            "top": "middle",
            "itemHeight": 100,
            "formatter": "{value} %",
            "inRange": {"color": ["#f7fbff", "#6baed6", "#08306b"]},
        },
        "series": [series],
    }
