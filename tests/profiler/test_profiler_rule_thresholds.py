"""Profiler rules at their boundaries: the value exactly at a threshold, one sample past patience, the unit factors.

Small synthetic timelines (``profiler_synth``) with every figure worked out by hand; the messages' numbers are
asserted in full.
"""

from __future__ import annotations

import numpy as np
import pytest
from profiler_synth import T0, data, gpus, steps, system

from trainspect.rules.profiler import BatchSize, GPUMemoryIncrease, MaxInitializationTime
from trainspect.rules.profiler._common import boxplot, downsample, job_cpu, pct, window_ends
from trainspect.rules.verdict import Status


# --- shared mechanics ----------------------------------------------------------------------------------------
def test_scan_windows_statistics_and_units() -> None:
    assert window_ends(0.0, 120.0, 60.0).tolist() == [60.0, 120.0]
    assert window_ends(0.0, 120.5, 60.0).tolist() == [60.0, 120.0, 180.0]
    assert window_ends(5.0, 5.0, 60.0).tolist() == [65.0]  # one window at least
    assert MaxInitializationTime(scan_interval_us=30_000_000).scan_s() == 30.0  # µs to s
    assert MaxInitializationTime().scan_s() == 60.0
    assert pct(np.array([np.nan, 0.0, 100.0]), 95) == 95.0 and np.isnan(pct(np.array([np.nan]), 50))
    stats = boxplot(np.array([0.0, 1.0, 2.0, 3.0, 4.0, 100.0, np.nan]))
    assert stats == pytest.approx(
        {"min": 0.0, "max": 100.0, "p25": 1.25, "p50": 2.5, "p75": 3.75, "p95": 76.0, "upper": 7.5, "lower": 0.0}
    )
    assert boxplot(np.array([np.nan])) == {}
    x, y = downsample(np.arange(10.0), np.arange(10.0) / 3, max_points=4)
    assert x == (0.0, 3.0, 6.0, 9.0) and y == (0.0, 1.0, 2.0, 3.0)
    x, y = downsample(np.arange(3.0), np.array([1 / 3, 2 / 3, 1.0]))
    assert x == (0.0, 1.0, 2.0) and y == (0.3333, 0.6667, 1.0)


def test_the_jobs_cpu_is_judged_when_recorded() -> None:
    host = system(2.0, cores=2)
    cpu, own = job_cpu(host)
    assert not own and cpu.tolist() == [20.0] * 4
    shared = system(2.0, cores=2, process_cpu_utilization_percent=5.0)
    cpu, own = job_cpu(shared)
    assert own and cpu.tolist() == [5.0] * 4
    unsampled = system(2.0, cores=2, process_cpu_utilization_percent=np.nan)
    assert not job_cpu(unsampled)[1]


# --- MaxInitializationTime -----------------------------------------------------------------------------------
def test_initialization_must_pass_the_threshold_before_a_window_without_a_step() -> None:
    # 30 s windows from the job start T0; threshold 1.5 min: the window starting at 90 s is not past it
    rule = MaxInitializationTime(threshold=1.5, scan_interval_us=30_000_000)
    at = rule.evaluate(data([system(200.0)], [steps(np.ones(3), start=T0 + 125)]))
    assert at.status is Status.NO_ISSUES_FOUND and at.message == "initialization took 2.08 min (threshold 1.5 min)"
    assert at.details["initialization_s"] == pytest.approx(125.0) and at.details["first_step_start"] == T0 + 125
    rule = MaxInitializationTime(threshold=1.0, scan_interval_us=30_000_000)
    late = rule.evaluate(data([system(200.0)], [steps(np.ones(3), start=T0 + 120)]))
    assert late.status is Status.ISSUES_FOUND and late.triggers == 1 and late.first_trigger_time == T0 + 90
    assert late.datapoints == 3
    in_time = rule.evaluate(data([system(200.0)], [steps(np.ones(3), start=T0 + 119.9)]))
    assert in_time.status is Status.NO_ISSUES_FOUND  # the step came inside the window starting at 90 s


def test_no_step_yet_and_a_job_that_ended_without_one() -> None:
    rule = MaxInitializationTime(threshold=1.0, scan_interval_us=30_000_000)
    waiting = rule.evaluate(data([system(200.0)], [steps(np.zeros(0))], ended=False))
    assert waiting.status is Status.ISSUES_FOUND and waiting.message == "no step yet after 3.3 min (threshold 1 min)"
    assert waiting.triggers == 4 and waiting.details["initialization_s"] is None  # windows at 90, 120, 150, 180 s
    short = MaxInitializationTime(threshold=5.0, scan_interval_us=30_000_000)
    assert short.evaluate(data([system(200.0)], [steps(np.zeros(0))], ended=False)).status is Status.NO_ISSUES_FOUND
    ended = short.evaluate(data([system(200.0)], [steps(np.zeros(0))], ended=True))
    assert ended.status is Status.NO_DATA and ended.message == "the job ended without a step after 3.3 min"
    assert MaxInitializationTime().evaluate(data([system(10.0)])).status is Status.NO_DATA


# --- BatchSize -----------------------------------------------------------------------------------------------
def test_batch_size_thresholds_are_strict_and_the_message_counts_violations() -> None:
    rule = BatchSize(window=4, patience=4)
    small = rule.evaluate(data([system(10.0, cores=1, cpu0_utilization_percent=69.9, **gpus(2, 69.9, 69.9))]))
    assert small.status is Status.ISSUES_FOUND and small.triggers == 2  # both GPUs, in the one scan window
    assert small.message == ("2 violation(s): total CPU p95 < 70% while GPU p95 < 70% and GPU memory p95 < 70%")
    for cpu, util, mem in ((70.0, 69.9, 69.9), (69.9, 70.0, 69.9), (69.9, 69.9, 70.0)):
        arrays = system(10.0, cores=1, cpu0_utilization_percent=cpu, **gpus(1, util, mem))
        v = rule.evaluate(data([arrays]))
        assert v.status is Status.NO_ISSUES_FOUND, (cpu, util, mem)
    assert v.message == ("no GPU had utilisation p95 < 70% and memory p95 < 70% while the total CPU p95 was < 70%")


def test_batch_size_needs_more_samples_than_window_and_patience() -> None:
    rule = BatchSize(window=3, patience=4)
    few = rule.evaluate(data([system(2.0, cores=1, cpu0_utilization_percent=10.0, **gpus(1, 10.0, 10.0))]))
    assert few.status is Status.NO_DATA
    assert few.message == "too little data: 4 samples; the rule needs more than 4 (window, patience)"
    enough = rule.evaluate(data([system(2.5, cores=1, cpu0_utilization_percent=10.0, **gpus(1, 10.0, 10.0))]))
    assert enough.status is Status.ISSUES_FOUND and enough.datapoints == 5


# --- GPUMemoryIncrease ---------------------------------------------------------------------------------------
def test_a_jump_must_pass_the_increase_after_patience() -> None:
    mem = np.array([10.0, 10.0, 15.0, 20.5, 20.5, 20.5])
    arrays = system(3.0, cores=1, **gpus(1, 50.0, mem))
    rule = GPUMemoryIncrease(window=1, patience=1, increase=5.0, memory_source="device")
    v = rule.evaluate(data([arrays]))
    assert v.status is Status.ISSUES_FOUND and v.triggers == 1 and v.first_trigger_time == T0 + 1.5
    assert v.message == (
        "largest increase of the 1-sample moving average of whole-device memory (NVML): 5.50 points on n0/gpu0 "
        "(threshold 5); 1 violation(s)"
    )
    assert v.details["n0/gpu0"]["violations"] == 1 and v.details["n0/gpu0"]["increase"] == 5.5
    late = GPUMemoryIncrease(window=1, patience=4, increase=5.0, memory_source="device").evaluate(data([arrays]))
    assert late.status is Status.NO_ISSUES_FOUND  # the jump at sample 3 comes before more than 4 samples
    two = GPUMemoryIncrease(window=2, patience=1, increase=2.75, memory_source="device").evaluate(data([arrays]))
    # 2-sample means 10, 12.5, 17.75, 20.5, 20.5: rises 2.5, 5.25, 2.75; sample 2 is the first full comparison
    assert two.triggers == 1 and two.first_trigger_time == T0 + 1.5


def test_gpu_memory_needs_more_samples_than_patience() -> None:
    arrays = system(2.0, cores=1, **gpus(1, 50.0, 10.0))
    v = GPUMemoryIncrease(window=1, patience=4, memory_source="device").evaluate(data([arrays]))
    assert v.status is Status.NO_DATA
    assert v.message == "too little data: 4 GPU memory samples; the rule needs more than patience=4"
    assert GPUMemoryIncrease(window=1, patience=3, memory_source="device").evaluate(data([arrays])).datapoints == 4
