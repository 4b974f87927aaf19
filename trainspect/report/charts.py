"""ECharts options for the report, built from analysis results, with server-side downsampling.

Every series is reduced to at most ``max_points`` buckets (bucket means, plus the bucket maximum where peaks
matter), so an hour of 100 ms samples on 72 metrics stays a few hundred kilobytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["downsample", "line_chart", "pie_chart", "bar_chart", "heatmap_chart", "MAX_POINTS"]

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


def _pairs(x: np.ndarray, y: np.ndarray, x_scale: float = 1.0, digits: int = 3) -> list[list[Any]]:
    return [
        [round(float(a) * x_scale, 3), None if not np.isfinite(b) else round(float(b), digits)]
        for a, b in zip(x, y, strict=True)
    ]


def line_chart(
    series: Mapping[str, tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray]],
    title: str = "",
    x_type: str = "time",
    y_name: str = "",
    max_points: int = MAX_POINTS,
    mark_x: Sequence[float] = (),
    threshold: float | None = None,
) -> dict[str, Any]:
    """A line chart of named (x, y) series; ``x_type`` ``time`` takes epoch seconds, ``value`` takes numbers."""
    scale = 1000.0 if x_type == "time" else 1.0
    out = []
    for i, (name, (x, y)) in enumerate(series.items()):
        xs, ys = downsample(x, y, max_points)
        item: dict[str, Any] = {"name": name, "type": "line", "showSymbol": False, "sampling": "lttb",
                                "data": _pairs(xs, ys, scale), "lineStyle": {"width": 1}}  # fmt: skip
        if i == 0 and (mark_x or threshold is not None):
            lines: list[dict[str, Any]] = [{"xAxis": round(float(t) * scale, 3)} for t in list(mark_x)[:200]]
            if threshold is not None:
                lines.append({"yAxis": float(threshold), "name": "threshold"})
            item["markLine"] = {"symbol": "none", "silent": True, "data": lines, "label": {"show": False},
                                "lineStyle": {"color": "#ee6666"}}  # fmt: skip
        out.append(item)
    return {
        "title": {"text": title, "textStyle": {"fontSize": 13}},
        "tooltip": {"trigger": "axis"},
        "legend": {"type": "scroll", "top": 22},
        "grid": {"top": 60, "left": 60, "right": 30, "bottom": 60},
        "dataZoom": [{"type": "inside"}, {"type": "slider", "height": 18}],
        "xAxis": {"type": x_type},
        "yAxis": {"type": "value", "name": y_name},
        "color": _PALETTE,
        "series": out,
    }


def pie_chart(values: Mapping[str, float], title: str = "") -> dict[str, Any]:
    """A pie chart of named values (zero values dropped)."""
    data = [{"name": k, "value": round(float(v), 3)} for k, v in values.items() if v and np.isfinite(v)]
    return {
        "title": {"text": title, "textStyle": {"fontSize": 13}},
        "tooltip": {"trigger": "item", "formatter": "{b}: {c} ({d}%)"},
        "legend": {"bottom": 0, "type": "scroll"},
        "color": _PALETTE,
        "series": [{"type": "pie", "radius": ["35%", "65%"], "data": data, "label": {"formatter": "{b}: {d}%"}}],
    }


def bar_chart(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    title: str = "",
    x_name: str = "",
    y_name: str = "",
    horizontal: bool = False,
) -> dict[str, Any]:
    """A bar chart (one bar group per category, one colour per series)."""
    cat_axis = {"type": "category", "data": list(categories), "name": x_name, "axisLabel": {"hideOverlap": True}}
    val_axis = {"type": "value", "name": y_name}
    return {
        "title": {"text": title, "textStyle": {"fontSize": 13}},
        "tooltip": {"trigger": "axis"},
        "legend": {"top": 22, "type": "scroll"},
        "grid": {"top": 60, "left": 160 if horizontal else 60, "right": 30, "bottom": 50, "containLabel": False},
        "xAxis": val_axis if horizontal else cat_axis,
        "yAxis": cat_axis if horizontal else val_axis,
        "color": _PALETTE,
        "series": [
            {"name": k, "type": "bar", "data": [None if not np.isfinite(v) else round(float(v), 6) for v in vals]}
            for k, vals in series.items()
        ],
    }


def heatmap_chart(hm: Mapping[str, Any], title: str = "", max_marks: int = 100) -> dict[str, Any]:
    """The utilisation heatmap (``trainspect.profiler.heatmap`` output): rows by time buckets, 0-100 %.

    Step boundaries are drawn as vertical lines when there are at most ``max_marks`` distinct buckets holding
    one; denser boundaries would cover the whole chart and are summarised in the title instead.
    """
    times = list(hm["times"])
    t0 = times[0] if times else 0.0
    labels = [f"{t - t0:.0f}s" for t in times]
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
        series["markLine"] = {"symbol": "none", "silent": True, "label": {"show": False},
                              "lineStyle": {"color": "#222", "width": 1, "type": "dashed"},
                              "data": [{"xAxis": labels[m]} for m in marks]}  # fmt: skip
        subtitle = "dashed lines: step starts"
    elif marks:
        subtitle = f"step starts in {len(marks)} of {len(times)} time buckets (too dense to mark)"
    return {
        "title": {"text": title, "subtext": subtitle, "textStyle": {"fontSize": 13}},
        "tooltip": {"position": "top"},
        "grid": {"top": 60, "left": 60, "right": 30, "bottom": 70},
        "xAxis": {"type": "category", "data": labels, "name": "time since start"},
        "yAxis": {"type": "category", "data": list(hm["rows"]), "inverse": True},
        "visualMap": {"min": 0, "max": 100, "calculable": True, "orient": "horizontal", "left": "center",
                      "bottom": 0, "itemHeight": 120, "inRange": {"color": ["#f7fbff", "#6baed6", "#08306b"]}},
        "series": [series],
    }  # fmt: skip
