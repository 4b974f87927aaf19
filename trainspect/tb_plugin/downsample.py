"""Server-side downsampling of sample matrices into time buckets (vectorised, for the heatmap and charts).

Timestamps are sorted, so each bucket is a contiguous block of rows and one ``np.add.reduceat`` per matrix
gives the bucket sums; this keeps one hour of 100 ms samples on 72 rows well under the route's time budget
(``trainspect.profiler.heatmap`` uses ``np.add.at``, about 5x slower on that input).
"""

from __future__ import annotations

import numpy as np

__all__ = ["bucket_means", "rows_json"]


def bucket_means(
    timestamps: np.ndarray, values: np.ndarray, start: float, end: float, columns: int
) -> tuple[np.ndarray, float, np.ndarray]:
    """Mean of each column of ``values`` over at most ``columns`` equal time buckets of ``[start, end]``.

    Args:
        timestamps: sorted epoch seconds, one per row of ``values``.
        values: rows x metrics (NaN = missing).
        start: first second of the range.
        end: last second of the range.
        columns: the most buckets returned.

    Returns:
        ``(bucket starts, bucket width in s, means)`` with ``means`` of shape buckets x metrics; a bucket
        with no finite sample is NaN.

    Example:
        >>> t, w, m = bucket_means(np.arange(4.0), np.arange(4.0)[:, None], 0.0, 4.0, 2)
        >>> m[:, 0].tolist(), w
        ([0.5, 2.5], 2.0)
    """
    lo_i = int(np.searchsorted(timestamps, start, "left"))
    hi_i = int(np.searchsorted(timestamps, end, "right"))
    ts, mat = timestamps[lo_i:hi_i], values[lo_i:hi_i]
    n = len(ts)
    cols = max(1, min(int(columns), n or 1))
    width = max((end - start) / cols, 1e-9)
    means = np.full((cols, values.shape[1]), np.nan)
    if n == 0 or values.shape[1] == 0:
        return start + np.arange(cols) * width, width, means
    bucket = np.minimum(((ts - start) / width).astype(np.int64), cols - 1)
    edges = np.searchsorted(bucket, np.arange(cols), "left")
    filled = np.diff(np.append(edges, n)) > 0
    idx = edges[filled]
    data = np.array(mat, dtype=np.float32)  # one float32 copy (float32 sums: ample for means of percentages)
    missing = np.isnan(data)
    if missing.any():
        data[missing] = 0.0
        counts = np.add.reduceat(~missing, idx, axis=0, dtype=np.int32)
    else:
        counts = np.diff(np.append(idx, n))[:, None]
    sums = np.add.reduceat(data, idx, axis=0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        means[filled] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return start + np.arange(cols) * width, width, means


def rows_json(matrix: np.ndarray, digits: int = 1) -> list[list[float | None]]:
    """Columns of ``matrix`` as JSON lists (one per column), rounded (``digits=0``: ints), NaN as ``None``."""
    rounded = np.round(matrix.T.astype(np.float64), digits)
    missing = np.isnan(rounded)
    out = (np.where(missing, 0, rounded).astype(np.int64) if digits == 0 else rounded).astype(object)
    out[missing] = None
    return out.tolist()  # type: ignore[no-any-return]
