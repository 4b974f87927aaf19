"""Profiler rules at the bounds of their data: the last sample's window, a GPU with one sample or none, ties.

Small synthetic timelines (``profiler_synth``) with the figures worked out by hand: which scan windows a rule
judges, which GPUs it compares, which one its message names, and the percentages and minutes it reports.
"""

from __future__ import annotations

import numpy as np
import pytest
from profiler_synth import T0, data, gpus, steps, system

from trainspect.profiler.arrays import SystemArrays
from trainspect.rules.profiler import (
    BatchSize,
    GPUMemoryIncrease,
    InputBottleneck,
    IOBottleneck,
    LoadBalancing,
    MaxInitializationTime,
    OverallFrameworkMetrics,
    OverallSystemUsage,
    WorkerStraggler,
)
from trainspect.rules.profiler._prefix_outliers import PrefixOutliers
from trainspect.rules.verdict import Status


def test_a_last_sample_past_a_window_end_opens_a_window_of_its_own() -> None:
    # 122 samples at 0-60.5 s, all bottlenecks: the 60 s window holds 121 (not more than patience), the 120 s one all
    busy = {"cpu_iowait_percent": 70.0, **gpus(1, 5.0)}
    v = IOBottleneck(patience=121).evaluate(data([system(61.0, **busy)]))
    assert v.status is Status.ISSUES_FOUND and v.datapoints == 122
    assert v.triggers == 1 and v.first_trigger_time == T0 + 120
    assert v.series[0].x == (T0 + 120,)
    short = IOBottleneck(patience=120).evaluate(data([system(60.5, **busy)]))  # 121 samples: one window
    assert short.status is Status.ISSUES_FOUND and short.series[0].x == (T0 + 60,)


def test_batch_size_series_has_one_point_per_judged_window() -> None:
    arrays = system(10.0, cores=1, cpu0_utilization_percent=12.5, **gpus(1, 90.0, 90.0))
    (series,) = BatchSize(window=4, patience=4).evaluate(data([arrays])).series
    assert series.x == (T0 + 60,) and series.y == (12.5,)


def test_a_gpu_with_one_sample_more_than_the_window_is_not_judged() -> None:
    # window 3: the first comparison of two full moving averages needs window + 2 samples
    rule = GPUMemoryIncrease(window=3, patience=1, memory_source="device")
    four = rule.evaluate(data([system(2.0, cores=1, **gpus(1, 50.0, np.array([10.0, 10.0, 10.0, 40.0])))]))
    assert four.status is Status.NO_DATA and four.datapoints == 4  # no GPU judged: said so, no "-inf points"
    assert four.message == (
        "too little data: 4 GPU memory samples per GPU at most; the 3-sample moving average needs 5 to compare two "
        "of them"
    )
    assert "n0/gpu0" not in four.details and four.series == ()
    five = rule.evaluate(data([system(2.5, cores=1, **gpus(1, 50.0, np.array([10.0, 10.0, 10.0, 10.0, 40.0])))]))
    assert five.status is Status.ISSUES_FOUND and five.details["n0/gpu0"]["increase"] == 10.0
    assert len(five.series) == 1


def test_gpus_with_the_same_memory_increase_are_named_by_the_first() -> None:
    mem = np.array([10.0, 10.0, 15.0, 20.5, 20.5, 20.5])
    v = GPUMemoryIncrease(window=1, patience=1, memory_source="device").evaluate(
        data([system(3.0, cores=1, **gpus(2, 50.0, mem))])
    )
    assert v.triggers == 2
    assert v.message == (
        "largest increase of the 1-sample moving average of whole-device memory (NVML): 5.50 points on n0/gpu0 "
        "(threshold 5); 2 violation(s)"
    )


def test_a_wait_tagged_with_the_lowest_global_step_belongs_to_that_step_wherever_it_starts() -> None:
    tab = steps(np.full(12, 0.25), gap=0.75)  # a step every second
    tab.steps["global_step"] = np.array([1, 0, *range(2, 12)], np.int64)  # the second step carries global step 0
    end = float(tab.steps["start"][1])
    tab.spans = {
        "kind": np.array([4], np.uint8),
        "start": np.array([end - 0.5]),
        "end": np.array([end]),
        "global_step": np.array([0], np.int64),
        "workers": np.array([2], np.int16),
        "pid": np.zeros(1, np.int64),
    }
    d = InputBottleneck(patience=10).evaluate(data([], [tab])).details["worker_0"]
    assert d["cycles"] == 11 and d["input_wait_s"] == 0.5


def test_gpus_of_different_nodes_are_compared_when_the_second_has_one_sample() -> None:
    one = np.full(6, np.nan)
    one[0] = 90.0
    n0 = system(3.0, cores=1, gpu0_utilization_percent=10.0)
    n1 = system(3.0, node="n1", cores=1, gpu0_utilization_percent=one)
    v = LoadBalancing(patience=5).evaluate(data([n0, n1]))
    assert v.status is Status.ISSUES_FOUND and v.triggers == 1
    assert v.details["across_nodes"] == {"n0:gpu0 vs n1:gpu0": pytest.approx(np.sqrt(np.log(2)), abs=1e-4)}


def test_a_gpu_without_a_sample_is_not_compared() -> None:
    arrays = system(3.0, cores=1, gpu0_utilization_percent=10.0, gpu1_utilization_percent=np.nan)
    v = LoadBalancing(patience=5).evaluate(data([arrays]))
    assert (
        v.status is Status.NO_ISSUES_FOUND
        and v.message == "no two GPUs of a node both reported utilisation: no balancing issue"
    )
    assert v.details["n0"]["distances"] == {}


def test_minutes_without_a_step_are_charted_per_window() -> None:
    rule = MaxInitializationTime(threshold=1.0, scan_interval_us=30_000_000)
    (series,) = rule.evaluate(data([system(200.0)], [steps(np.ones(3), start=T0 + 120)])).series
    assert series.x == tuple(T0 + 30.0 * np.arange(7))
    assert series.y[:4] == (0.0, 0.5, 1.0, 1.5) and np.isnan(series.y[4:]).all()  # the step came in the 120 s one


def test_system_usage_reports_the_95th_percentile() -> None:
    arrays = system(50.0, cores=1, **gpus(1, lambda t: 2 * t))  # GPU at 0, 1, ..., 99 %
    v = OverallSystemUsage().evaluate(data([arrays]))
    assert v.details["GPU"]["n0"] == {"max": 99.0, "p99": 98.01, "p95": 94.05, "p50": 49.5, "min": 0.0}


def test_a_slower_rank_is_stated_in_percent_of_the_others_compute() -> None:
    ranks = [steps(np.full(12, s), worker=f"worker_{i}", gap=1.0 - s) for i, s in enumerate((0.5, 0.5, 0.875))]
    v = WorkerStraggler(threshold=20.0).evaluate(data([], ranks))
    assert v.workers == ("worker_2",)
    assert v.message.startswith(
        "worker_2 computes 75 % longer per step than the median of the other ranks (875 ms vs 500 ms; threshold 20 %)"
    )


def test_step_outliers_of_a_skewed_prefix_are_the_brute_force_ones() -> None:
    # a quarter of the steps twice as long: the mean (1.25 s) lies well above the median (1 s)
    dur = np.ones(2000)
    dur[1::4] = 2.0
    dur[0] = 1.5  # below mean + std (1.68 s): not an outlier
    scan = PrefixOutliers(dur, 1.0)
    assert scan.nth_outlier(2000, 0) == 1 and scan.nth_outlier(2000, 1) == 5


def test_gpu_metrics_without_the_io_wait_metric_say_so_instead_of_judging() -> None:
    full = system(10.0, cores=1, **gpus(1, 5.0))  # idle GPU all along: a bottleneck were I/O wait recorded
    keep = [j for j, key in enumerate(full.keys) if key != "cpu_iowait_percent"]
    arrays = SystemArrays("n0", full.timestamps, tuple(full.keys[j] for j in keep), full.values[:, keep], 500)
    v = IOBottleneck(patience=1).evaluate(data([arrays]))
    assert v.status is Status.NO_DATA and v.datapoints == 0
    assert v.message == "no I/O wait metrics were recorded next to the GPU metrics"


def test_framework_spans_without_steps_say_the_time_outside_steps_is_unknown() -> None:
    tab = steps(np.array([]))  # forward and backward spans, but no step recorded: no training loop to divide
    tab.spans = {
        "kind": np.array([1, 2], np.uint8),
        "start": np.array([T0 + 5.0, T0 + 5.2]),
        "end": np.array([T0 + 5.2, T0 + 5.5]),
        "global_step": np.zeros(2, np.int64),
        "workers": np.ones(2, np.int16),
        "pid": np.zeros(2, np.int64),
    }
    v = OverallFrameworkMetrics().evaluate(data([], [tab]))
    assert v.status is Status.NO_ISSUES_FOUND and v.datapoints == 0
    assert v.message == "no steps were recorded: the time outside steps is unknown"  # not "0.0% … outside steps"


def test_step_time_stragglers_judge_a_worker_with_exactly_min_steps_steps() -> None:
    ranks = [steps(np.full(3, 0.5), worker=f"worker_{i}") for i in range(2)]
    judged = WorkerStraggler(measure="step", min_steps=3).evaluate(data([], ranks))
    assert judged.status is Status.NO_ISSUES_FOUND and judged.datapoints == 2
    assert judged.message == "no straggler among 2 workers (median step 0.5 s, threshold 20 %)"
    short = WorkerStraggler(measure="step", min_steps=4).evaluate(data([], ranks))  # one step short on both
    assert short.status is Status.NO_DATA and short.message.startswith("0 worker(s) with at least 4 step cycles")


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(np.linspace(-1e-3, 1e-3, 1100), id="evenly-spread"),
        pytest.param(np.where(np.arange(1100) % 2, 1e-3, -1e-3), id="every-step-on-mean-plus-std"),
    ],
)
def test_step_outliers_of_a_prefix_far_from_the_median_are_the_brute_force_ones(head: np.ndarray) -> None:
    # 1100 steps of about 1000 s, then 1300 of 0 s: the median (0) lies far from the prefix's mean, so the
    # running sums leave a rounding error in the prefix's tiny spread that the scan must allow for
    dur = np.concatenate([1000.0 + head, np.zeros(1300)])
    prefix = dur[:1100]
    brute = np.flatnonzero(prefix > prefix.mean() + prefix.std())
    assert PrefixOutliers(dur, 1.0).nth_outlier(1100, 0) == (int(brute[0]) if len(brute) else None)


def test_step_time_stragglers_count_a_zero_length_step_at_zero_seconds() -> None:
    ranks = [steps(np.array([0.0, 0.0, 0.5]), worker="worker_0"), steps(np.full(3, 0.5), worker="worker_1")]
    v = WorkerStraggler(measure="step", min_steps=1).evaluate(data([], ranks))
    assert v.status is Status.ISSUES_FOUND and v.workers == ("worker_1",)
    assert (
        v.message
        == "worker_1 straggle: worker_1 takes 0.5 s per step against 0.25 s over all workers (threshold 20 % above)"
    )


def test_a_forward_backward_split_needs_both_forward_and_backward_time() -> None:
    tab = steps(np.array([1.0, 1.0]), gap=0.0, start=T0 + 5.0)
    tab.spans = {  # backward spans only (the forward pass was not timed)
        "kind": np.array([2, 2], np.uint8),
        "start": np.array([T0 + 5.2, T0 + 6.2]),
        "end": np.array([T0 + 5.6, T0 + 6.6]),
        "global_step": np.arange(2, dtype=np.int64),
        "workers": np.ones(2, np.int16),
        "pid": np.zeros(2, np.int64),
    }
    v = OverallFrameworkMetrics().evaluate(data([], [tab]))
    assert v.status is Status.NO_ISSUES_FOUND and v.details["spans"]["backward"] > 0
    assert "forward_backward" not in v.details and "forward 0%" not in v.message
