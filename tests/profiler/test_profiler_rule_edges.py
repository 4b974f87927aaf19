"""Profiler rules at their edges: exactly at each threshold, the judged window, one GPU of several (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest
from profiler_synth import T0, data, gpus, steps, system

from trainspect.exceptions import ConfigError
from trainspect.rules.profiler import CPUBottleneck, IOBottleneck, LowGPUUtilization
from trainspect.rules.verdict import Status

MIN15 = 15 * 60
HOT = {f"cpu{i}_utilization_percent": 95.0 for i in range(4)}


def _alternate(low: float, high: float):  # noqa: ANN202 - a column spec of profiler_synth.system
    return lambda t: np.where(np.arange(len(t)) % 2 == 0, low, high)  # low first


def test_low_gpu_utilization_judges_the_recent_window_not_the_whole_history() -> None:
    # 1800 samples: busy for the first 10 minutes, then 20 % for the last 5 (600 samples, more than window=500)
    busy_then_idle = {"gpu0_utilization_percent": lambda t: np.where(t < 600, 100.0, 20.0)}
    v = LowGPUUtilization().evaluate(data([system(MIN15, gpu0_memory_used_percent=40.0, **busy_then_idle)]))
    assert v.status is Status.ISSUES_FOUND, v.message
    assert v.details["n0/gpu0"]["gpu_95"] == 20.0  # over the whole history p95 would be 100
    assert v.details["n0/gpu0"]["issue"] == "underutilised"
    assert v.first_trigger_time is not None and v.first_trigger_time - system(1).timestamps[0] > 600


def test_low_gpu_utilization_thresholds_are_strict() -> None:
    at_p95 = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(1, 70.0))]))
    assert at_p95.status is Status.NO_ISSUES_FOUND and at_p95.triggers == 0, at_p95.message
    below = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(1, 69.5))]))
    assert below.status is Status.ISSUES_FOUND
    at_p5 = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(1, _alternate(10.0, 100.0)))]))
    assert at_p5.details["n0/gpu0"]["gpu_5"] == 10.0 and at_p5.details["n0/gpu0"]["gpu_95"] == 100.0
    assert at_p5.status is Status.NO_ISSUES_FOUND, at_p5.message  # p5 equal to threshold_p5 is not fluctuation
    under_p5 = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(1, _alternate(9.5, 100.0)))]))
    assert under_p5.details["n0/gpu0"]["issue"] == "fluctuating"


def test_low_gpu_utilization_needs_more_than_patience_samples() -> None:
    rule = LowGPUUtilization(patience=100, window=50)
    exactly = rule.evaluate(data([system(50.0, **gpus(1, 5.0))]))  # 100 samples
    assert exactly.status is Status.NO_DATA and exactly.datapoints == 100
    one_more = rule.evaluate(data([system(50.5, **gpus(1, 5.0))]))  # 101 samples
    assert one_more.status is Status.ISSUES_FOUND and one_more.datapoints == 101


def test_bottlenecks_count_a_sample_where_one_gpu_of_several_is_low() -> None:
    two = {"gpu0_utilization_percent": 5.0, "gpu1_utilization_percent": 80.0}
    cpu = CPUBottleneck().evaluate(data([system(MIN15, **HOT, **two)]))
    assert cpu.status is Status.ISSUES_FOUND and cpu.details["bottleneck_percent"] == 100.0
    assert cpu.details["low_gpu_utilization"] == 1800
    io = IOBottleneck().evaluate(data([system(MIN15, cpu_iowait_percent=70.0, **two)]))
    assert io.status is Status.ISSUES_FOUND and io.details["bottleneck_percent"] == 100.0
    both_busy = {"gpu0_utilization_percent": 80.0, "gpu1_utilization_percent": 80.0}
    assert CPUBottleneck().evaluate(data([system(MIN15, **HOT, **both_busy)])).details["bottlenecks"] == 0


def test_bottleneck_resource_and_gpu_thresholds_are_strict() -> None:
    at_gpu = CPUBottleneck().evaluate(data([system(MIN15, **HOT, **gpus(1, 10.0))]))
    assert at_gpu.details["low_gpu_utilization"] == 0 and at_gpu.status is Status.NO_ISSUES_FOUND
    at_cpu = {f"cpu{i}_utilization_percent": 90.0 for i in range(4)}
    cpu = CPUBottleneck().evaluate(data([system(MIN15, **at_cpu, **gpus(1, 5.0))]))
    assert cpu.details["bottlenecks"] == 0 and cpu.status is Status.NO_ISSUES_FOUND
    io = IOBottleneck().evaluate(data([system(MIN15, cpu_iowait_percent=50.0, **gpus(1, 5.0))]))
    assert io.details["bottlenecks"] == 0 and io.status is Status.NO_ISSUES_FOUND
    above = IOBottleneck().evaluate(data([system(MIN15, cpu_iowait_percent=50.5, **gpus(1, 9.5))]))
    assert above.details["bottlenecks"] == 1800 and above.status is Status.ISSUES_FOUND


def test_bottleneck_share_equal_to_threshold_does_not_trigger() -> None:
    # every other sample is a bottleneck, the first one not: the cumulative share never exceeds 50 %
    half = IOBottleneck().evaluate(data([system(MIN15, cpu_iowait_percent=_alternate(1.0, 70.0), **gpus(1, 5.0))]))
    assert half.details["bottleneck_percent"] == 50.0
    assert half.status is Status.NO_ISSUES_FOUND and half.triggers == 0, half.message
    lower = IOBottleneck(threshold=49.5).evaluate(
        data([system(MIN15, cpu_iowait_percent=_alternate(1.0, 70.0), **gpus(1, 5.0))])
    )
    assert lower.status is Status.ISSUES_FOUND


def test_bottleneck_needs_more_than_patience_samples() -> None:
    rule = CPUBottleneck(patience=100)
    exactly = rule.evaluate(data([system(50.0, **HOT, **gpus(1, 5.0))]))
    assert exactly.status is Status.NO_DATA and exactly.datapoints == 100
    one_more = rule.evaluate(data([system(50.5, **HOT, **gpus(1, 5.0))]))
    assert one_more.status is Status.ISSUES_FOUND and one_more.datapoints == 101


def test_a_scan_window_is_judged_only_past_patience_samples() -> None:
    # 150 samples every 0.5 s; the first scan window (49.75 s) ends after exactly 100 of them, the second after all
    scan = {"patience": 100, "scan_interval_us": 49_750_000}
    t0 = system(1).timestamps[0]
    cpu = CPUBottleneck(**scan).evaluate(data([system(75.0, **HOT, **gpus(1, 5.0))]))
    assert cpu.status is Status.ISSUES_FOUND and cpu.triggers == 1
    assert cpu.first_trigger_time == t0 + 2 * 49.75
    gpu = LowGPUUtilization(window=50, **scan).evaluate(data([system(75.0, **gpus(1, 5.0))]))
    assert gpu.status is Status.ISSUES_FOUND and gpu.triggers == 1
    assert gpu.first_trigger_time == t0 + 2 * 49.75


@pytest.mark.parametrize(
    ("cls", "defaults"),
    [
        (CPUBottleneck, {"threshold": 50.0, "cpu_threshold": 90.0, "gpu_threshold": 10.0, "patience": 1000}),
        (IOBottleneck, {"threshold": 50.0, "io_threshold": 50.0, "gpu_threshold": 10.0, "patience": 1000}),
        (LowGPUUtilization, {"threshold_p95": 70.0, "threshold_p5": 10.0, "window": 500, "patience": 1000}),
    ],
)
def test_defaults_are_smdebugs_and_percentages_stay_within_0_and_100(cls: type, defaults: dict) -> None:
    rule = cls()
    assert {k: getattr(rule, k) for k in defaults} == defaults  # smdebug's ProfilerReport rulesconfig
    assert rule.scan_interval_us == 60_000_000
    for key, value in defaults.items():
        if isinstance(value, float):
            assert getattr(cls(**{key: 0}), key) == 0.0 and getattr(cls(**{key: 100}), key) == 100.0
            for bad in (-0.5, 100.5):
                with pytest.raises(ConfigError, match=key):
                    cls(**{key: bad})
        else:
            assert getattr(cls(**{key: 1}), key) == 1
            with pytest.raises(ConfigError, match=key):
                cls(**{key: 0})


def test_bottleneck_counts_the_steps_that_span_a_bottleneck_sample() -> None:
    # bottlenecks (hot CPU, idle GPU) for the first 300 s only; steps of 0.3 s every 0.31 s from T0 + 5
    cpu = {f"cpu{i}_utilization_percent": (lambda t: np.where(t < 300, 95.0, 20.0)) for i in range(4)}
    arrays = system(MIN15, **cpu, **gpus(1, 5.0))
    tab = steps(np.full(2000, 0.3))
    v = CPUBottleneck().evaluate(data([arrays], [tab]))
    instants = arrays.timestamps[arrays.timestamps < T0 + 300]
    start, end = tab.steps["start"][:, None], tab.steps["end"][:, None]
    expected = int(np.any((instants > start) & (instants < end), axis=1).sum())  # a sample strictly inside
    assert 0 < expected < 2000 and v.details["steps_during_bottlenecks"] == expected
    assert v.details["bottlenecks"] == len(instants) == 600


def test_low_gpu_utilization_series_rounds_to_three_decimals() -> None:
    v = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(1, 100.0 / 3))]))
    (series,) = v.series
    assert set(series.y) == {33.333}  # float32 samples of 33.33333…, rounded to 3 decimals
    assert len(series.x) == 15 - 8  # scan windows ending after more than patience=1000 samples (500 s)


def test_bottleneck_judges_only_nodes_with_gpus_and_the_watched_metric() -> None:
    with_gpu = system(MIN15, node="n0", **HOT, **gpus(1, 5.0))
    cpu_only = system(MIN15, node="n1", **HOT)  # no GPU: nothing to starve on this node
    v = CPUBottleneck().evaluate(data([with_gpu, cpu_only]))
    assert v.details["datapoints"] == 1800 and v.details["bottleneck_percent"] == 100.0
    no_iowait = system(MIN15, node="n1", **gpus(1, 5.0))
    keep = [k != "cpu_iowait_percent" for k in no_iowait.keys]
    keys = tuple(k for k in no_iowait.keys if k != "cpu_iowait_percent")
    stripped = type(no_iowait)("n1", no_iowait.timestamps, keys, no_iowait.values[:, keep], 500)
    io = IOBottleneck().evaluate(data([system(MIN15, node="n0", cpu_iowait_percent=70.0, **gpus(1, 5.0)), stripped]))
    assert io.details["datapoints"] == 1800 and io.details["bottleneck_percent"] == 100.0


def test_messages_state_the_observed_values_and_thresholds() -> None:
    low = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(2, 5.0))]))
    assert low.message.startswith("n0/gpu0 underutilised: p95 utilisation 5.0% (threshold_p95 70%), p5 5.0%")
    cpu = CPUBottleneck().evaluate(data([system(MIN15, **HOT, **gpus(1, 5.0))]))
    assert cpu.message == (
        "1800 of 1800 samples (100.0%) had a GPU below 10% while CPU was above 90% (threshold 50% of samples)"
    )


def test_the_jobs_own_cpu_counts_from_exactly_cpu_threshold_of_one_core() -> None:
    for own, expected in ((22.5, 1800), (22.25, 0)):  # x 4 cores: 90 % (the threshold) and 89 % of one core
        arrays = system(MIN15, process_cpu_utilization_percent=own, **HOT, **gpus(1, 5.0))
        assert CPUBottleneck().evaluate(data([arrays])).details["bottlenecks"] == expected, own
