"""Plain-data views of a run's profiler data for the Profiler tab (the analyses compute; this only shapes).

Every function takes a :class:`~trainspect.profiler.data.ProfilerData` and returns JSON-ready dicts and
lists: NaN becomes ``None``, times are epoch seconds, durations seconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from tensorboard import errors

from trainspect._json_safe import json_safe
from trainspect.profiler import analysis
from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.metrics import CATALOGUE, unit_symbol
from trainspect.rules.counts import RuleCounts, steps_text
from trainspect.rules.verdict import Status, Verdict
from trainspect.tb_plugin.downsample import bucket_means, rows_json

__all__ = ["overview", "heatmap_view", "timeseries_view", "utilization_rows", "records", "MAX_COLUMNS", "MAX_POINTS"]

MAX_COLUMNS = 1000
"""The most heatmap time buckets one response holds (72 rows x 1000 buckets is about 0.4 MB of JSON)."""

MAX_POINTS = 2000
"""The most points per time series in one response."""

_HOST_CPU = "cpu_utilization_percent"
_JOB_CPU = "process_cpu_utilization_percent"
JOB_ROW, HOST_ROW = "job CPU", "host CPU"
"""The heatmap's first rows: the training job's processes (% of all cores) and the host (mean of cores)."""


"""Older name of :func:`~trainspect._json_safe.json_safe` that ``rules_view`` still imports."""


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a DataFrame as JSON-ready dicts (NaN as ``None``)."""
    return [json_safe(r) for r in frame.to_dict("records")]


def _status(data: ProfilerData) -> str:
    if not data.system and not data.framework:
        return "no_profiler_data"
    return "ended" if data.job_ended else "running"


def overview(data: ProfilerData, verdicts: list[Verdict], problems: list[str]) -> dict[str, Any]:
    """Everything the Profiler tab shows except the heatmap and the time series.

    Returns:
        ``status`` (``no_profiler_data`` / ``running`` / ``ended``), ``nodes``, ``workers``, ``job``, ``steps``,
        ``histogram`` (per worker and mode), ``phases``, ``operators``, ``python`` (hotspots), ``utilization``
        (percentiles per node and metric), ``dataloader``, ``recommendations``
        (triggered profiler rules), ``rule_counts`` (:meth:`RuleCounts.to_dict` of every rule, the sentence of the
        report and the CLI in ``line``), ``step_counts`` and ``steps_text`` (timed steps per mode: ``"300 TRAIN,
        3 EVAL steps"``), ``problems`` (damaged data that was skipped).
    """
    nodes = [
        {
            "name": name,
            "samples": len(arr),
            "interval_ms": arr.interval_ms,
            "start": float(arr.timestamps[0]) if len(arr) else None,
            "end": float(arr.timestamps[-1]) if len(arr) else None,
            "cores": len(arr.cpu_cores),
            "gpus": len(arr.gpus),
        }
        for name, arr in sorted(data.system.items())
    ]
    workers = [{"name": w, "node": t.node, "steps": t.step_count} for w, t in sorted(data.framework.items())]
    hist = analysis.step_histogram(data, bins=30)
    histogram = [
        {
            "worker": w,
            "mode": m,
            "bins": [
                [float(a), float(b), int(c)] for a, b, c in zip(g["bin_start"], g["bin_end"], g["count"], strict=True)
            ],
        }
        for (w, m), g in hist.groupby(["worker", "mode"], sort=True)
    ]
    rec = [v for v in verdicts if v.kind == "profiler"]
    step_counts = analysis.timed_step_counts(data)
    return {
        "status": _status(data),
        "source": data.source,
        "nodes": nodes,
        "workers": workers,
        "job": json_safe(analysis.job_statistics(data)),
        "steps": records(analysis.step_statistics(data)),
        "histogram": histogram,
        "phases": json_safe(analysis.phase_ratios(data)),
        "operators": records(analysis.top_operators(data, n=20)),
        "python": records(analysis.python_hotspots(data, n=15)),
        "utilization": _utilization(data),
        "dataloader": records(analysis.dataloader_statistics(data)),
        "profiler_rules": len(rec),
        "rule_counts": RuleCounts.of(verdicts).to_dict(),
        "step_counts": step_counts,
        "steps_text": steps_text(step_counts),
        "recommendations": [_recommendation(v) for v in rec if v.status is Status.ISSUES_FOUND],
        "problems": list(problems),
    }


def utilization_rows(data: ProfilerData, node: str | None = None) -> list[dict[str, Any]]:
    """The utilisation-statistics rows of ``node`` (every node's when ``None``); see :func:`_utilization`."""
    return [r for r in _utilization(data) if node is None or r["node"] == node]


def _utilization(data: ProfilerData) -> list[dict[str, Any]]:
    """The percentile table of the report, per node, with each metric's ``label`` from the metric catalogue.

    Rows of metrics the catalogue keeps out of tables (per-core rows: the heatmap shows them) are left out;
    undeclared metrics are kept, labelled with their key.
    """
    if not data.system:
        return []
    stats = analysis.utilization_statistics(data)
    cols = ["node", "metric", "unit", "min", "max", "p50", "p95", "p99", "samples"]
    rows = []
    for row in records(stats[[c for c in cols if c in stats.columns]]):
        metric = CATALOGUE.describe(row["metric"])
        if metric.table:
            rows.append({**row, "label": metric.display_label})
    return rows


def _recommendation(v: Verdict) -> dict[str, Any]:
    return json_safe(
        {
            "rule": v.rule,
            "message": v.message,
            "recommendation": v.recommendation,
            "triggers": v.triggers,
            "last_trigger_time": v.last_trigger_time,
        }
    )


def _node(data: ProfilerData, node: str | None) -> SystemArrays:
    if not data.system:
        damaged = [p for p in data.problems if "/system/" in p or ".tsys" in p]
        raise errors.NotFoundError("this run has no system metrics" + (f" ({damaged[0]})" if damaged else ""))
    name = node or sorted(data.system)[0]
    if name not in data.system:
        raise errors.NotFoundError(f"no node named {name!r} in this run")
    return data.system[name]


def _range(arr: SystemArrays, start: float | None, end: float | None) -> tuple[float, float]:
    lo = float(arr.timestamps[0]) if start is None else start
    hi = float(arr.timestamps[-1]) if end is None else end
    if hi < lo:
        raise errors.InvalidArgumentError(f"end {hi} is before start {lo}")
    return lo, hi


def _step_starts(data: ProfilerData, node: str) -> np.ndarray:
    tabs = [
        t for t in data.framework.values() if t.step_count and (not t.node or t.node == node or len(data.system) == 1)
    ]
    return np.sort(np.concatenate([t.steps["start"] for t in tabs])) if tabs else np.zeros(0)


def heatmap_view(
    data: ProfilerData, node: str | None, start: float | None, end: float | None, columns: int
) -> dict[str, Any]:
    """CPU-core and GPU utilisation of one node in at most ``columns`` time buckets, with step boundaries.

    Returns:
        ``node``, ``rows`` (``job CPU`` and ``host CPU`` when the job's CPU was recorded, then ``cpu0``…
        ``gpu0``…), ``start``, ``end``, ``bucket_s``, ``columns``, ``values`` (per
        row, mean % per bucket rounded to an integer, or ``None``), ``step_boundaries`` (step starts in range, at
        most 4 per bucket), ``full_start`` / ``full_end`` (the node's whole range, for zooming out), ``samples``
        (rows in range).
    """
    arr = _node(data, node)
    lo, hi = _range(arr, start, end)
    keys = [f"cpu{i}_utilization_percent" for i in arr.cpu_cores] + [f"gpu{g}_utilization_percent" for g in arr.gpus]
    names = [k.split("_", 1)[0] for k in keys]
    cols = [arr.values[:, arr.keys.index(k)] for k in keys]
    job = arr.column(_JOB_CPU)
    if job is not None:  # the job's own CPU beside the host's: on a shared host they differ widely
        names, cols = [JOB_ROW, HOST_ROW, *names], [job, arr.cpu_total(), *cols]
    mat = np.stack(cols, axis=1) if cols else np.zeros((len(arr), 0))
    _t, width, means = bucket_means(arr.timestamps, mat, lo, hi, min(columns, MAX_COLUMNS))
    steps = _step_starts(data, arr.node)
    bounds = steps[(steps >= lo) & (steps <= hi)]
    limit = 4 * means.shape[0]
    if len(bounds) > limit:
        bounds = bounds[np.linspace(0, len(bounds) - 1, limit).round().astype(int)]
    return {
        "node": arr.node,
        "rows": names,
        "start": lo,
        "end": hi,
        "bucket_s": width,
        "columns": int(means.shape[0]),
        "values": rows_json(means, 0),
        "step_boundaries": np.round(bounds, 3).tolist(),
        "full_start": float(arr.timestamps[0]),
        "full_end": float(arr.timestamps[-1]),
        "samples": int(np.count_nonzero((arr.timestamps >= lo) & (arr.timestamps <= hi))),
    }


def _group_columns(arr: SystemArrays, group: str) -> list[tuple[str, np.ndarray]]:
    """The node's columns of the catalogue's metrics in ``group``, in declaration order."""
    out: list[tuple[str, np.ndarray]] = []
    for metric in CATALOGUE.metrics():
        if metric.group != group:
            continue
        if metric.key == _HOST_CPU:  # the mean of the cores where they were sampled (as the report draws it)
            if _JOB_CPU in arr.keys:  # the job's own CPU first: the host's may be other processes
                out.append((_JOB_CPU, arr.values[:, arr.keys.index(_JOB_CPU)]))
            if arr.cpu_cores or _HOST_CPU in arr.keys:
                out.append((_HOST_CPU, arr.cpu_total().astype(np.float32)))
            continue
        out += [(k, arr.values[:, arr.keys.index(k)]) for k in CATALOGUE.instances(metric, arr.keys)]
    return out


def timeseries_view(
    data: ProfilerData, node: str | None, start: float | None, end: float | None, points: int
) -> dict[str, Any]:
    """Memory, GPU memory, I/O and network (and CPU total / I/O wait) of one node, downsampled.

    Returns:
        ``node``, ``start``, ``end``, ``bucket_s``, ``times`` (bucket starts) and ``groups``: ``[{"id", "title",
        "unit", "series": [{"key", "label", "values"}]}]``, the metric catalogue's groups (``unit`` its symbol:
        ``%``, ``B/s``…); groups whose metrics were not recorded are left out.
    """
    arr = _node(data, node)
    lo, hi = _range(arr, start, end)
    groups = []
    times: list[float] = []
    width = 0.0
    for group in CATALOGUE.groups():
        cols = _group_columns(arr, group.id)
        if not cols:
            continue
        mat = np.stack([c for _k, c in cols], axis=1)
        t, width, means = bucket_means(arr.timestamps, mat, lo, hi, min(points, MAX_POINTS))
        times = np.round(t, 3).tolist()
        values = rows_json(means, 1 if group.unit == "percent" else 0)
        series = [
            {"key": k, "label": CATALOGUE.describe(k).display_short, "values": v}
            for (k, _c), v in zip(cols, values, strict=True)
        ]
        groups.append({"id": group.id, "title": group.title, "unit": unit_symbol(group.unit), "series": series})
    return {"node": arr.node, "start": lo, "end": hi, "bucket_s": width, "times": times, "groups": groups}
