"""The utilisation heatmap: cores and GPUs (rows) by time buckets (columns), plus step boundaries."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.data import ProfilerData

__all__ = ["heatmap"]


def heatmap(
    system_data: ProfilerData | SystemArrays,
    start: float | None = None,
    end: float | None = None,
    max_columns: int = 200,
    node: str | None = None,
) -> dict[str, Any]:
    """Downsample one node's CPU-core and GPU utilisation into at most ``max_columns`` time buckets.

    Args:
        system_data: a run's :class:`ProfilerData` (step boundaries included) or one node's arrays.
        start: first epoch second (default: the first sample).
        end: last epoch second (default: the last sample).
        max_columns: the most buckets returned.
        node: which node (default: the first one, sorted by name).

    Returns:
        ``{"node", "rows": ["cpu0", …, "gpu0", …], "times": [bucket start, …], "bucket_s", "values":
        [[mean % or None per bucket] per row], "step_boundaries": [epoch s of step starts in range]}``.
        Step boundaries are thinned to at most ``4 * max_columns``. Empty lists when there is no data.
    """
    arrays, steps = _pick(system_data, node)
    empty: dict[str, Any] = {
        "node": node,
        "rows": [],
        "times": [],
        "bucket_s": 0.0,
        "values": [],
        "step_boundaries": [],
    }
    if arrays is None or not len(arrays):
        return empty
    lo = float(arrays.timestamps[0]) if start is None else float(start)
    hi = float(arrays.timestamps[-1]) if end is None else float(end)
    arr = arrays.slice(lo, hi)
    keys = [f"cpu{i}_utilization_percent" for i in arr.cpu_cores] + [f"gpu{g}_utilization_percent" for g in arr.gpus]
    cols = max(1, min(int(max_columns), len(arr) or 1))
    width = max((hi - lo) / cols, 1e-9)
    bucket = np.minimum(((arr.timestamps - lo) / width).astype(np.int64), cols - 1)
    mat = arr.matrix(keys).astype(np.float64)
    ok = np.isfinite(mat)
    sums = np.zeros((cols, len(keys)))
    counts = np.zeros((cols, len(keys)))
    np.add.at(sums, bucket, np.where(ok, mat, 0.0))
    np.add.at(counts, bucket, ok)
    with np.errstate(invalid="ignore"):
        means = sums / counts
    values = [[None if not np.isfinite(v) else round(float(v), 2) for v in means[:, j]] for j in range(len(keys))]
    bounds = steps[(steps >= lo) & (steps <= hi)]
    if len(bounds) > 4 * max_columns:
        bounds = bounds[np.linspace(0, len(bounds) - 1, 4 * max_columns).round().astype(int)]
    return {
        "node": arr.node,
        "rows": [k.split("_", 1)[0] for k in keys],
        "times": [lo + i * width for i in range(cols)],
        "bucket_s": width,
        "values": values,
        "step_boundaries": [float(b) for b in bounds],
    }


def _pick(data: ProfilerData | SystemArrays, node: str | None) -> tuple[SystemArrays | None, np.ndarray]:
    if isinstance(data, SystemArrays):
        return data, np.zeros(0)
    if not data.system:
        return None, np.zeros(0)
    name = node if node is not None else sorted(data.system)[0]
    arrays = data.system.get(name)
    tabs = [t for t in data.framework.values() if t.step_count and (not t.node or t.node == name)]
    steps = np.sort(np.concatenate([t.steps["start"] for t in tabs])) if tabs else np.zeros(0)
    return arrays, steps
