"""Smdebug's literal StepOutlier scan in O(n log n): outliers above ``mean + k·std`` of every prefix of the steps.

The literal rule judges, at each scan window, all the steps ended so far: the ones longer than their
``mean + stddev · std`` are outliers, and the ``n_outliers + 1``-th of them (in end order) triggers. Recomputing
the mean, the standard deviation and the comparison over the prefix at every window is quadratic in the run's
length. Here the mean and variance come from cumulative sums, and the first outliers from block maxima, so each
window costs O(n_outliers · log n). Cumulative sums round differently from NumPy's pairwise ``mean``/``std``;
a rigorous bound on that difference gives a band around the threshold, and a window whose first outliers lie
in the band is recomputed exactly as before, so the triggers are identical.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PrefixOutliers"]

BRANCH = 64
"""Children per block of the maxima hierarchy."""

_U = float(np.finfo(np.float64).eps)


class PrefixOutliers:
    """The literal outlier scan over durations in end order.

    Attributes:
        touched: elements compared so far (the work done; linear tests read it).
        exact: windows recomputed exactly over their whole prefix (a first outlier in the rounding band).

    Example:
        >>> scan = PrefixOutliers(np.array([1.0] * 200 + [9.0] * 5), stddev=3.0)
        >>> scan.nth_outlier(205, 1), scan.nth_outlier(205, 5)
        (201, None)
    """

    def __init__(self, dur: np.ndarray, stddev: float) -> None:
        self.dur = np.asanyarray(dur, dtype=np.float64)
        self.stddev = float(stddev)
        self.finite = bool(np.isfinite(self.dur).all())
        self.touched = 0
        self.exact = 0
        shift = float(np.median(self.dur)) if self.finite and len(self.dur) else 0.0
        dev = self.dur - shift
        self._shift = shift
        self._s1 = np.cumsum(dev)
        self._s2 = np.cumsum(dev * dev)
        self._scale = float(np.abs(dev).max() + np.abs(self.dur).max()) if self.finite and len(dev) else 0.0
        self._levels = [self.dur]
        while self.finite and len(self._levels[-1]) > BRANCH:
            v = self._levels[-1]
            v = np.concatenate([v, np.full((-len(v)) % BRANCH, -np.inf)])
            self._levels.append(v.reshape(-1, BRANCH).max(axis=1))

    def nth_outlier(self, n: int, k: int) -> int | None:
        """The index of the ``k``-th (from 0) duration in ``dur[:n]`` above its ``mean + stddev·std``, or ``None``.

        Identical to ``idx[k] if len(idx) > k else None`` with ``idx = np.flatnonzero(d > d.mean() +
        stddev * d.std())`` and ``d = dur[:n]``.
        """
        if self.finite and n > 0 and (k + 1) * BRANCH * 16 < n:  # (else the whole prefix is cheaper)
            thr, band = self._threshold(n)
            if np.isfinite(thr) and np.isfinite(band):
                above = self._first_above(thr - band, n, k + 1)
                if len(above) <= k:
                    return None  # every outlier lies above thr - band: fewer than k + 1 of them
                if bool((self.dur[above] > thr + band).all()):
                    return above[k]  # surely above the exact threshold, and no outlier comes before them
        return self._exact(n, k)

    def _threshold(self, n: int) -> tuple[float, float]:
        """``mean + stddev·std`` of ``dur[:n]`` from the cumulative sums, and a bound on its rounding difference."""
        m1 = float(self._s1[n - 1]) / n
        var = max(float(self._s2[n - 1]) / n - m1 * m1, 0.0)
        std = float(np.sqrt(var))
        thr = self._shift + m1 + self.stddev * std
        scale = self._scale
        mean_err = 8.0 * _U * (n + 64) * scale
        var_err = 8.0 * _U * (n + 64) * scale * scale
        std_err = min(float(np.sqrt(var_err)), var_err / std) if std > 0 else float(np.sqrt(var_err))
        return thr, mean_err + self.stddev * std_err + 8.0 * _U * (abs(thr) + scale)

    def _exact(self, n: int, k: int) -> int | None:
        self.exact += 1
        self.touched += n
        d = self.dur[:n]
        idx = np.flatnonzero(d > d.mean() + self.stddev * d.std())
        return int(idx[k]) if len(idx) > k else None

    def _first_above(self, value: float, stop: int, count: int) -> list[int]:
        """The first ``count`` indices below ``stop`` whose duration exceeds ``value`` (descending the maxima)."""
        out: list[int] = []
        top = len(self._levels) - 1
        self._descend(top, 0, len(self._levels[top]), value, stop, count, out)
        return out

    def _descend(self, level: int, lo: int, hi: int, value: float, stop: int, count: int, out: list[int]) -> None:
        span = BRANCH**level
        hi = min(hi, -(-stop // span))  # blocks that begin before stop
        if hi <= lo:
            return
        self.touched += hi - lo
        for b in np.flatnonzero(self._levels[level][lo:hi] > value) + lo:
            if level == 0:
                out.append(int(b))
            else:
                self._descend(level - 1, int(b) * BRANCH, (int(b) + 1) * BRANCH, value, stop, count, out)
            if len(out) >= count:
                return
