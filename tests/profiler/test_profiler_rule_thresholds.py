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
    assert small.details["n0"]["gpu1_memory"]["p95"] == pytest.approx(69.9) and small.details["n0"]["cpu"][
        "max"
    ] == pytest.approx(69.9)
    (series,) = small.series
    assert series.label == "n0 total CPU p95 (%)" and series.y == pytest.approx((69.9,)) and series.threshold == 70.0
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


# --- Dataloader ----------------------------------------------------------------------------------------------
def _loader_seconds(seconds: int, workers: int, pids: list[int] | None = None) -> object:
    tab = steps(np.zeros(0))
    per = len(pids) if pids else 1
    start = T0 + np.repeat(np.arange(seconds, dtype=np.float64), per) + 0.25
    n = len(start)
    tab.spans = {
        "kind": np.full(n, 4, np.uint8),
        "start": start,
        "end": start + 0.1,
        "global_step": np.full(n, -1, np.int64),
        "workers": np.full(n, workers, np.int16),
        "pid": np.tile(np.asarray(pids or [1], np.int64), seconds),
    }
    return tab


def test_loader_counts_per_second() -> None:
    from trainspect.rules.profiler.dataloader import parallel_loaders

    assert set(parallel_loaders(_loader_seconds(3, 4)).values()) == {4}
    assert set(parallel_loaders(_loader_seconds(2, 0)).values()) == {1}  # loading in the main process: one
    assert parallel_loaders(_loader_seconds(2, -1, pids=[7, 8, 8])) == {int(T0): 2, int(T0) + 1: 2}  # distinct pids


@pytest.mark.parametrize(("workers", "bad"), [(2, True), (3, False), (8, False), (9, True)])
def test_loader_count_bounds_are_strict(workers: int, bad: bool) -> None:
    from trainspect.rules.profiler import Dataloader

    rule = Dataloader(literal=True, patience=10)  # 4 cores: fewer than 2.8 or more than 8 loaders
    v = rule.evaluate(data([system(20.0, cores=4)], [_loader_seconds(11, workers)]))
    assert (v.status is Status.ISSUES_FOUND) is bad and v.triggers == int(bad)
    assert v.message == (
        f"n0: median {workers} loader(s) for 4 cores (allowed 2.8-8: min_threshold 70%, max_threshold 200%)"
    )
    assert v.details["n0"] == {"cores": 4, "dataloaders": workers, "min_loaders": 2.8, "max_loaders": 8.0}
    (series,) = v.series
    assert series.label == "n0 parallel data loaders" and set(series.y) == {workers} and len(series.y) == 11


def test_loader_rule_needs_more_seconds_than_patience() -> None:
    from trainspect.rules.profiler import Dataloader

    v = Dataloader(literal=True, patience=10).evaluate(data([system(20.0, cores=4)], [_loader_seconds(10, 2)]))
    assert v.status is Status.NO_DATA
    assert v.message == "too little data: 10 seconds with dataloader activity; needs > 10"


# --- LoadBalancing -------------------------------------------------------------------------------------------
def test_load_balancing_distance_must_pass_the_threshold() -> None:
    from trainspect.rules.profiler import LoadBalancing
    from trainspect.rules.profiler.load_balancing import EDGES, js_distance

    low, high = np.histogram([10.0] * 6, EDGES)[0], np.histogram([90.0] * 6, EDGES)[0]
    d = js_distance(low.astype(float), high.astype(float))
    assert d == pytest.approx(np.sqrt(np.log(2))) and js_distance(low.astype(float), low.astype(float)) == 0.0
    assert np.histogram([100.0], EDGES)[0][-1] == 1  # the last bin holds 100 %
    arrays = system(3.0, cores=1, gpu0_utilization_percent=10.0, gpu1_utilization_percent=90.0)
    at = LoadBalancing(threshold=d, patience=5).evaluate(data([arrays]))
    assert at.status is Status.NO_ISSUES_FOUND
    assert at.message == f"largest Jensen-Shannon distance {d:.3f} (n0: gpu0 vs gpu1), threshold {d:g}"
    past = LoadBalancing(threshold=0.83, patience=5).evaluate(data([arrays]))
    assert past.status is Status.ISSUES_FOUND and past.triggers == 1
    few = LoadBalancing(threshold=0.5, patience=6).evaluate(data([arrays]))
    assert few.status is Status.NO_DATA
    assert few.message == "too little data: 6 GPU samples; the rule needs more than patience=6"


# --- OverallFrameworkMetrics ---------------------------------------------------------------------------------
def test_framework_breakdown_names_the_time_between_steps_and_operators_over_two_percent() -> None:
    import pandas as pd

    from trainspect.profiler.detailed import OPERATOR_COLUMNS
    from trainspect.rules.profiler import OverallFrameworkMetrics

    tab = steps(np.array([1.5, 1.5]), gap=1.0, start=T0)  # loop 4 s, 1 s between steps: exactly 25 %
    n = 2
    tab.spans = {
        "kind": np.array([1, 2], np.uint8),
        "start": T0 + np.array([0.0, 0.5]),
        "end": T0 + np.array([0.5, 1.5]),
        "global_step": np.full(n, -1, np.int64),
        "workers": np.full(n, -1, np.int16),
        "pid": np.zeros(n, np.int64),
    }
    d = data([], [tab])
    d.operators = pd.DataFrame(
        [
            ["worker_0", 0, 1, "cpu", "mm", 1, 97.0, 97.0],
            ["worker_0", 0, 1, "cpu", "add", 1, 2.0, 2.0],  # exactly 2 %: left out
            ["worker_0", 0, 1, "cpu", "relu", 1, 1.0, 1.0],
        ],
        columns=OPERATOR_COLUMNS,
    )
    v = OverallFrameworkMetrics().evaluate(d)
    assert v.status is Status.NO_ISSUES_FOUND and v.datapoints == 2
    assert v.message == "25.0% of the training loop was spent outside steps; forward 33% / backward 67%"
    assert v.details["CPU"] == {"mm": 100.0} and v.details["CPU_total"] == {"mm": 97.0}
    assert v.details["forward_backward"] == pytest.approx({"forward": 100 / 3, "backward": 200 / 3})
    longer = steps(np.array([1.0, 1.0]), gap=1.0, start=T0)  # 1 of 3 s between steps
    v = OverallFrameworkMetrics().evaluate(data([], [longer]))
    assert (
        v.message == "33.3% of the training loop was spent outside steps (more than 25%: check the time between steps)"
    )
    assert OverallFrameworkMetrics().evaluate(data()).status is Status.NO_DATA


# --- StepOutlier ---------------------------------------------------------------------------------------------
def _stalled_run(stalls: dict[int, float], n: int = 101, base: float = 0.1) -> object:
    durations = np.full(n, base)
    for i, d in stalls.items():
        durations[i] = d
    return data([], [steps(durations, gap=0.0)])


def test_step_outliers_cost_a_share_of_the_loop_past_its_thresholds() -> None:
    from trainspect.rules.profiler import StepOutlier

    run = _stalled_run({50: 2.1, 51: 2.1})  # 99 steps of 0.1 s and two of 2.1 s: a 14.1 s loop
    v = StepOutlier().evaluate(run)
    assert v.status is Status.ISSUES_FOUND and v.triggers == 2 and v.datapoints == 101
    assert v.message == (
        "worker_0/TRAIN: 2 step(s) longer than median 100 ms + 5·MAD (105 ms), 2 of them stalls (> min_step_excess_s "
        "0.05 s over the median) or in a sustained slowdown; after the first 2 (warm-up) they cost 4 s, 28.4% of the "
        "14.1 s training loop (triggers above min_lost_percent 20% and min_excess_s 0.5 s)"
    )
    d = v.details["worker_0/TRAIN"]
    assert d["number_of_outliers"] == 2 and d["step_numbers"] == [50, 51] and d["stall_step_numbers"] == [50, 51]
    assert d["step_stats"] == pytest.approx(
        {"mean": 14.1 / 101, "max": 2.1, "p99": 2.1, "p95": 0.1, "p50": 0.1, "min": 0.1}, rel=1e-5
    )
    lost, excess = d["lost_percent"], d["excess_s"]
    assert lost == pytest.approx(400 / 14.1, rel=1e-5) and excess == pytest.approx(4.0, rel=1e-5)
    assert StepOutlier(min_lost_percent=lost).evaluate(run).triggers == 0  # exactly the share: not more
    assert StepOutlier(min_excess_s=excess).evaluate(run).triggers == 0
    assert StepOutlier(min_lost_percent=lost - 0.01, min_excess_s=excess - 0.01).evaluate(run).triggers == 2


def test_warm_up_steps_and_short_outliers_cost_nothing() -> None:
    from trainspect.rules.profiler import StepOutlier

    warm = StepOutlier().evaluate(_stalled_run({0: 9.0, 1: 9.0}))
    assert warm.triggers == 0 and warm.details["worker_0/TRAIN"]["excess_s"] == 0.0
    assert StepOutlier(warmup_steps=1).evaluate(_stalled_run({0: 9.0, 1: 9.0})).triggers == 2
    # steps of 1/8 s, two of 1/4 s (binary fractions: exact times): 1/8 s over the median, no more
    quick = _stalled_run({50: 0.25, 60: 0.25}, base=0.125)
    short = StepOutlier(min_lost_percent=0.0, min_excess_s=0.0, min_step_excess_s=0.125).evaluate(quick)
    assert short.details["worker_0/TRAIN"]["number_of_outliers"] == 2 and short.triggers == 0  # not a stall
    longer = StepOutlier(min_lost_percent=0.0, min_excess_s=0.0, min_step_excess_s=0.124).evaluate(quick)
    assert longer.triggers == 2


def test_step_outlier_needs_more_than_a_hundred_steps() -> None:
    from trainspect.rules.profiler import StepOutlier

    v = StepOutlier().evaluate(_stalled_run({50: 2.1}, n=100))
    assert v.status is Status.NO_DATA
    assert v.message == "too little data: 100 steps per worker and mode; the rule needs more than 100"


# --- InputBottleneck -----------------------------------------------------------------------------------------
def _waiting_worker(n: int, wait: float = 0.5) -> object:
    tab = steps(np.full(n, 0.25), gap=0.75)  # a step every second (binary fractions: exact times)
    starts = tab.steps["start"]
    tab.spans = {
        "kind": np.full(n, 4, np.uint8),
        "start": starts - wait,
        "end": starts.copy(),  # each wait ends as its step starts: it delays that step's cycle
        "global_step": np.full(n, -1, np.int64),
        "workers": np.full(n, 2, np.int16),
        "pid": np.zeros(n, np.int64),
    }
    return tab


def test_input_wait_share_must_pass_the_threshold() -> None:
    from trainspect.rules.profiler import InputBottleneck

    at = InputBottleneck(threshold=50.0, patience=10).evaluate(data([], [_waiting_worker(12)]))
    assert at.status is Status.NO_ISSUES_FOUND and at.datapoints == 11
    assert at.message == (
        "worker_0: 50.0% of the step cycle waited for input (5.50 s of 11.00 s over 11 steps, DataLoader "
        "num_workers=2; threshold 50%)"
    )
    assert at.details["worker_0"]["input_wait_percent"] == 50.0 and at.details["worker_0"]["cycles"] == 11
    past = InputBottleneck(threshold=49.9, patience=10).evaluate(data([], [_waiting_worker(12)]))
    assert past.status is Status.ISSUES_FOUND and past.triggers == 11
    assert (past.first_trigger_step, past.last_trigger_step, past.mode) == (1, 11, "TRAIN")


def test_input_bottleneck_needs_more_cycles_than_patience() -> None:
    from trainspect.rules.profiler import InputBottleneck

    v = InputBottleneck(patience=10).evaluate(data([], [_waiting_worker(11, wait=0.75)]))
    assert v.status is Status.NO_DATA
    assert v.message == "too little data: 10 step cycles; the rule needs more than patience=10"


def test_gpu_rules_say_what_is_missing() -> None:
    assert BatchSize().evaluate(data()).message == (
        "no system metrics were recorded (CPU-only run, or NVML unavailable): this rule needs GPU utilisation"
    )
    assert BatchSize().evaluate(data([system(2.0)])).message == (
        "the run recorded no GPU metrics (CPU-only run, or NVML unavailable): this rule needs GPU utilisation"
    )


def test_gpu_memory_of_the_job_is_judged_where_recorded() -> None:
    mem = np.array([10.0, 10.0, 10.0, 20.0, 20.0, 20.0])
    arrays = system(3.0, cores=1, gpu0_process_memory_used_percent=mem, **gpus(1, 50.0, 90.0))
    v = GPUMemoryIncrease(window=1, patience=1, increase=5.0).evaluate(data([arrays]))
    assert v.triggers == 1 and v.details["n0/gpu0"]["source"] == "process"
    assert "moving average of this job's processes' memory (NVML): 10.00 points" in v.message
    device = GPUMemoryIncrease(window=1, patience=1, increase=5.0, memory_source="device").evaluate(data([arrays]))
    assert device.triggers == 0 and device.details["n0/gpu0"]["source"] == "device"


def test_profiler_rule_defaults() -> None:
    from trainspect.rules.profiler import Dataloader, InputBottleneck, LoadBalancing, StepOutlier, WorkerStraggler

    expected = {
        InputBottleneck: {"threshold": 50.0, "patience": 10},
        BatchSize: {
            "cpu_threshold_p95": 70.0,
            "gpu_threshold_p95": 70.0,
            "gpu_memory_threshold_p95": 70.0,
            "patience": 1000,
            "window": 500,
        },
        GPUMemoryIncrease: {"increase": 5.0, "patience": 1000, "window": 10, "memory_source": "job"},
        LoadBalancing: {"threshold": 0.5, "patience": 1000},
        MaxInitializationTime: {"threshold": 20.0, "scan_interval_us": 60_000_000},
        StepOutlier: {
            "stddev": 3.0,
            "n_outliers": 10,
            "mad_factor": 5.0,
            "min_lost_percent": 20.0,
            "min_excess_s": 0.5,
            "min_step_excess_s": 0.05,
            "warmup_steps": 2,
        },
        WorkerStraggler: {"threshold": 20.0, "min_steps": 10, "measure": "compute"},
        Dataloader: {"min_threshold": 70.0, "max_threshold": 200.0, "patience": 10, "min_wait_percent": 10.0},
    }
    for cls, defaults in expected.items():
        rule = cls()
        assert {k: getattr(rule, k) for k in defaults} == defaults, cls.__name__


# --- WorkerStraggler, OverallSystemUsage ---------------------------------------------------------------------
def _ranks(*step_s: float) -> object:
    # one step a second per worker (binary fractions: exact times), no synchronisation waits recorded
    return data([], [steps(np.full(12, s), worker=f"worker_{i}", gap=1.0 - s) for i, s in enumerate(step_s)])


def test_a_rank_straggles_past_the_threshold_of_the_others_own_time() -> None:
    from trainspect.rules.profiler import WorkerStraggler

    v = WorkerStraggler(threshold=20.0).evaluate(_ranks(0.5, 0.5, 0.75))
    assert v.status is Status.ISSUES_FOUND and v.workers == ("worker_2",)
    assert v.message == (
        "worker_2 computes 50 % longer per step than the median of the other ranks (750 ms vs 500 ms; threshold 20 %); "
        "no synchronisation waits were recorded, so compute is the whole step"
    )
    compute, loader = v.series
    assert compute.y == (0.5, 0.5, 0.75) and compute.trigger_x == (2.0,) and loader.trigger_x == ()
    at = WorkerStraggler(threshold=25.0).evaluate(_ranks(0.5, 0.5, 0.75))  # 250 ms is 25 % of 1 s: not more
    assert at.status is Status.NO_ISSUES_FOUND
    assert at.message.startswith("no straggler among 3 workers (median compute 500 ms per step, data-loader wait 0 s")


def test_time_between_steps_is_a_share_of_the_others_own_time() -> None:
    from trainspect.rules.profiler import WorkerStraggler

    v = WorkerStraggler(threshold=20.0).evaluate(_ranks(0.5, 0.75))  # worker_0 spends 0.5 s between its steps
    assert v.workers == ("worker_0",)
    assert v.message.startswith(
        "worker_0 spends 500 ms per step between steps outside the data loader, the other rank 250 ms: every step "
        "waits 250 ms for it, 25 % of the others' own time per step (threshold 20 %)"
    )
    few = WorkerStraggler(min_steps=12).evaluate(_ranks(0.5, 0.75))
    assert few.status is Status.NO_DATA and few.message.startswith("0 worker(s) with at least 12 step cycles")


def test_system_usage_statistics_and_narrative() -> None:
    from trainspect.rules.profiler import OverallSystemUsage

    arrays = system(2.0, cores=1, cpu0_utilization_percent=12.345, cpu_memory_used_percent=-1.0, **gpus(1, 70.0, 40.0))
    v = OverallSystemUsage().evaluate(data([arrays]))
    assert v.details["CPU"]["n0"] == {"max": 12.35, "p99": 12.35, "p95": 12.35, "p50": 12.35, "min": 12.35}
    assert v.details["CPU memory"]["n0"]["min"] == 0.0  # clamped at 0
    assert v.message == "n0: GPU p50 70.0%, CPU p50 12.3%."  # GPU p95 at 70 %: not underused, p50 not above it
    under = OverallSystemUsage().evaluate(data([system(2.0, cores=1, cpu0_utilization_percent=10.0, **gpus(1, 69.0))]))
    assert under.message == "n0: GPU p95 69.0% and CPU p95 10.0% are below 70%: underutilised."
    well = OverallSystemUsage().evaluate(data([system(2.0, cores=1, **gpus(1, 70.5))]))
    assert well.message == "n0: GPU p50 70.5% above 70%: well utilised."
    bottleneck = OverallSystemUsage().evaluate(
        data([system(2.0, cores=1, cpu0_utilization_percent=70.0, **gpus(1, 9.0))])
    )
    assert bottleneck.message == "n0: GPU p95 9.0% below 70% with CPU p95 70.0%: a CPU bottleneck is likely."
    cpu_only = OverallSystemUsage().evaluate(data([system(2.0, cores=1)]))
    assert cpu_only.message == "n0: CPU p95 20.0%, p50 20.0% (no GPU)."
    assert OverallSystemUsage().evaluate(data()).status is Status.NO_DATA


def test_batch_size_series_rounds_to_three_decimals_and_accepts_a_patience_of_one() -> None:
    arrays = system(10.0, cores=1, cpu0_utilization_percent=12.3456, **gpus(1, 90.0, 90.0))
    (series,) = BatchSize(window=4, patience=4).evaluate(data([arrays])).series
    assert series.y == (12.346,)
    assert BatchSize(window=1, patience=1).patience == 1


def test_literal_outliers_of_every_prefix_are_the_brute_force_ones() -> None:
    from trainspect.rules.profiler._prefix_outliers import PrefixOutliers

    rng = np.random.default_rng(3)
    dur = rng.gamma(4.0, 0.05, 4000)
    dur[rng.integers(0, 4000, 40)] += rng.uniform(0.5, 2.0, 40)
    scan = PrefixOutliers(dur, 3.0)
    for n in (1500, 2200, 3100, 4000):
        d = dur[:n]
        idx = np.flatnonzero(d > d.mean() + 3.0 * d.std())
        for k in (0, 1, 5, 30):
            assert scan.nth_outlier(n, k) == (int(idx[k]) if len(idx) > k else None), (n, k)
    assert scan.exact < 16  # the prefix sums answered most windows


# --- survivors of the first mutation pass: edges of the profiler rules ---------------------------------------
def test_between_steps_share_is_stated_in_percent() -> None:
    from trainspect.rules.profiler import WorkerStraggler

    v = WorkerStraggler().evaluate(_ranks(0.25, 0.875))  # worker_0 spends 0.75 s between steps, worker_1 0.125 s
    assert v.workers == ("worker_0",)
    assert "every step waits 625 ms for it, 62 % of the others' own time per step (threshold 20 %)" in v.message


def test_framework_metrics_need_steps_or_spans_and_list_operators_over_two_percent() -> None:
    import pandas as pd

    from trainspect.profiler.arrays import FrameworkTables
    from trainspect.profiler.detailed import OPERATOR_COLUMNS
    from trainspect.rules.profiler import OverallFrameworkMetrics

    assert OverallFrameworkMetrics().evaluate(data([], [FrameworkTables("w")])).status is Status.NO_DATA
    d = data([], [steps(np.ones(2), gap=1.0, start=T0)])
    d.operators = pd.DataFrame(
        [
            ["worker_0", 0, 1, "cpu", "mm", 1, 95.5, 95.5],
            ["worker_0", 0, 1, "cpu", "mul", 1, 2.5, 2.5],
            ["worker_0", 0, 1, "cpu", "add", 1, 2.0, 2.0],
        ],
        columns=OPERATOR_COLUMNS,
    )
    v = OverallFrameworkMetrics().evaluate(d)
    assert v.details["CPU"] == pytest.approx({"mm": 100 * 95.5 / 98.0, "mul": 100 * 2.5 / 98.0})


def test_a_job_that_ended_before_its_threshold_without_a_step_has_no_verdict() -> None:
    # windows at 0-180 s: the last one ends at 210 s; a 200 s threshold was reachable, a 210 s one was not
    ended = data([system(200.0)], [steps(np.zeros(0))], ended=True)
    reachable = MaxInitializationTime(threshold=200 / 60, scan_interval_us=30_000_000).evaluate(ended)
    assert reachable.status is Status.NO_ISSUES_FOUND and reachable.message.startswith("no step yet after 3.3 min")
    too_short = MaxInitializationTime(threshold=210 / 60, scan_interval_us=30_000_000).evaluate(ended)
    assert too_short.status is Status.NO_DATA


def test_a_gpu_with_one_sample_is_compared() -> None:
    from trainspect.rules.profiler import LoadBalancing

    one = np.full(6, np.nan)
    one[0] = 90.0
    arrays = system(3.0, cores=1, gpu0_utilization_percent=10.0, gpu1_utilization_percent=one)
    v = LoadBalancing(patience=5).evaluate(data([arrays]))
    assert v.details["n0"]["distances"]["gpu0"]["gpu1"] == pytest.approx(np.sqrt(np.log(2)), abs=1e-4)


def test_input_wait_median_share_per_cycle() -> None:
    from trainspect.rules.profiler import InputBottleneck

    tab = _waiting_worker(12)
    tab.spans["start"][1:7] += 0.25  # cycles 1-6 wait 0.25 s (25 %), cycles 7-11 wait 0.5 s (50 %)
    d = InputBottleneck(patience=10).evaluate(data([], [tab])).details["worker_0"]
    assert d["p50_wait_percent"] == 25.0 and d["p50_wait_s"] == 0.25 and d["cycles"] == 11


def test_gpu_memory_columns_without_utilisation_are_judged_and_any_increase_may_be_set() -> None:
    arrays = system(3.0, cores=1, gpu0_memory_used_percent=np.array([10.0, 10.0, 10.0, 20.0, 20.0, 20.0]))
    v = GPUMemoryIncrease(window=1, patience=1, memory_source="device").evaluate(data([arrays]))
    assert v.triggers == 1 and list(v.details) == ["n0/gpu0"]
    assert GPUMemoryIncrease(increase=0).increase == 0.0


def test_batch_size_judges_the_95th_percentile_of_the_window() -> None:
    cpu = np.full(22, 50.0)
    cpu[-2:] = 100.0  # the last 21 samples: 19 at 50 %, 2 at 100 %: p95 100 %, p90 50 %
    arrays = system(11.0, cores=1, cpu0_utilization_percent=cpu, **gpus(1, 10.0, 10.0))
    v = BatchSize(window=21, patience=21).evaluate(data([arrays]))
    assert v.status is Status.NO_ISSUES_FOUND and v.series[0].y == (100.0,)


def test_exactly_the_minimum_share_of_loaders_is_enough() -> None:
    from trainspect.rules.profiler import Dataloader

    rule = Dataloader(literal=True, patience=10)  # 10 cores: at least 7 loaders
    assert rule.evaluate(data([system(20.0, cores=10)], [_loader_seconds(11, 7)])).status is Status.NO_ISSUES_FOUND
    assert rule.evaluate(data([system(20.0, cores=10)], [_loader_seconds(11, 6)])).status is Status.ISSUES_FOUND
