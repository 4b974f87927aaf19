"""LoadBalancing: GPUs of a node with different utilisation distributions (spec 2.6, intended behaviour)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import SCAN, ProfilerRule, window_ends
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["LoadBalancing", "js_distance"]

EDGES = np.arange(0.0, 102.0, 2.0)  # 2%-bins; the last one is closed, so 100% counts


def js_distance(h1: np.ndarray, h2: np.ndarray) -> float:
    """Jensen-Shannon distance (natural log) between two histograms of counts."""
    p = h1 / h1.sum()
    q = h2 / h2.sum()
    m = (p + q) / 2.0

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / m[nz])))

    return float(np.sqrt(max((kl(p) + kl(q)) / 2.0, 0.0)))


def _running_histograms(
    cols: dict[int, np.ndarray], timestamps: np.ndarray, ends: np.ndarray
) -> Iterator[dict[int, np.ndarray]]:
    """Per window end, each GPU's histogram of the samples up to it: the previous one plus the new samples only.

    Counts are integers, so adding the window's histogram to the running one gives the same counts as the
    histogram of everything so far, in time linear in the samples.
    """
    running = {g: np.zeros(len(EDGES) - 1) for g in cols}
    lo = 0
    for n in np.searchsorted(timestamps, ends, "right"):
        for g, c in cols.items():
            part = c[lo:n]
            running[g] = running[g] + np.histogram(part[np.isfinite(part)], EDGES)[0]
        lo = max(lo, int(n))
        yield running


class LoadBalancing(ProfilerRule):
    """Flag GPUs of a node whose utilisation distributions differ.

    For each pair of GPUs on a node (one with more than ``patience`` samples, the other with any), the Jensen-Shannon
    distance between their utilisation histograms above ``threshold`` is a violation, at each scan window. In a
    multi-node job, GPUs of different nodes are also compared, over the whole run.
    smdebug's code compared only the last GPU with itself (never triggering); this is the intended rule.

    Example:
        >>> round(js_distance(np.array([1.0, 0.0]), np.array([0.0, 1.0])), 3)
        0.833
    """

    parameters = (
        Param("threshold", float, 0.5, "Jensen-Shannon distance above which two GPUs are imbalanced", min=0, max=100),
        Param("patience", int, 1000, "samples a GPU needs before it is compared", min=1),
        SCAN,
    )
    threshold: float
    patience: int
    scan_interval_us: int
    recommendation = "Choose a different distributed training strategy or a different distributed training framework."
    description = "imbalance across GPUs in data parallelism"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Compare the GPUs of every node pairwise."""
        missing = self.no_gpu(data)
        if missing:
            return missing
        triggers: list[float] = []
        details: dict[str, Any] = {}
        series: list[Series] = []
        most, pairs_seen, worst, multi_gpu = 0, 0, (0.0, ""), False
        for node, arr in data.system.items():
            cols = {g: c for g in arr.gpus if (c := arr.column(f"gpu{g}_utilization_percent")) is not None}
            most = max([most] + [int(np.isfinite(c).sum()) for c in cols.values()])
            details[node] = {"workloads": {}, "distances": {}}
            if len(cols) < 2:
                continue
            multi_gpu = True
            ends = window_ends(float(arr.timestamps[0]), float(arr.timestamps[-1]), self.scan_s())
            maxima, trig = [], []
            for end, hists in zip(ends, _running_histograms(cols, arr.timestamps, ends), strict=True):
                dists = self._pairs(hists)
                pairs_seen += len(dists)
                for pair, d in dists.items():
                    details[node]["distances"].setdefault(pair[0], {})[pair[1]] = round(d, 4)
                    worst = max(worst, (d, f"{node}: {pair[0]} vs {pair[1]}"))
                bad = [d for d in dists.values() if d > self.threshold]
                trig += [float(end)] * len(bad)
                maxima.append(max(dists.values(), default=0.0))
            triggers += trig
            details[node]["workloads"] = {f"gpu{g}": h.astype(int).tolist() for g, h in hists.items()}
            marks = tuple(sorted(set(trig)))
            series.append(
                Series(f"{node} largest GPU distance", tuple(ends), tuple(maxima), "s", marks, self.threshold)
            )
        cross = self._across_nodes(data) if len(data.system) > 1 else {}
        if cross:
            details["across_nodes"] = {k: round(d, 4) for k, d in cross.items()}
            pairs_seen += len(cross)
            worst = max([worst] + [(d, k) for k, d in cross.items()])
            end = data.end_time()
            assert end is not None  # the nodes compared have samples
            triggers += [end] * sum(d > self.threshold for d in cross.values())
        if most <= self.patience:
            return self.no_data(
                f"too little data: {most} GPU samples; the rule needs more than patience={self.patience}", most
            )
        if not pairs_seen:
            why = "no two GPUs of a node both reported utilisation" if multi_gpu else "only one GPU per node"
            return self.verdict(Status.NO_ISSUES_FOUND, f"{why}: no balancing issue", most, (), details)
        msg = f"largest Jensen-Shannon distance {worst[0]:.3f} ({worst[1]}), threshold {self.threshold:g}"
        status = Status.ISSUES_FOUND if triggers else Status.NO_ISSUES_FOUND
        return self.verdict(status, msg, most, triggers, details, series)

    def _across_nodes(self, data: ProfilerData) -> dict[str, float]:
        """Distances between GPUs of different nodes over the whole run (multi-node jobs)."""
        hists: dict[tuple[str, int], np.ndarray] = {}
        for node, arr in data.system.items():
            for g in arr.gpus:
                col = arr.column(f"gpu{g}_utilization_percent")
                if col is not None:
                    hists[(node, g)] = np.histogram(col[np.isfinite(col)], EDGES)[0].astype(float)
        out = {}
        for a, b in itertools.combinations(sorted(hists), 2):
            if a[0] != b[0] and self._comparable(hists[a], hists[b]):
                out[f"{a[0]}:gpu{a[1]} vs {b[0]}:gpu{b[1]}"] = js_distance(hists[a], hists[b])
        return out

    def _comparable(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether two GPUs' histograms are compared: one has more than ``patience`` samples, the other any.

        smdebug's "gpu1 has more than patience values" over every ordered pair: which GPU is numbered first does not
        matter (the distance is symmetric).
        """
        na, nb = a.sum(), b.sum()
        return bool(max(na, nb) > self.patience and min(na, nb) > 0)

    def _pairs(self, hists: dict[int, np.ndarray]) -> dict[tuple[str, str], float]:
        """Distances of the GPU pairs of which one GPU has more than ``patience`` samples and the other any."""
        out = {}
        for a, b in itertools.combinations(sorted(hists), 2):
            if self._comparable(hists[a], hists[b]):
                out[(f"gpu{a}", f"gpu{b}")] = js_distance(hists[a], hists[b])
        return out
