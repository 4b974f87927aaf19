"""Profiler data as pandas DataFrames: system samples (long or wide) and the framework's steps, spans and phases.

The readers' ``dataframe`` methods (:meth:`SystemMetricsReader.dataframe`, :meth:`FrameworkMetricsReader.dataframe`)
and :func:`trainspect.profiler.window` build their frames here. Times are epoch seconds (float64); windows are
half-open, ``start <= t < end``, so adjacent windows never count a sample twice.

Example:
    >>> import numpy as np
    >>> from trainspect.profiler.arrays import SystemArrays
    >>> a = SystemArrays("algo-1", np.array([0.0, 1.0]), ("cpu0_utilization_percent",), np.array([[5.0], [7.0]]))
    >>> system_frame({"algo-1": a})[["timestamp", "node", "metric", "value"]].to_dict("list")
    {'timestamp': [0.0, 1.0], 'node': ['algo-1', 'algo-1'], 'metric': ['cpu0_utilization_percent', \
'cpu0_utilization_percent'], 'value': [5.0, 7.0]}
    >>> system_frame({"algo-1": a}, wide=True).columns.tolist()
    ['timestamp', 'node', 'cpu0_utilization_percent']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from trainspect.profiler.arrays import SPAN_NAMES, FrameworkTables, SystemArrays
from trainspect.profiler.events import smdebug_names
from trainspect.store.frame_tools import choose, concat_frames, empty_frame

__all__ = [
    "SYSTEM_COLUMNS",
    "STEP_COLUMNS",
    "SPAN_COLUMNS",
    "PHASE_COLUMNS",
    "system_frame",
    "steps_frame",
    "spans_frame",
    "phases_frame",
    "step_metrics_frame",
    "overlapping",
]

SYSTEM_COLUMNS = {
    "timestamp": "float64",
    "node": "category",
    "metric": "category",
    "type": "category",
    "name": "category",
    "dimension": "category",
    "value": "float64",
}
"""Long system frame: ``metric`` is trainspect's key (``gpu0_utilization_percent``); ``type``, ``name`` and
``dimension`` are smdebug's names of it (``gpu``, ``gpu0``, ``GPUUtilization``). Text columns are categories."""
_SPAN_KINDS = ("forward", "backward", "optimizer", "backward_sync", "dataloader")
STEP_COLUMNS = {
    "worker": "category",
    "node": "category",
    "mode": "category",
    "mode_step": "int64",
    "global_step": "int64",
    "start": "float64",
    "end": "float64",
    "duration": "float64",
    **{k: "float64" for k in _SPAN_KINDS},
}
"""Steps frame: one row per timed step; ``forward`` … ``dataloader`` are the seconds of the step's spans of each
kind (``dataloader``: the data-loader waits that fed it), 0 where none was recorded."""
SPAN_COLUMNS = {
    "worker": "category",
    "node": "category",
    "kind": "category",
    "start": "float64",
    "end": "float64",
    "duration": "float64",
    "global_step": "int64",
    "workers": "int64",
    "pid": "int64",
}
"""Spans frame: ``kind`` forward, backward, optimizer, dataloader (a wait for the next batch) or backward_sync;
``global_step`` -1 when unknown; ``workers`` the data loader's worker processes (-1 unknown)."""
PHASE_COLUMNS = {
    "worker": "category",
    "node": "category",
    "phase": "category",
    "start": "float64",
    "end": "float64",
    "duration": "float64",
}
"""Phases frame: ``initialization``, ``training_loop`` and ``finalization`` of each worker, when known."""


def system_frame(
    nodes: dict[str, SystemArrays], metrics: str | Sequence[str] | None = None, wide: bool = False
) -> pd.DataFrame:
    """Samples as a long frame (:data:`SYSTEM_COLUMNS`, one row per sampled value, NaN gaps left out) or wide.

    Args:
        nodes: ``{node: samples}`` (``SystemMetricsReader.read_arrays()`` or a window of them).
        metrics: metric keys or ``fnmatch`` patterns (``"gpu*_utilization_percent"``); default all.
        wide: one row per (timestamp, node), one float64 column per metric (NaN where not sampled).

    Raises:
        NotRecorded: a metric none of the nodes recorded (the message lists those they did).
    """
    recorded = sorted({k for a in nodes.values() for k in a.keys})
    keys = choose(metrics, recorded, "metric")
    parts = [_node_frame(a, [k for k in keys if k in a.keys], wide) for a in nodes.values()]
    parts = [p for p in parts if len(p)]
    if wide:
        columns = {"timestamp": "float64", "node": "category", **{k: "float64" for k in keys}}
        return concat_frames([p.reindex(columns=list(columns)) for p in parts], columns)
    return concat_frames(parts, SYSTEM_COLUMNS)


def _node_frame(arrays: SystemArrays, keys: list[str], wide: bool) -> pd.DataFrame:
    index = [arrays.keys.index(k) for k in keys]
    values = arrays.values[:, index].astype(np.float64)
    if wide:
        frame = pd.DataFrame(values, columns=keys)
        frame.insert(0, "node", pd.Categorical.from_codes(np.zeros(len(frame), np.int64), [arrays.node]))
        frame.insert(0, "timestamp", arrays.timestamps.astype(np.float64))
        return frame
    n, m = values.shape
    flat = values.reshape(-1)
    keep = np.flatnonzero(~np.isnan(flat))
    metric = np.tile(np.arange(m), n)[keep]
    names = [smdebug_names(k) for k in keys]
    column = {
        "timestamp": np.repeat(arrays.timestamps.astype(np.float64), m)[keep],
        "node": pd.Categorical.from_codes(np.zeros(len(keep), np.int64), [arrays.node]),
        "metric": pd.Categorical.from_codes(metric, keys),
        **{col: _coded(metric, [nm[j] for nm in names]) for j, col in enumerate(("type", "name", "dimension"))},
        "value": flat[keep],
    }
    return pd.DataFrame(column)


def _coded(metric: np.ndarray, labels: list[str]) -> pd.Categorical:
    """A category column of one label per metric (labels may repeat: ``type`` is ``cpu`` for every core)."""
    uniq = list(dict.fromkeys(labels))
    codes = np.array([uniq.index(lab) for lab in labels], np.int64)
    return pd.Categorical.from_codes(codes[metric] if len(labels) else metric, uniq)


def overlapping(start: np.ndarray, end: np.ndarray, t0: float | None, t1: float | None) -> np.ndarray:
    """Which ``[start, end]`` intervals overlap ``[t0, t1)`` (an instant at ``t0`` does; one ending at ``t0`` not).

    Example:
        >>> overlapping(np.array([0.0, 5.0, 9.0, 10.0]), np.array([5.0, 6.0, 9.0, 11.0]), 5.0, 10.0).tolist()
        [False, True, True, False]
    """
    keep = np.ones(len(start), dtype=bool)
    if t1 is not None:
        keep &= start < t1
    if t0 is not None:
        keep &= (end > t0) | (start >= t0)
    return keep


def steps_frame(
    tables: dict[str, FrameworkTables], start: float | None = None, end: float | None = None
) -> pd.DataFrame:
    """Every worker's timed steps overlapping ``[start, end)`` with their spans' seconds (:data:`STEP_COLUMNS`).

    A span belongs to the step it lies in, else (a data-loader wait before its step) to the next step to start.
    """
    parts = [_worker_steps(tab, start, end) for tab in tables.values() if tab.step_count]
    return concat_frames([p for p in parts if len(p)], STEP_COLUMNS)


def _worker_steps(tab: FrameworkTables, t0: float | None, t1: float | None) -> pd.DataFrame:
    frame = tab.steps_df()
    frame.insert(1, "node", tab.node)
    seconds = _span_seconds(tab)
    for kind in _SPAN_KINDS:
        frame[kind] = seconds[kind]
    frame = frame[overlapping(frame["start"].to_numpy(), frame["end"].to_numpy(), t0, t1)]
    return frame.reset_index(drop=True).astype(STEP_COLUMNS)[list(STEP_COLUMNS)]


def _span_seconds(tab: FrameworkTables) -> dict[str, np.ndarray]:
    """Seconds of each span kind per step (steps in ``tab.steps`` order)."""
    s_start, s_end = tab.steps["start"], tab.steps["end"]
    sp = tab.spans
    before = np.searchsorted(s_start, sp["start"], side="right") - 1
    inside = (before >= 0) & (s_end[np.clip(before, 0, None)] >= sp["end"])
    owner = np.where(inside, before, before + 1)
    known = owner < len(s_start)
    out = {}
    for kind in _SPAN_KINDS:
        code = next(c for c, name in SPAN_NAMES.items() if name == kind)
        sel = known & (sp["kind"] == code)
        out[kind] = np.bincount(owner[sel], weights=(sp["end"] - sp["start"])[sel], minlength=len(s_start))
    return out


def spans_frame(
    tables: dict[str, FrameworkTables], start: float | None = None, end: float | None = None
) -> pd.DataFrame:
    """Every worker's spans overlapping ``[start, end)`` (:data:`SPAN_COLUMNS`), sorted by worker then start."""
    parts = []
    for tab in tables.values():
        frame = tab.spans_df()
        frame.insert(1, "node", tab.node)
        frame = frame[overlapping(frame["start"].to_numpy(), frame["end"].to_numpy(), start, end)]
        if len(frame):
            parts.append(frame.astype(SPAN_COLUMNS)[list(SPAN_COLUMNS)])
    return concat_frames(parts, SPAN_COLUMNS)


def phases_frame(
    tables: dict[str, FrameworkTables], start: float | None = None, end: float | None = None
) -> pd.DataFrame:
    """Every worker's job phases with known bounds overlapping ``[start, end)`` (:data:`PHASE_COLUMNS`)."""
    rows = [
        {"worker": tab.worker, "node": tab.node, "phase": phase, "start": b[0], "end": b[1], "duration": b[1] - b[0]}
        for tab in tables.values()
        for phase, b in tab.phases().items()
        if b is not None and overlapping(np.array([b[0]]), np.array([b[1]]), start, end)[0]
    ]
    return pd.DataFrame(rows).astype(PHASE_COLUMNS) if rows else empty_frame(PHASE_COLUMNS)


def step_metrics_frame(
    tables: dict[str, FrameworkTables], start: float | None = None, end: float | None = None
) -> pd.DataFrame:
    """Per-step framework metrics (``worker, global_step, time`` and one float64 column per metric key)."""
    parts = []
    for tab in tables.values():
        frame = pd.DataFrame(tab.step_metrics)
        times = frame["time"].to_numpy()
        frame = frame[overlapping(times, times, start, end)]
        if len(frame):
            frame.insert(0, "worker", pd.Categorical([tab.worker] * len(frame)))
            parts.append(frame[["worker", "global_step", "time", *(c for c in frame.columns[3:])]])
    base = {"worker": "category", "global_step": "int64", "time": "float64"}
    if not parts:
        return empty_frame(base)
    keys = list(dict.fromkeys(k for p in parts for k in p.columns))
    return concat_frames([p.reindex(columns=keys) for p in parts], {**base, **{k: "float64" for k in keys[3:]}})
