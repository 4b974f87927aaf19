"""The profiler rules' window scans cost linear work, and give the verdicts of the straightforward computation.

No wall clock: the work is counted. The rules' input arrays are views of :class:`_Counting`, which adds the
elements of every NumPy ufunc call on them (comparisons, sums, ``isfinite``…) to a counter; recomputing each
scan window from the start of the run makes that count grow with the square of the run's length.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from profiler_synth import T0, data, steps, system

from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.rules.profiler import Dataloader, LoadBalancing, StepOutlier
from trainspect.rules.profiler import dataloader as dataloader_mod
from trainspect.rules.profiler import load_balancing as load_balancing_mod
from trainspect.rules.profiler import step_outlier as step_outlier_mod
from trainspect.rules.profiler._prefix_outliers import PrefixOutliers
from trainspect.rules.profiler.load_balancing import EDGES

WORK = [0]


class _Counting(np.ndarray):
    """An array whose ufunc calls add their input elements to ``WORK``."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        WORK[0] += sum(int(np.size(x)) for x in inputs if isinstance(x, np.ndarray))
        plain = tuple(x.view(np.ndarray) if isinstance(x, _Counting) else x for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, _Counting) else o for o in kwargs["out"])
        result = getattr(ufunc, method)(*plain, **kwargs)
        return result.view(_Counting) if isinstance(result, np.ndarray) and result.ndim else result


def _work(fn: Any) -> int:
    WORK[0] = 0
    fn()
    return WORK[0]


def _counting_system(arr: SystemArrays) -> SystemArrays:
    return SystemArrays(arr.node, arr.timestamps, arr.keys, arr.values.view(_Counting), arr.interval_ms)


def _gpu_node(minutes: int, seed: int = 0, node: str = "n0") -> SystemArrays:
    rng = np.random.default_rng(seed)
    n = int(minutes * 60 / 0.1)
    util = {g: np.clip(rng.normal(50 + 8 * g, 15, n), 0, 100) for g in range(3)}
    util[2][rng.random(n) < 0.01] = np.nan
    cols: dict[str, object] = {f"gpu{g}_utilization_percent": u for g, u in util.items()}
    cols.update({f"gpu{g}_memory_used_percent": 40.0 for g in range(3)})
    return system(n * 0.1, 0.1, node, 4, **cols)


def _loader_worker(seconds: int, seed: int = 0) -> FrameworkTables:
    rng = np.random.default_rng(seed)
    tab = steps(np.full(seconds * 4, 0.2), gap=0.05)
    n = len(tab.steps["start"])
    tab.spans = {
        "kind": np.full(n, 4, np.uint8),
        "start": tab.steps["start"] - 0.04,
        "end": tab.steps["start"] - 0.001,
        "global_step": np.full(n, -1, np.int64),
        "workers": np.where(rng.random(n) < 0.5, rng.integers(0, 8, n), -1).astype(np.int16),
        "pid": rng.integers(100, 106, n).astype(np.int64),
    }
    return tab


# --- the straightforward computations the rules replaced --------------------------------------------------
def _histograms_from_start(cols: dict[int, np.ndarray], timestamps: np.ndarray, ends: np.ndarray) -> Any:
    for n in np.searchsorted(timestamps, ends, "right"):
        yield {g: np.histogram(c[:n][np.isfinite(c[:n])], EDGES)[0].astype(float) for g, c in cols.items()}


def _loaders_per_second(tab: FrameworkTables) -> dict[int, int]:
    sel = tab.spans["kind"] == 4
    secs = np.floor(tab.spans["start"][sel]).astype(np.int64)
    workers, pids = tab.spans["workers"][sel], tab.spans["pid"][sel]
    out: dict[int, int] = {}
    for sec in np.unique(secs):
        here = secs == sec
        known = workers[here][workers[here] >= 0]
        out[int(sec)] = max(1, int(known.max())) if len(known) else len(np.unique(pids[here]))
    return out


class _PrefixFromStart:
    """The literal StepOutlier window, recomputed over the whole prefix."""

    def __init__(self, dur: np.ndarray, stddev: float) -> None:
        self.dur, self.stddev = dur, stddev

    def nth_outlier(self, n: int, k: int) -> int | None:
        d = self.dur[:n]
        idx = np.flatnonzero(d > d.mean() + self.stddev * d.std())
        return int(idx[k]) if len(idx) > k else None


# --- verdicts identical to the straightforward computation -------------------------------------------------
@pytest.mark.parametrize("threshold", [0.5, 0.05, 0.01])
def test_load_balancing_verdict_matches_histograms_from_start(
    monkeypatch: pytest.MonkeyPatch, threshold: float
) -> None:
    run = data([_gpu_node(12, 1), _gpu_node(7, 2, node="n1")])
    rule = LoadBalancing(threshold=threshold, patience=100)
    new = rule.evaluate(run)
    monkeypatch.setattr(load_balancing_mod, "_running_histograms", _histograms_from_start)
    assert new == rule.evaluate(run)


def test_dataloader_counts_match_the_scan_per_second(monkeypatch: pytest.MonkeyPatch) -> None:
    tab = _loader_worker(300, seed=3)
    tab.spans["workers"][:400] = -1  # seconds without a known worker count: distinct pids
    assert dataloader_mod.parallel_loaders(tab) == _loaders_per_second(tab)
    run = data([system(320, interval=0.1, cores=4)], [tab])
    new = Dataloader().evaluate(run)
    monkeypatch.setattr(dataloader_mod, "parallel_loaders", _loaders_per_second)
    assert new == Dataloader().evaluate(run)


@pytest.mark.parametrize(("stddev", "n_outliers"), [(3.0, 10), (1.0, 40), (0.5, 0), (2.0, 500)])
def test_step_outlier_literal_matches_the_prefix_from_start(
    monkeypatch: pytest.MonkeyPatch, stddev: float, n_outliers: int
) -> None:
    rng = np.random.default_rng(7)
    durations = np.abs(rng.normal(0.1, 0.01, 6000))
    durations[rng.random(6000) < 0.01] *= 5
    durations[3000:3100] = 0.3  # a slowdown
    run = data(framework=[steps(durations), steps(np.round(durations, 3), worker="worker_1")])
    rule = StepOutlier(literal=True, stddev=stddev, n_outliers=n_outliers, scan_interval_us=5_000_000)
    new = rule.evaluate(run)
    monkeypatch.setattr(step_outlier_mod, "PrefixOutliers", _PrefixFromStart)
    assert new == rule.evaluate(run)


@pytest.mark.parametrize("kind", ["normal", "quantised", "constant", "two_values", "large_offset"])
def test_prefix_outliers_match_numpy_on_every_prefix(kind: str) -> None:
    rng = np.random.default_rng(11)
    dur = {
        "normal": np.abs(rng.normal(0.1, 0.02, 3000)),
        "quantised": np.round(np.abs(rng.normal(0.1, 0.02, 3000)), 3),
        "constant": np.full(3000, 0.1),
        "two_values": np.where(rng.random(3000) < 0.05, 0.7, 0.1),
        "large_offset": T0 + rng.normal(0, 1, 3000),
    }[kind]
    scan, ref = PrefixOutliers(dur, 2.0), _PrefixFromStart(dur, 2.0)
    for n in range(1, 3001, 7):
        for k in (0, 3, 10):
            assert scan.nth_outlier(n, k) == ref.nth_outlier(n, k), (n, k)


# --- linear work ------------------------------------------------------------------------------------------
def _growth(work_small: int, work_large: int, factor: int) -> float:
    """Work growth relative to linear growth (1.0: linear; ``factor``: quadratic)."""
    return work_large / work_small / factor


def test_load_balancing_work_is_linear() -> None:
    def run(minutes: int) -> int:
        run = data([_counting_system(_gpu_node(minutes))])
        return _work(lambda: LoadBalancing(patience=100).evaluate(run))

    small, large = run(30), run(120)
    assert _growth(small, large, 4) < 1.1
    assert large < 20 * 120 * 600 * 3  # a few passes over the 3 GPU columns, not one per window


def test_dataloader_work_is_linear() -> None:
    def run(seconds: int) -> int:
        tab = _loader_worker(seconds)
        tab.spans = {k: v.view(_Counting) for k, v in tab.spans.items()}
        return _work(lambda: dataloader_mod.parallel_loaders(tab))

    small, large = run(500), run(2000)
    assert _growth(small, large, 4) < 1.1
    assert large < 30 * 2000 * 4


def test_step_outlier_literal_work_is_linear() -> None:
    def run(count: int) -> int:
        tab = steps(np.abs(np.random.default_rng(5).normal(0.1, 0.01, count)))
        tab.steps = {k: v.view(_Counting) for k, v in tab.steps.items()}
        rule = StepOutlier(literal=True, scan_interval_us=10_000_000)
        return _work(lambda: rule.evaluate(data(framework=[tab])))

    small, large = run(20_000), run(80_000)  # 200 and 800 windows
    assert _growth(small, large, 4) < 1.1
    assert large < 150 * 80_000  # a fixed number of passes over the steps


def test_prefix_outliers_touch_few_elements_per_window() -> None:
    dur = np.abs(np.random.default_rng(2).normal(0.1, 0.01, 200_000))
    scan = PrefixOutliers(dur, 3.0)
    for n in range(20_000, 200_001, 2000):  # (shorter prefixes are recomputed: cheaper than the descent)
        scan.nth_outlier(n, 10)
    assert scan.exact == 0
    assert scan.touched < 100 * 11 * 64 * 4  # k + 1 blocks per level, four levels, 91 windows


def test_counting_array_sees_a_scan_from_the_start() -> None:
    """The counter itself: the quadratic scan's work grows ~16x for a 4x longer run."""

    def run(count: int) -> int:
        dur = np.abs(np.random.default_rng(5).normal(0.1, 0.01, count)).view(_Counting)
        ref = _PrefixFromStart(dur, 3.0)
        return _work(lambda: [ref.nth_outlier(n, 10) for n in range(1000, count + 1, 1000)])

    assert _growth(run(10_000), run(40_000), 4) > 3.5
