"""Figures and boundaries of the profiler analyses and rules that hand-made mutants showed no other test pins.

Each test below was written against a small, realistic slip in the code that the rest of the suite let through:
a ``min`` where the docstring says earliest, the last element taken for the maximum, a boundary moved from ``>`` to
``>=``, a percentile or a divisor changed, a count in a message taken from the wrong list. Every expected value is
worked out by hand from a tiny synthetic timeline (times chosen binary-exact where a boundary is tested), and each
assertion states the documented behaviour (the rules' and analyses' docstrings, docs/rules.md and docs/profiler.md):

* analyses: job phases over several workers, utilisation mean, step-duration histogram default, phase shares,
  Python hotspots' order, the training loader of the chief, data-loader and CUDA-memory figures, heatmap thinning,
  rank step cycles that add up to the cycle;
* readers: system files' time span, Chrome-trace B/E pairs and absolute times, the ``window`` query's bounds, the
  metric catalogue's unit of a ``_seconds`` key;
* rules: message counts and shares of the bottleneck rules, LowGPUUtilization's p5 and worst GPU, StepOutlier's
  scaled MAD, strict threshold, sustained share, 100-step limit and loop, BatchSize's window, Dataloader's median,
  patience and missing step timings, GPUMemoryIncrease's first compared sample, LoadBalancing's patience and
  cross-node threshold, OverallSystemUsage's network sum, InputBottleneck's cycles and trigger steps,
  WorkerStraggler's reference medians and explained-away boundary.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_synth import T0, data, steps, system
from synthetic_run import write_steps, write_system

from trainspect.exceptions import TrainspectError
from trainspect.hooks.framework_metrics import FrameworkRecorder
from trainspect.profiler import window
from trainspect.profiler.analysis import (
    cuda_memory_statistics,
    dataloader_statistics,
    job_statistics,
    phase_ratios,
    python_hotspots,
    step_histogram,
    training_loader,
    training_loader_of,
    utilization_statistics,
)
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.detailed import OPERATOR_COLUMNS, PYTHON_COLUMNS
from trainspect.profiler.heatmap import heatmap
from trainspect.profiler.metrics import CATALOGUE
from trainspect.profiler.ranks import step_cycles
from trainspect.profiler.system_window import SystemFileWindow
from trainspect.profiler.traces import parse_trace
from trainspect.profiler.writers import SystemChunkWriter
from trainspect.rules.profiler import (
    BatchSize,
    CPUBottleneck,
    Dataloader,
    GPUMemoryIncrease,
    InputBottleneck,
    LoadBalancing,
    LowGPUUtilization,
    OverallFrameworkMetrics,
    OverallSystemUsage,
    StepOutlier,
    WorkerStraggler,
)
from trainspect.rules.profiler._common import boxplot
from trainspect.rules.profiler.load_balancing import EDGES, js_distance
from trainspect.rules.verdict import Status
from trainspect.store.layout import RunLayout


# --- builders ----------------------------------------------------------------------------------------------------
def _tab(
    starts: list[float],
    ends: list[float],
    modes: list[int] | None = None,
    worker: str = "worker_0",
    node: str = "n0",
    base: float = T0,
) -> FrameworkTables:
    """A worker whose steps start and end at ``base +`` the given seconds (sorted by start)."""
    tab = FrameworkTables(worker, node)
    n = len(starts)
    tab.steps = {
        "mode": np.asarray(modes if modes is not None else [1] * n, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": base + np.asarray(starts, dtype=np.float64),
        "end": base + np.asarray(ends, dtype=np.float64),
    }
    return tab


def _with_spans(
    tab: FrameworkTables,
    kinds: list[int],
    starts: list[float],
    ends: list[float],
    glob: list[int] | None = None,
    workers: list[int] | None = None,
    base: float = T0,
) -> FrameworkTables:
    n = len(kinds)
    tab.spans = {
        "kind": np.asarray(kinds, np.uint8),
        "start": base + np.asarray(starts, dtype=np.float64),
        "end": base + np.asarray(ends, dtype=np.float64),
        "global_step": np.asarray(glob if glob is not None else [-1] * n, np.int64),
        "workers": np.asarray(workers if workers is not None else [-1] * n, np.int16),
        "pid": np.zeros(n, np.int64),
    }
    return tab


# --- job_statistics ----------------------------------------------------------------------------------------------
def test_job_phases_over_workers_run_from_the_earliest_start_to_the_latest_end() -> None:
    # worker_0: a long TRAIN step 10-16 with a short EVAL step 11-12 inside it (so the last step to start is not the
    # last to end); worker_1 starts its loop later, closes later, and its process started later
    a = _tab([10, 11], [16, 12], [1, 2])
    a.process_start, a.job_start, a.close_time = T0 - 100, T0, T0 + 20
    b = _tab([12, 13], [13, 14], worker="worker_1")
    b.process_start, b.job_start, b.close_time = T0 - 50, T0, T0 + 25
    stats = job_statistics(data([], [a, b]))
    assert stats["start"] == T0 and stats["end"] == T0 + 25 and stats["duration_s"] == 25.0
    assert stats["process_start"] == T0 - 100 and stats["before_job_s"] == 100.0  # the earliest process
    assert stats["training_loop_start"] == T0 + 10 and stats["training_loop_end"] == T0 + 16
    assert (stats["initialization_s"], stats["training_loop_s"], stats["finalization_s"]) == (10.0, 6.0, 9.0)
    assert stats["finalization_percent"] == pytest.approx(36.0)  # to the last worker's close


# --- utilization_statistics, step_histogram, phase_ratios --------------------------------------------------------
def test_utilisation_mean_is_the_mean_not_the_median() -> None:
    arrays = system(2.0, cores=1, cpu0_utilization_percent=np.array([0.0, 0.0, 0.0, 100.0]))
    row = utilization_statistics(data([arrays])).set_index("metric").loc["cpu0_utilization_percent"]
    assert (row["mean"], row["p50"], row["max"]) == (25.0, 0.0, 100.0)


def test_step_histogram_has_fifty_bins_by_default() -> None:
    frame = step_histogram(data([], [steps(np.arange(1.0, 11.0))]))
    assert len(frame) == 50 and frame["count"].sum() == 10
    assert frame["bin_start"].iloc[0] == 1.0 and frame["bin_end"].iloc[-1] == 10.0


def test_phase_shares_take_the_loop_to_the_latest_step_end() -> None:
    tab = _tab([0, 3], [5, 4], [1, 2])  # the EVAL step starts last but ends before the TRAIN step: loop 0-5 s
    out = phase_ratios(data([], [tab]))
    assert out["modes"] == pytest.approx({"train": 100.0, "eval": 20.0, "other": 0.0})


# --- python_hotspots, loaders, dataloader and CUDA memory figures ------------------------------------------------
def test_python_hotspots_rank_by_own_time_not_cumulative_time() -> None:
    d = data()
    d.python_stats = pd.DataFrame(
        [
            ["worker_0", 0, 5, "train", "/home/me/train.py", 1, 1, 1.0, 10.0],  # calls everything: cumulative
            ["worker_0", 0, 5, "decode", "/home/me/data.py", 7, 50, 2.0, 3.0],  # the most own time
        ],
        columns=PYTHON_COLUMNS,
    )
    assert python_hotspots(d, n=1)["function"].tolist() == ["decode"]


def test_a_loader_recorded_as_its_first_wait_begins_feeds_that_wait() -> None:
    tab = _with_spans(_tab([0, 2], [1, 3]), [4], [1.5], [1.8], workers=[4])
    tab.loaders = [
        {"time": T0 - 1, "num_workers": 0, "batch_size": 8},
        {"time": T0 + 1.5, "num_workers": 4, "batch_size": 32},
    ]
    assert training_loader_of(tab) == {"num_workers": 4, "batch_size": 32}


def test_a_wait_outlasting_the_step_it_began_with_fed_the_next_step() -> None:
    tab = _tab([0, 2], [1, 3], [2, 1])  # an EVAL step, then a TRAIN step
    # the first wait starts with the EVAL step and ends after it: it does not lie in it, so it fed the TRAIN step
    tab = _with_spans(tab, [4, 4], [0.0, 0.25], [1.5, 0.5], workers=[6, 0])
    assert training_loader_of(tab) == {"num_workers": 6, "batch_size": None}


def test_the_training_loader_is_the_chiefs_whatever_the_order_read() -> None:
    other = _with_spans(_tab([0, 2], [1, 3], worker="worker_1"), [4], [1.5], [1.8], workers=[2])
    chief = _with_spans(_tab([0, 2], [1, 3]), [4], [1.5], [1.8], workers=[4])
    assert training_loader(data([], [other, chief])) == {"num_workers": 4, "batch_size": None}


def test_dataloader_statistics_max_is_the_longest_wait_not_the_last() -> None:
    tab = _with_spans(_tab([0, 2, 4], [1, 3, 5]), [4, 4], [1.25, 3.75], [1.75, 3.875])
    row = dataloader_statistics(data([], [tab])).iloc[0]
    assert row["max_s"] == pytest.approx(0.5) and row["total_s"] == pytest.approx(0.625)


def test_cuda_memory_first_allocation_and_peak_over_the_steps() -> None:
    tab = _tab([0, 1, 2], [0.5, 1.5, 2.5])
    tab.step_metrics = {
        "global_step": np.arange(3, dtype=np.int64),
        "time": T0 + np.arange(3.0),
        "gpu0_memory_allocated_bytes": np.array([200.0, 100.0, 300.0]),
        "gpu0_memory_peak_allocated_bytes": np.array([500.0, 400.0, np.nan]),
    }
    row = cuda_memory_statistics(data([], [tab])).iloc[0]
    assert row["allocated_first_bytes"] == 200.0 and row["growth_bytes"] == 100.0 and row["peak_bytes"] == 500.0


# --- the framework recorder -----------------------------------------------------------------------------------
def test_the_framework_recorder_closes_once_started_or_not_and_leaves_no_writer_thread(tmp_path: Path) -> None:
    """A hook closed before its first step closes a recorder never started; a started one's thread is joined."""
    idle = FrameworkRecorder(tmp_path / "idle", "worker_0", node="n0")
    idle.close()
    idle.close()
    started = FrameworkRecorder(tmp_path / "run", "worker_0", node="n0")
    started.start()
    started.close()
    started.close()  # idempotent
    assert not [t for t in threading.enumerate() if t.name == "trainspect-framework-writer"]


# --- heatmap -----------------------------------------------------------------------------------------------------
def test_heatmap_keeps_up_to_four_step_boundaries_per_column() -> None:
    for n in (6, 8):  # up to 4 x max_columns: every boundary, once
        tab = _tab([0.25 * k for k in range(n)], [0.25 * k + 0.125 for k in range(n)])
        out = heatmap(data([system(4.0, cores=1)], [tab]), max_columns=2)
        assert out["step_boundaries"] == [T0 + 0.25 * k for k in range(n)]
    for n in (9, 20):  # more: 4 x max_columns of them, evenly spread from the first to the last
        tab = _tab([0.125 * k for k in range(n)], [0.125 * k + 0.0625 for k in range(n)])
        kept = heatmap(data([system(4.0, cores=1)], [tab]), max_columns=2)["step_boundaries"]
        assert len(kept) == 8 and kept[0] == T0 and kept[-1] == T0 + 0.125 * (n - 1)


# --- ranks -------------------------------------------------------------------------------------------------------
def _four_train_steps() -> FrameworkTables:
    """TRAIN steps 0-1, 2-3, 4-5, 6-7 (epoch seconds from 0: exact arithmetic); three cycles of 2 s."""
    return _tab([0, 2, 4, 6], [1, 3, 5, 7], base=0.0)


def test_a_wait_ending_as_its_step_ends_is_that_cycles_wait() -> None:
    tab = _with_spans(_four_train_steps(), [4], [2.5], [3.0], base=0.0)  # inside step 1, ending with it
    cyc = step_cycles(tab)
    assert cyc.steps.tolist() == [1, 2, 3]
    assert cyc.loader_s.tolist() == [0.5, 0.0, 0.0] and cyc.compute_s.tolist() == [0.5, 1.0, 1.0]
    assert (cyc.compute_s + cyc.sync_s + cyc.loader_s + cyc.between_s).tolist() == cyc.cycle_s.tolist()


def test_a_cycles_wait_and_step_never_exceed_the_cycle() -> None:
    # step 2's batch wait, recorded with its step (Keras), began before step 1 ended and lasts 3 s: cycle 2 is 2 s
    tab = _with_spans(_four_train_steps(), [4], [1.5], [4.5], glob=[2], base=0.0)
    cyc = step_cycles(tab)
    assert cyc.loader_s.tolist() == [0.0, 2.0, 0.0] and cyc.between_s.tolist() == [1.0, 0.0, 1.0]
    overlapped = _tab([0, 0.5, 4, 6], [1, 3, 5, 7], base=0.0)  # step 1 starts before step 0 ends: 2.5 s long
    overlapped = _with_spans(overlapped, [], [], [], base=0.0)
    cyc = step_cycles(overlapped)
    assert cyc.cycle_s.tolist() == [2.0, 2.0, 2.0] and cyc.step_s.tolist() == [2.0, 1.0, 1.0]
    assert (cyc.compute_s + cyc.sync_s + cyc.loader_s + cyc.between_s).tolist() == cyc.cycle_s.tolist()


# --- system files, traces, window, catalogue ---------------------------------------------------------------------
def test_the_system_time_span_reaches_the_last_files_last_sample(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    writer = SystemChunkWriter(layout.system_dir("n0"), "n0", 1000)
    for i in range(3):
        writer.append(T0 + i, {"cpu0_utilization_percent": 10.0})
    for i in range(3, 6):  # the keys change: a second file
        writer.append(T0 + i, {"cpu0_utilization_percent": 10.0, "gpu0_utilization_percent": 50.0})
    writer.close()
    assert len(list(layout.system_dir("n0").iterdir())) == 2
    assert SystemFileWindow(layout.profiler_dir).span() == (T0, T0 + 5)


def test_trace_b_e_pairs_close_the_latest_open_one_and_may_last_zero() -> None:
    raw = [
        {"ph": "B", "name": "outer", "pid": 1, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "ts": 1},
        {"ph": "E", "pid": 1, "ts": 2},
        {"ph": "E", "pid": 1, "ts": 5},
        {"ph": "B", "name": "instant", "pid": 2, "ts": 7},
        {"ph": "E", "pid": 2, "ts": 7},
    ]
    events = parse_trace(raw, "algo-1", base_us=1000.0)
    assert [(e.event_name, e.start_time, e.end_time) for e in events] == [
        ("inner", 1001.0, 1002.0),
        ("outer", 1000.0, 1005.0),
        ("instant", 1007.0, 1007.0),
    ]


def test_trace_times_below_1e15_us_are_relative_to_the_start() -> None:
    base = 1.7e15
    (event,) = parse_trace([{"ph": "X", "name": "a", "pid": 1, "ts": 2e12, "dur": 5}], "n", base_us=base)
    assert event.start_time == base + 2e12 and event.end_time == base + 2e12 + 5


@pytest.fixture
def small_run(tmp_path: Path) -> Path:
    """System samples at T0, T0 + 1, T0 + 2; a worker whose steps end at T0 + 3 and who closed at T0 + 10."""
    times = T0 + np.arange(3.0)
    write_system(tmp_path, "n0", 1000, times, ["cpu0_utilization_percent"], np.full((3, 1), 10.0), flush_every=3)
    n = 3
    step_table: dict[str, np.ndarray] = {
        "mode": np.ones(n, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": T0 + np.arange(n, dtype=np.float64),
        "end": T0 + np.arange(n, dtype=np.float64) + 1.0,
    }
    spans: dict[str, np.ndarray] = {
        "kind": np.zeros(0, np.uint8),
        "start": np.zeros(0),
        "end": np.zeros(0),
        "global_step": np.zeros(0, np.int64),
        "workers": np.zeros(0, np.int16),
    }
    write_steps(tmp_path, "worker_0", "n0", (T0, T0), [(step_table, spans)], closed=T0 + 10)
    return tmp_path


def test_a_window_must_have_a_length(small_run: Path) -> None:
    with pytest.raises(ValueError, match="must be after"):
        window(small_run, T0 + 1, T0 + 1)


def test_a_window_ending_at_the_first_record_lies_outside_the_run(small_run: Path) -> None:
    with pytest.raises(TrainspectError, match="no data in the window"):
        window(small_run, T0 - 1, T0)  # [T0 - 1, T0): the run's first record is not in it


def test_a_window_starting_at_the_last_record_lies_inside_the_run(small_run: Path) -> None:
    w = window(small_run, T0 + 10, T0 + 11)  # the close at T0 + 10 is the run's last record: empty, no error
    assert all(frame.empty for frame in w.frames().values())


def test_a_seconds_key_is_in_seconds() -> None:
    assert CATALOGUE.describe("data_wait_seconds").unit == "s"


# --- shared rule statistics, bottlenecks -------------------------------------------------------------------------
def test_boxplot_lower_whisker_is_one_and_a_half_iqr_below_p25() -> None:
    stats = boxplot(np.array([-100.0, 1.0, 2.0, 3.0, 4.0, 5.0]))  # p25 1.25, p75 3.75
    assert stats["lower"] == pytest.approx(-2.5) and stats["min"] == -100.0


def test_cpu_bottleneck_counts_bottlenecks_of_all_samples() -> None:
    # 10 samples: the GPU is low on the first 6, core 0 busy on the first 3 (bottlenecks: 3 of 10, not 3 of 6)
    gpu = np.array([5.0] * 6 + [80.0] * 4)
    cpu = np.array([95.0] * 3 + [20.0] * 7)
    arrays = system(5.0, cores=2, cpu0_utilization_percent=cpu, gpu0_utilization_percent=gpu)
    v = CPUBottleneck(patience=1, threshold=20.0).evaluate(data([arrays]))
    assert v.status is Status.ISSUES_FOUND
    assert v.message == (
        "3 of 10 samples (30.0%) had a GPU below 10% while CPU was above 90% (threshold 20% of samples)"
    )
    assert v.details["bottleneck_percent"] == 30.0 and v.details["low_gpu_utilization"] == 6


# --- LowGPUUtilization -------------------------------------------------------------------------------------------
def test_a_gpu_fluctuates_when_its_p5_is_low_though_its_p10_is_not() -> None:
    util = np.array([0.0] * 6 + [90.0] * 94)  # p95 90, p5 0, p10 90
    v = LowGPUUtilization(window=100, patience=99).evaluate(
        data([system(50.0, cores=1, gpu0_utilization_percent=util)])
    )
    assert v.status is Status.ISSUES_FOUND and v.details["n0/gpu0"]["issue"] == "fluctuating"
    assert v.details["n0/gpu0"]["gpu_5"] == 0.0


def test_low_gpu_names_the_worst_gpu_and_counts_every_trigger() -> None:
    arrays = system(100.0, cores=1, gpu0_utilization_percent=50.0, gpu1_utilization_percent=30.0)
    v = LowGPUUtilization(patience=10, window=50, scan_interval_us=30_000_000).evaluate(data([arrays]))
    # windows end at 30, 60, 90 and 120 s: both GPUs underused in each, 8 triggers
    assert v.triggers == 8 and len(v.series) == 2
    assert v.message == (
        "n0/gpu1 underutilised: p95 utilisation 30.0% (threshold_p95 70%), p5 30.0% (threshold_p5 10%); 8 trigger(s)"
    )


# --- StepOutlier -------------------------------------------------------------------------------------------------
def _outlier_data(durations: np.ndarray, worker: str = "worker_0") -> FrameworkTables:
    """Back-to-back steps from epoch 0 (binary-exact durations give exact step times)."""
    return steps(np.asarray(durations, dtype=np.float64), worker=worker, gap=0.0, start=0.0, process_start=0.0)


def test_step_outlier_scales_the_mad_to_a_standard_deviation() -> None:
    # after 2 warm-up steps: 50 steps of 1.0 s, 30 of 1.125, 30 of 0.875 and one of 1.75 s: median 1.0, MAD 0.125
    durations = np.array([1.0] * 2 + [1.0, 1.125, 0.875] * 30 + [1.0] * 20 + [1.75])
    v = StepOutlier().evaluate(data([], [_outlier_data(durations)]))
    got = v.details["worker_0/TRAIN"]
    assert got["mad_s"] == pytest.approx(1.4826 * 0.125)
    assert got["threshold_s"] == pytest.approx(1.0 + 5 * 1.4826 * 0.125)
    assert got["number_of_outliers"] == 0  # 1.75 s is below 1.93 s (it would pass an unscaled 1.625 s)


def test_a_step_exactly_at_the_outlier_threshold_is_no_outlier() -> None:
    durations = np.array([1.0] * 60 + [1.5] + [1.0] * 60)  # no spread: threshold 1.0 + 50 x 1 % of 1.0 = 1.5 s
    v = StepOutlier(mad_factor=50.0).evaluate(data([], [_outlier_data(durations)]))
    got = v.details["worker_0/TRAIN"]
    assert got["threshold_s"] == 1.5 and got["number_of_outliers"] == 0


def test_a_slowdown_is_sustained_only_over_eighty_percent_of_its_window() -> None:
    # steps 0-11 are outliers (1.25 s, threshold 1.05 s); too short to be stalls on their own (min 0.5 s)
    durations = np.array([1.25] * 12 + [1.0] * 108)
    v = StepOutlier(min_step_excess_s=0.5).evaluate(data([], [_outlier_data(durations)]))
    got = v.details["worker_0/TRAIN"]
    assert got["number_of_outliers"] == 12
    # step 3's window (steps 0-13) holds 12 of 14 outliers; step 4's (0-14) 12 of 15, exactly 80 %: not over
    assert got["stall_step_numbers"] == [0, 1, 2, 3]


def test_literal_step_outlier_skips_a_window_of_exactly_a_hundred_steps() -> None:
    durations = np.array([1.0] * 50 + [10.0] + [1.0] * 69)  # 120 steps; step 50 lasts 10 s
    # windows from the first end (1 s) every 108 s: at 109 s, 100 steps have ended (not judged); at 217 s, 120
    rule = StepOutlier(literal=True, n_outliers=0, scan_interval_us=108_000_000)
    v = rule.evaluate(data([], [_outlier_data(durations)]))
    assert v.status is Status.ISSUES_FOUND and v.triggers == 1 and v.first_trigger_time == 50.0


def test_step_outlier_loop_ends_with_the_latest_step_and_its_stats_are_exact() -> None:
    n = 110
    durations = 1.0 + np.arange(n) / 128.0
    starts = np.concatenate([[0.0], np.cumsum(durations[:-1])])
    ends = starts + durations
    # a last EVAL step that starts after the last TRAIN step but ends before it
    tab = _tab([*starts, ends[-1] - 0.5], [*ends, ends[-1] - 0.25], [1] * n + [2], base=0.0)
    v = StepOutlier().evaluate(data([], [tab]))
    got = v.details["worker_0/TRAIN"]
    assert got["loop_s"] == ends[-1]
    assert got["step_stats"]["p95"] == pytest.approx(1.0 + 0.95 * (n - 1) / 128.0)
    assert "worker_0/EVAL" not in v.details  # one step


def test_literal_step_outlier_reports_mean_plus_stddev_std_and_a_hundred_bin_histogram() -> None:
    durations = np.array([1.0, 1.5] * 60 + [4.0])  # mean 1.2727, std 0.3521: threshold 2.329 s (mean - 3 std < 0.3)
    v = StepOutlier(literal=True).evaluate(data([], [_outlier_data(durations)]))
    got = v.details["worker_0/TRAIN"]
    assert got["threshold_s"] == pytest.approx(durations.mean() + 3 * durations.std())
    assert got["number_of_outliers"] == 1 and got["step_numbers"] == [120]
    assert len(got["probs"]) == 100 and len(got["binedges"]) == 101  # the steps below the threshold, 100 bins
    assert sum(got["probs"]) == 120 and got["binedges"][0] == 1.0 and got["binedges"][-1] == 1.5


def test_step_outlier_judges_only_groups_of_more_than_a_hundred_steps() -> None:
    many, hundred = _outlier_data(np.ones(110)), _outlier_data(np.ones(100), worker="worker_1")
    v = StepOutlier().evaluate(data([], [many, hundred]))
    assert set(v.details) == {"worker_0/TRAIN"}


# --- OverallFrameworkMetrics ----------------------------------------------------------------------------------------
def test_the_forward_backward_split_needs_both_timed() -> None:
    both = _with_spans(_tab([0.0], [4.0]), [1, 2], [0.0, 1.0], [1.0, 3.0])  # 1 s forward, 2 s backward
    tiny = _with_spans(_tab([0.0], [4.0]), [1, 2], [0.0, 1.0], [0.015625, 1.015625])  # each under 1 % of the step
    split = OverallFrameworkMetrics().evaluate(data([], [both])).details["forward_backward"]
    assert split == pytest.approx({"forward": 100 / 3, "backward": 200 / 3})
    assert OverallFrameworkMetrics().evaluate(data([], [tiny])).details["forward_backward"] == {
        "forward": 50.0,
        "backward": 50.0,
    }
    for kind in (1, 2):  # only one of them timed
        alone = _with_spans(_tab([0.0], [4.0]), [kind], [1.0], [3.0])
        assert "forward_backward" not in OverallFrameworkMetrics().evaluate(data([], [alone])).details


def test_the_operator_breakdown_keeps_operators_over_two_percent_of_the_device_time() -> None:
    d = data([], [_with_spans(_tab([0.0], [4.0]), [1], [0.0], [1.0])])
    rows = [("aten::addmm", 95.0), ("aten::mm", 2.5), ("aten::relu", 2.0), ("aten::add", 0.5)]  # µs: % of 100
    d.operators = pd.DataFrame([["worker_0", 0, 5, "cpu", name, 1, t, t] for name, t in rows], columns=OPERATOR_COLUMNS)
    details = OverallFrameworkMetrics().evaluate(d).details
    assert details["CPU"] == pytest.approx({"aten::addmm": 9500 / 97.5, "aten::mm": 250 / 97.5})  # 2 %: not over
    assert "GPU" not in details and "GPU_total" not in details  # no GPU operator: no GPU breakdown


# --- BatchSize ---------------------------------------------------------------------------------------------------
def test_batch_size_needs_more_than_window_samples_in_a_scan_window() -> None:
    arrays = system(
        6.0, cores=1, gpu0_utilization_percent=10.0, gpu0_memory_used_percent=10.0
    )  # 12 samples, 0.5 s apart; everything low
    # windows end at 4.5 s (10 samples: not more than window=10) and 9 s (12 samples)
    v = BatchSize(window=10, patience=1, scan_interval_us=4_500_000).evaluate(data([arrays]))
    assert v.status is Status.ISSUES_FOUND and v.triggers == 1 and v.first_trigger_time == T0 + 9.0
    assert v.series[0].x == (T0 + 9.0,)


def test_batch_size_judges_the_gpus_95th_percentiles() -> None:
    """Utilisation and memory 0-99 % over the window: their p95 is 94.05 %, below 95 (p96 would be 95.04)."""
    ramp = np.concatenate([[0.0], np.arange(100.0)])  # 101 samples; the window holds the last 100
    for low in ("gpu0_utilization_percent", "gpu0_memory_used_percent"):
        cols = {"gpu0_utilization_percent": 10.0, "gpu0_memory_used_percent": 10.0, low: ramp}
        arrays = system(50.5, cores=1, **cols)
        judged = {
            limit: BatchSize(window=100, patience=1, gpu_threshold_p95=limit, gpu_memory_threshold_p95=limit)
            .evaluate(data([arrays]))
            .triggers
            for limit in (95.0, 94.0)
        }
        assert judged == {95.0: 1, 94.0: 0}, low
    flat = data([system(50.5, cores=1, gpu0_utilization_percent=10.0, gpu0_memory_used_percent=10.0)])
    for util, mem, triggers in ((10.0, 50.0, 0), (50.0, 10.0, 0), (10.5, 10.5, 1)):  # exactly at a threshold: not below
        rule = BatchSize(window=100, patience=1, gpu_threshold_p95=util, gpu_memory_threshold_p95=mem)
        assert rule.evaluate(flat).triggers == triggers


# --- Dataloader --------------------------------------------------------------------------------------------------
def _loader_seconds(workers: list[int], worker: str = "worker_0", node: str = "n0") -> FrameworkTables:
    """One data-loader wait per second, at ``T0 + i + 0.25``, with ``workers[i]`` worker processes; no steps."""
    tab = FrameworkTables(worker, node)
    n = len(workers)
    start = T0 + np.arange(n, dtype=np.float64) + 0.25
    return _with_spans(tab, [4] * n, list(start - T0), list(start - T0 + 0.1), workers=workers)


def test_dataloader_judges_the_median_loader_count() -> None:
    v = Dataloader(literal=True).evaluate(data([system(20.0, cores=4)], [_loader_seconds([2] * 8 + [20] * 3)]))
    assert v.details["n0"]["dataloaders"] == 2 and v.status is Status.ISSUES_FOUND  # mean 6.9 would pass


def test_dataloader_judges_a_node_only_past_patience() -> None:
    enough = _loader_seconds([4] * 11)
    short = _loader_seconds([1] * 10, worker="worker_1", node="n1")  # too few loaders, but only 10 seconds
    v = Dataloader(literal=True).evaluate(data([system(20.0, cores=4), system(20.0, node="n1")], [enough, short]))
    assert v.status is Status.NO_ISSUES_FOUND and v.triggers == 0 and v.details["n1"]["dataloaders"] == 1


def test_without_step_timings_too_few_loaders_decide_alone() -> None:
    v = Dataloader().evaluate(data([system(20.0, cores=4)], [_loader_seconds([1] * 11)]))
    assert np.isnan(v.details["input_wait_percent"])
    assert v.status is Status.ISSUES_FOUND and v.triggers == 1


# --- GPUMemoryIncrease -------------------------------------------------------------------------------------------
def test_gpu_memory_violations_start_once_more_than_patience_samples_are_seen() -> None:
    mem = np.array([0.0] * 20 + [100.0] * 10)  # the jump at sample 20 (the 21st: past patience=20)
    arrays = system(15.0, cores=1, gpu0_utilization_percent=50.0, gpu0_memory_used_percent=mem)
    v = GPUMemoryIncrease(patience=20, window=2, memory_source="device").evaluate(data([arrays]))
    assert v.details["n0/gpu0"]["violations"] == 2  # samples 20 and 21 raise the 2-sample mean by 50 points
    assert v.first_trigger_time == T0 + 10.0


def test_gpu_memory_compares_windows_once_more_than_window_plus_one_samples_are_seen() -> None:
    mem = np.array([0.0, 0.0, 100.0, 100.0, 100.0, 100.0])
    arrays = system(3.0, cores=1, gpu0_utilization_percent=50.0, gpu0_memory_used_percent=mem)
    v = GPUMemoryIncrease(patience=1, window=2, memory_source="device").evaluate(data([arrays]))
    # sample 2 (3 values: not more than window + 1) is not judged; sample 3's mean rises by 50 points
    assert v.details["n0/gpu0"]["violations"] == 1 and v.first_trigger_time == T0 + 1.5


# --- LoadBalancing -----------------------------------------------------------------------------------------------
def test_load_balancing_compares_a_pair_of_which_either_gpu_passed_patience() -> None:
    """Which GPU is numbered first does not matter: one with more than ``patience`` samples, the other with any."""
    few = np.array([10.0] * 5 + [np.nan] * 5)  # 5 samples: not more than patience=5
    for gpus in (
        {"gpu0_utilization_percent": few, "gpu1_utilization_percent": 90.0},
        {"gpu0_utilization_percent": 90.0, "gpu1_utilization_percent": few},
    ):
        v = LoadBalancing(threshold=0.5, patience=5).evaluate(data([system(5.0, cores=1, **gpus)]))
        assert v.status is Status.ISSUES_FOUND and "gpu1" in v.details["n0"]["distances"]["gpu0"]
    both_few = system(5.0, cores=1, gpu0_utilization_percent=few, gpu1_utilization_percent=few)
    v = LoadBalancing(threshold=0.5, patience=5).evaluate(data([both_few]))
    assert v.status is Status.NO_DATA  # neither passed patience


def test_load_balancing_compares_a_gpu_past_patience_with_one_of_a_single_sample_not_two_at_patience() -> None:
    """A pair is compared when one GPU has more than ``patience`` samples and the other at least one."""
    samples = {0: (10.0, 5), 1: (90.0, 5), 2: (90.0, 10), 3: (10.0, 1)}  # GPU: (utilisation, samples of 10)
    gpus = {f"gpu{g}_utilization_percent": np.array([u] * n + [np.nan] * (10 - n)) for g, (u, n) in samples.items()}
    node = system(5.0, cores=1, **gpus)
    v = LoadBalancing(threshold=0.5, patience=5).evaluate(data([node]))
    distances = v.details["n0"]["distances"]
    assert "gpu1" not in distances.get("gpu0", {})  # neither passed patience
    assert set(distances["gpu0"]) == {"gpu2"} and set(distances["gpu2"]) == {"gpu3"}
    assert distances["gpu2"]["gpu3"] > 0.5 and v.status is Status.ISSUES_FOUND  # one sample is enough beside it


def test_load_balancing_says_when_a_second_gpu_reported_nothing() -> None:
    """Two GPU columns of which one is empty: not "only one GPU per node", but nothing to compare."""
    empty = np.full(10, np.nan)
    two = system(5.0, cores=1, gpu0_utilization_percent=90.0, gpu1_utilization_percent=empty)
    v = LoadBalancing(threshold=0.5, patience=5).evaluate(data([two]))
    assert v.status is Status.NO_ISSUES_FOUND
    assert v.message.endswith("no two GPUs of a node both reported utilisation: no balancing issue")
    one = LoadBalancing(threshold=0.5, patience=5).evaluate(data([system(5.0, cores=1, gpu0_utilization_percent=90.0)]))
    assert one.message.endswith("only one GPU per node: no balancing issue")


def test_load_balancing_across_nodes_triggers_only_past_the_threshold() -> None:
    a = system(5.0, node="a", cores=1, gpu0_utilization_percent=10.0)
    b = system(5.0, node="b", cores=1, gpu0_utilization_percent=90.0)
    d = js_distance(
        np.histogram([10.0] * 10, EDGES)[0].astype(float), np.histogram([90.0] * 10, EDGES)[0].astype(float)
    )
    at = LoadBalancing(threshold=d, patience=5).evaluate(data([a, b]))
    assert at.status is Status.NO_ISSUES_FOUND and at.details["across_nodes"] == {"a:gpu0 vs b:gpu0": round(d, 4)}


# --- OverallSystemUsage ------------------------------------------------------------------------------------------
def test_system_usage_adds_network_sent_and_received() -> None:
    arrays = system(2.0, network_sent_bytes_per_second=100.0, network_received_bytes_per_second=50.0)
    v = OverallSystemUsage().evaluate(data([arrays]))
    assert v.details["Network"]["n0"]["p50"] == 150.0 and v.details["Network"]["n0"]["max"] == 150.0


# --- InputBottleneck ---------------------------------------------------------------------------------------------
def _input_worker(waits: dict[int, float], n: int = 12, worker: str = "worker_0") -> FrameworkTables:
    """Steps of 0.5 s every 2 s (epoch seconds from 0: exact), step k at 2k + 1.5; a wait of ``waits[k]`` s right
    before step k starts (it ends as the step starts: it delays step k's cycle)."""
    starts = [2.0 * k + 1.5 for k in range(n)]
    tab = _tab(starts, [s + 0.5 for s in starts], worker=worker, base=0.0)
    ks = sorted(waits)
    return _with_spans(tab, [4] * len(ks), [starts[k] - waits[k] for k in ks], [starts[k] for k in ks], base=0.0)


def test_a_wait_ending_as_a_step_starts_delays_that_steps_cycle() -> None:
    v = InputBottleneck(threshold=1.0).evaluate(data([], [_input_worker({5: 1.0})]))
    assert v.status is Status.ISSUES_FOUND and (v.first_trigger_step, v.last_trigger_step) == (5, 5)


def test_a_step_ending_with_the_previous_one_starts_no_input_cycle() -> None:
    tab = _input_worker({5: 1.0})
    for key, col in tab.steps.items():  # a duplicate record of step 3: a cycle of 0 s
        tab.steps[key] = np.insert(col, 4, col[3])
    v = InputBottleneck(threshold=1.0).evaluate(data([], [tab]))
    assert v.details["worker_0"]["cycles"] == 11


def test_input_bottleneck_judges_a_worker_only_past_patience() -> None:
    fed = _input_worker({k: 0.125 for k in range(12)})  # 11 cycles, 6 % waiting
    starved = _input_worker({k: 1.5 for k in range(11)}, n=11, worker="worker_1")  # 10 cycles: not judged
    v = InputBottleneck(patience=10).evaluate(data([], [fed, starved]))
    assert v.status is Status.NO_ISSUES_FOUND and v.triggers == 0
    assert v.message.startswith("worker_0: 6.2% of the step cycle") and "worker_1" not in v.message


def test_an_input_wait_longer_than_its_cycle_counts_the_cycle() -> None:
    tab = _input_worker({})
    tab = _with_spans(tab, [4], [6.0], [9.0], glob=[5], base=0.0)  # step 5's wait, recorded with its step: 3 s
    v = InputBottleneck(threshold=1.0).evaluate(data([], [tab]))
    assert v.details["worker_0"]["input_wait_s"] == 2.0 and v.details["worker_0"]["cycle_s"] == 22.0


def test_a_cycle_waiting_exactly_the_threshold_is_no_trigger_step() -> None:
    waits = {k: 1.5 for k in range(12)}
    waits[1] = 1.0  # 50 % of its 2 s cycle: not above threshold=50
    v = InputBottleneck(threshold=50.0).evaluate(data([], [_input_worker(waits)]))
    assert v.status is Status.ISSUES_FOUND and v.triggers == 10 and v.first_trigger_step == 2


def test_the_first_trigger_step_is_the_earliest_over_all_workers() -> None:
    late, early = _input_worker({5: 1.0}), _input_worker({2: 1.0}, worker="worker_1")
    v = InputBottleneck(threshold=1.0).evaluate(data([], [late, early]))
    assert (v.triggers, v.first_trigger_step, v.last_trigger_step) == (2, 2, 5)


# --- WorkerStraggler ---------------------------------------------------------------------------------------------
def _rank_worker(name: str, step: float, loader: float, between: float, n: int = 12) -> FrameworkTables:
    """Cycles of ``loader + between + step`` s (epoch seconds from 0: exact): the wait, a gap, then the step."""
    cycle = loader + between + step
    starts = [k * cycle + loader + between for k in range(n)]
    tab = _tab(starts, [s + step for s in starts], worker=name, base=0.0)
    if loader > 0:
        return _with_spans(
            tab, [4] * n, [k * cycle for k in range(n)], [k * cycle + loader for k in range(n)], base=0.0
        )
    return _with_spans(tab, [], [], [], base=0.0)


def test_a_straggler_is_measured_against_the_median_own_time_of_the_others() -> None:
    ranks = [
        _rank_worker("worker_0", 1.0, 0.0, 0.0),
        _rank_worker("worker_1", 1.0, 0.0, 0.0),
        _rank_worker("worker_2", 4.0, 0.0, 0.0),  # the others' own time: 1, 1 and 4 s, median 1 s (mean 2 s)
        _rank_worker("worker_3", 1.0, 0.5, 0.0),
    ]
    v = WorkerStraggler().evaluate(data([], ranks))
    assert v.details["stragglers"] == ["worker_2", "worker_3"]
    assert (
        "worker_3 waits 500 ms per step for its data loader, the median of the other ranks 0 s: every step waits "
        "500 ms for it, 50 % of the others' own time per step (threshold 20 %)"
    ) in v.message


def test_a_compute_excess_up_to_one_and_a_quarter_of_a_loader_excess_is_explained_away() -> None:
    ranks = [
        _rank_worker("worker_0", 1.0, 0.5, 0.5),  # waits 0.5 s more for its loader than the others
        _rank_worker("worker_1", 1.625, 0.0, 0.5),  # computes 0.625 s more: exactly 1.25 x 0.5 s
        _rank_worker("worker_2", 1.0, 0.0, 0.5),
    ]
    v = WorkerStraggler().evaluate(data([], ranks))
    assert v.details["stragglers"] == ["worker_0"] and v.workers == ("worker_0",)


def test_a_step_time_exactly_at_the_limit_does_not_straggle() -> None:
    ranks = [_rank_worker(f"worker_{i}", s, 0.0, 0.0) for i, s in enumerate((1.0, 1.0, 1.25))]
    v = WorkerStraggler(measure="step", threshold=25.0).evaluate(data([], ranks))
    assert v.details["limit_s"] == 1.25 and v.details["median_step_s"]["worker_2"] == 1.25
    assert v.status is Status.NO_ISSUES_FOUND and v.details["stragglers"] == []


# --- second round: operators, data-loading times, datapoints over GPUs and nodes ---------------------------------
def test_top_operators_rank_by_self_time() -> None:
    from trainspect.profiler.analysis import top_operators

    d = data()
    d.operators = pd.DataFrame(
        [
            ["worker_0", 0, 5, "cpu", "aten::linear", 10, 10.0, 100.0],  # mostly its children's time
            ["worker_0", 0, 5, "cpu", "aten::addmm", 10, 20.0, 30.0],
        ],
        columns=OPERATOR_COLUMNS,
    )
    assert top_operators(d)["name"].tolist() == ["aten::addmm", "aten::linear"]


def test_dataloader_details_give_the_p95_of_the_waits() -> None:
    waits = np.arange(1, 12) / 16.0  # 1/16 .. 11/16 s: p95 = 10.5/16
    tab = FrameworkTables("worker_0", "n0")
    start = np.arange(11, dtype=np.float64) + 0.25
    tab = _with_spans(tab, [4] * 11, list(start), list(start + waits), workers=[4] * 11)
    v = Dataloader(literal=True).evaluate(data([system(20.0, cores=4)], [tab]))
    assert v.details["dataloading_time"]["p95"] == pytest.approx(10.5 / 16.0)
    hist = v.details["dataloading_time"]
    assert (hist["p25"], hist["p50"]) == pytest.approx((3.5 / 16.0, 6.0 / 16.0))  # the quartile and the median
    assert len(hist["probs"]) == 100 and len(hist["binedges"]) == 101 and sum(hist["probs"]) == 11  # smdebug's


def test_low_gpu_datapoints_are_the_most_samples_of_any_gpu() -> None:
    gpu1 = np.array([50.0] * 4 + [np.nan] * 16)
    arrays = system(10.0, cores=1, gpu0_utilization_percent=50.0, gpu1_utilization_percent=gpu1)
    v = LowGPUUtilization(patience=5, window=5).evaluate(data([arrays]))
    assert v.datapoints == 20 and v.status is Status.ISSUES_FOUND


def test_batch_size_datapoints_are_the_most_samples_of_any_node() -> None:
    big = system(6.0, node="n0", cores=1, gpu0_utilization_percent=10.0, gpu0_memory_used_percent=10.0)
    small = system(2.0, node="n1", cores=1, gpu0_utilization_percent=10.0, gpu0_memory_used_percent=10.0)
    v = BatchSize(window=10, patience=1).evaluate(data([big, small]))
    assert v.datapoints == 12 and v.status is Status.ISSUES_FOUND


# --- survivors of a fresh mutation sample (seed 19) --------------------------------------------------------------
def test_load_balancing_bins_an_idle_gpu() -> None:
    """A GPU at 0 % beside one at 90 % is the plainest imbalance: 0 % falls in the first bin, not outside them."""
    arrays = system(5.0, cores=1, gpu0_utilization_percent=0.0, gpu1_utilization_percent=90.0)
    v = LoadBalancing(threshold=0.5, patience=5).evaluate(data([arrays]))
    assert v.status is Status.ISSUES_FOUND
    assert v.details["n0"]["workloads"]["gpu0"][0] == 10  # all 10 samples in the 0-2 % bin


def test_batch_size_charts_the_cpu_p95_of_each_window() -> None:
    """The series is the total CPU's 95th percentile over the last ``window`` samples at each scan window's end."""
    cpu = np.arange(24, dtype=np.float64)  # 0, 1, ..., 23 % at 0.5 s intervals
    low_gpu = {"gpu0_utilization_percent": 10.0, "gpu0_memory_used_percent": 10.0}
    arrays = system(12.0, cores=1, cpu0_utilization_percent=cpu, **low_gpu)
    v = BatchSize(window=10, patience=1, scan_interval_us=11_500_000).evaluate(data([arrays]))
    # one window ends at 11.5 s: samples 14-23, whose p95 (linear interpolation) is 14 + 0.95 x 9 = 22.55
    assert v.series[0].y == (22.55,)


def test_step_outlier_states_its_threshold_in_a_readable_unit() -> None:
    """A threshold of 1.5 s reads ``1.5 s``, one of 250 ms ``250 ms`` (not ``1.5e+03 ms``)."""
    slow = StepOutlier(mad_factor=50.0).evaluate(data([], [_outlier_data(np.array([1.0] * 60 + [2.0] + [1.0] * 60))]))
    assert "median 1 s + 50·MAD (1.5 s)" in slow.message
    quick = np.array([0.125] * 60 + [0.5] + [0.125] * 60)
    fast = StepOutlier(mad_factor=50.0).evaluate(data([], [_outlier_data(quick)]))
    assert "median 125 ms + 50·MAD (188 ms)" in fast.message


def test_the_literal_outlier_scan_agrees_with_the_definition_on_a_long_run() -> None:
    """Thousands of steps take the scan's tree of maxima: its answers are those of ``d > mean + 3·std``."""
    from trainspect.rules.profiler._prefix_outliers import PrefixOutliers

    rng = np.random.default_rng(5)
    dur = rng.gamma(4.0, 0.25, 9000)
    dur[[1500, 4000, 4001, 8500]] = 40.0
    scan = PrefixOutliers(dur, stddev=3.0)
    for n in (1200, 3000, 4500, 9000):
        d = dur[:n]
        idx = np.flatnonzero(d > d.mean() + 3.0 * d.std())
        for k in (0, 1, 2):
            assert scan.nth_outlier(n, k) == (int(idx[k]) if len(idx) > k else None), (n, k)


def test_max_initialization_time_takes_a_fraction_of_a_minute() -> None:
    """Its ``threshold`` is in minutes: 0.5 (30 s) is allowed; below 0 fails naming it."""
    from trainspect.rules.profiler import MaxInitializationTime

    assert MaxInitializationTime(threshold=0.5).threshold == 0.5
    with pytest.raises(TrainspectError, match="threshold"):
        MaxInitializationTime(threshold=-1.0)


# --- survivors of a fresh mutation sample (seed 29) --------------------------------------------------------------
def test_gpu_memory_of_nan_samples_only_counts_none() -> None:
    """A GPU whose memory column holds only NaN (the metric failed every poll) has 0 samples, and the NoData says
    so."""
    arrays = system(5.0, cores=1, gpu0_utilization_percent=50.0, gpu0_memory_used_percent=np.nan)
    v = GPUMemoryIncrease(patience=5, window=2, memory_source="device").evaluate(data([arrays]))
    assert v.status is Status.NO_DATA and v.datapoints == 0
    assert "too little data: 0 GPU memory samples" in v.message


def test_max_initialization_time_judges_no_window_past_the_end_of_the_job() -> None:
    """A 10 s job with no step, a 30 s threshold and minute-long scan windows: its one window is at its start; no
    window a minute later (after the job ended) is judged, so there is no alarm."""
    from trainspect.rules.profiler import MaxInitializationTime

    idle = FrameworkTables("worker_0", "n0")
    rule = MaxInitializationTime(threshold=0.5, scan_interval_us=60_000_000)
    v = rule.evaluate(data([system(10.0, cores=1)], [idle]))
    assert v.status is Status.NO_ISSUES_FOUND and v.triggers == 0
    assert v.series[0].x == (T0,)


def test_the_exact_outlier_scan_counts_the_elements_it_compares() -> None:
    """A short prefix is recomputed whole: ``touched`` grows by its length (the work the linear tests read)."""
    from trainspect.rules.profiler._prefix_outliers import PrefixOutliers

    scan = PrefixOutliers(np.array([1.0] * 99 + [9.0]), stddev=3.0)
    assert scan.nth_outlier(100, 0) == 99 and scan.nth_outlier(50, 0) is None
    assert (scan.exact, scan.touched) == (2, 150)


# --- third round (seed-31 survivors) -----------------------------------------------------------------------------
def test_a_worker_waiting_exactly_the_threshold_share_is_no_bottleneck() -> None:
    """Every cycle waits 1 s of its 2 s: 50 % is not above threshold=50 (the share must exceed it)."""
    v = InputBottleneck(threshold=50.0).evaluate(data([], [_input_worker({k: 1.0 for k in range(12)})]))
    assert v.details["worker_0"]["input_wait_percent"] == 50.0
    assert v.status is Status.NO_ISSUES_FOUND and v.triggers == 0


def test_straggler_details_give_each_ranks_times_in_seconds_and_its_cycle_count() -> None:
    ranks = [_rank_worker("worker_0", 1.0, 0.0, 0.0), _rank_worker("worker_1", 1.0, 0.5, 0.25)]
    v = WorkerStraggler().evaluate(data([], ranks))
    row = v.details["by_worker"]["worker_1"]
    assert row == {
        "cycles": 11,
        "compute_s": 1.0,
        "loader_s": 0.5,
        "between_s": 0.25,
        "sync_s": 0.0,
        "busy_s": 1.75,
        "step_s": 1.0,
    }
    assert type(row["cycles"]) is int and v.details["sync_waits_recorded"] is False


@pytest.mark.parametrize("key", ["cpu_threshold_p95", "gpu_threshold_p95", "gpu_memory_threshold_p95"])
def test_batch_size_thresholds_are_percentages_up_to_one_hundred(key: str) -> None:
    assert BatchSize(**{key: 100.0}).params[key] == 100.0
    with pytest.raises(TrainspectError, match=key):
        BatchSize(**{key: 100.5})


def test_the_outlier_scan_descends_through_the_block_maxima_touching_few_elements() -> None:
    """On a long series one outlier is found from the block maxima, without the exact pass over the prefix."""
    from trainspect.rules.profiler._prefix_outliers import PrefixOutliers

    dur = np.ones(8192)
    dur[5000] = 50.0
    scan = PrefixOutliers(dur, stddev=3.0)
    assert scan.nth_outlier(8192, 0) == 5000
    assert scan.exact == 0 and 0 < scan.touched < 8192 // 16


# --- fourth round (seed-37 survivors) ----------------------------------------------------------------------------
def test_low_gpu_takes_the_95th_percentile_of_the_window() -> None:
    """95 samples at 10 % and 5 at 90 %: p95 interpolates to 14 % (underused); p96 would already read 90 %."""
    util = np.array([10.0] * 95 + [90.0] * 5)
    v = LowGPUUtilization(window=100, patience=99).evaluate(
        data([system(50.0, cores=1, gpu0_utilization_percent=util)])
    )
    assert v.details["n0/gpu0"]["gpu_95"] == pytest.approx(14.0)
    assert v.status is Status.ISSUES_FOUND and v.details["n0/gpu0"]["issue"] == "underutilised"


def test_a_heatmap_of_one_nodes_arrays_has_no_step_boundaries() -> None:
    out = heatmap(system(4.0, cores=1), max_columns=2)
    assert out["step_boundaries"] == [] and out["node"] == "n0" and len(out["times"]) == 2


def test_a_heatmap_cell_averages_only_the_samples_a_gpu_reported() -> None:
    # gpu0 misses every other sample (NaN): a cell of two samples is the one it reported, not pulled toward 1 or 0
    util = np.array([40.0, np.nan, 60.0, np.nan, 80.0, np.nan, 20.0, np.nan])
    out = heatmap(system(4.0, cores=1, gpu0_utilization_percent=util), max_columns=4)
    assert out["rows"] == ["cpu0", "gpu0"] and out["values"][1] == [40.0, 60.0, 80.0, 20.0]


def test_a_node_is_named_by_trainspect_node_id_else_by_its_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainspect.hooks.system_monitor import default_node_id

    monkeypatch.delenv("TRAINSPECT_NODE_ID", raising=False)
    host = socket.gethostname()
    assert default_node_id() == host and FrameworkRecorder(tmp_path, "worker_0").node == host
    monkeypatch.setenv("TRAINSPECT_NODE_ID", "rack3-gpu7")  # several "nodes" on one host (a simulated job)
    assert default_node_id() == "rack3-gpu7" and FrameworkRecorder(tmp_path, "worker_0").node == "rack3-gpu7"
    assert FrameworkRecorder(tmp_path, "worker_0", node="n9").node == "n9"


def test_a_trace_event_without_a_thread_id_is_on_thread_0() -> None:
    (event,) = parse_trace([{"ph": "X", "name": "a", "pid": 3, "ts": 1, "dur": 2}], "n", base_us=0.0)
    assert (event.pid, event.tid) == (3, 0)


def test_a_straggler_whose_peers_compute_nothing_is_infinitely_slower() -> None:
    """Peers whose steps take no time: the straggler's compute excess has no finite percentage (no division)."""
    ranks = [_rank_worker("worker_0", 1.0, 0.0, 0.0), _rank_worker("worker_1", 0.0, 0.5, 0.0)]
    v = WorkerStraggler().evaluate(data([], ranks))
    assert v.status is Status.ISSUES_FOUND
    assert "worker_0 computes inf % longer per step than the other rank (1 s vs 0 s; threshold 20 %)" in v.message


def test_load_balancing_judges_up_to_the_last_sample() -> None:
    """20 samples to T0 + 9.5 s, windows of 9.25 s: the second window holds only the last sample, the one that
    differs; without it the two GPUs' histograms would be identical."""
    gpu1 = np.array([50.0] * 19 + [0.0])
    arrays = system(10.0, cores=1, gpu0_utilization_percent=50.0, gpu1_utilization_percent=gpu1)
    v = LoadBalancing(patience=5, scan_interval_us=9_250_000).evaluate(data([arrays]))
    assert v.details["n0"]["distances"] == {"gpu0": {"gpu1": 0.1329}}


def test_input_bottleneck_charts_at_most_500_trigger_times_per_worker() -> None:
    v = InputBottleneck().evaluate(data([], [_input_worker({k: 1.5 for k in range(503)}, n=503)]))
    assert v.triggers == 502 and len(v.series[0].trigger_x) == 500
    assert v.series[0].trigger_x[-1] == 2.0 * 500 + 2.0  # cycle 500 ends at step 500's end


# --- fifth round (seed-41 survivors) -----------------------------------------------------------------------------
def test_low_gpu_names_the_gpu_of_the_lowest_p95_not_of_the_lowest_p5() -> None:
    """gpu0 sits at 30 %; gpu1 swings between 10 % and 50 % (p95 50, p5 10): gpu0 is the worst."""
    swing = np.array([10.0, 50.0] * 50)
    arrays = system(50.0, cores=1, gpu0_utilization_percent=30.0, gpu1_utilization_percent=swing)
    v = LowGPUUtilization(window=100, patience=99).evaluate(data([arrays]))
    assert (v.details["n0/gpu1"]["gpu_95"], v.details["n0/gpu1"]["gpu_5"]) == (50.0, 10.0)
    assert v.message.startswith("n0/gpu0 underutilised: p95 utilisation 30.0%")


def test_a_rank_of_one_step_cycle_is_compared() -> None:
    """Two steps make one cycle: with ``min_cycles=1`` (the default) that rank has a row."""
    from trainspect.profiler.ranks import rank_times

    frame = rank_times(data([], [_tab([0.0, 2.0], [1.0, 3.0])]))
    assert frame["worker"].tolist() == ["worker_0"] and frame["cycles"].tolist() == [1]


def test_step_outlier_charts_at_most_500_outliers_and_states_its_stddev_to_two_places() -> None:
    """600 slow steps among 10,000 (10 s against 1 s) are all outliers; the chart marks the first 500."""
    durations = np.ones(10_000)
    durations[2::16][:600] = 10.0
    v = StepOutlier(stddev=1.234).evaluate(data([], [_outlier_data(durations)]))
    got = v.details["worker_0/TRAIN"]
    assert got["number_of_outliers"] == 600 and got["stddev"] == 1.23
    assert len(v.series[0].trigger_x) == 500


# --- sixth round (seed-43 survivors) -----------------------------------------------------------------------------
def test_a_loop_just_over_a_quarter_outside_steps_is_pointed_out() -> None:
    """25.5 % of the loop between steps is over the 25 % advice cut-off (25.0 % exactly is not: see thresholds)."""

    tab = steps(np.array([1.46, 1.46]), gap=1.0, start=T0)  # 1 of 3.92 s between steps
    v = OverallFrameworkMetrics().evaluate(data([], [tab]))
    assert v.message == (
        "25.5% of the training loop was spent outside steps (more than 25%: check the time between steps)"
    )


def test_system_usage_of_ticks_without_gpu_samples_warns_nothing() -> None:
    """A tick where no GPU was sampled is a row of NaN: the GPU mean skips it, with no 'Mean of empty slice'."""
    import warnings

    util = np.where(np.arange(20) < 4, np.nan, 60.0)
    arrays = system(10.0, cores=1, gpu0_utilization_percent=util, gpu1_utilization_percent=util)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = OverallSystemUsage().evaluate(data([arrays]))
    assert v.status is Status.NO_ISSUES_FOUND
    assert v.details["GPU"]["n0"] == {"max": 60.0, "p99": 60.0, "p95": 60.0, "p50": 60.0, "min": 60.0}


# --- seventh round: the readers, arrays, catalogue and samplers (seed-43 sample) -----------------------------------
def test_system_reader_limits_by_a_start_alone_and_by_an_end_alone(small_run: Path) -> None:
    """``read_arrays(start=...)`` drops the samples before it; ``window_arrays(end=...)`` those at or after it."""
    from trainspect.profiler.readers import SystemMetricsReader

    reader = SystemMetricsReader(small_run)
    assert reader.read_arrays(start=T0 + 1)["n0"].timestamps.tolist() == [T0 + 1, T0 + 2]
    assert reader.read_arrays(end=T0 + 1)["n0"].timestamps.tolist() == [T0, T0 + 1]  # read_arrays: end included
    assert reader.window_arrays(end=T0 + 1)["n0"].timestamps.tolist() == [T0]  # a window: end excluded


def test_sagemaker_system_windows_are_half_open() -> None:
    """The same rule for a SageMaker folder's samples: ``start <= t < end``, either bound optional."""
    from trainspect.profiler.arrays import SystemArrays
    from trainspect.profiler.readers import _half_open

    arrays = SystemArrays("n0", T0 + np.arange(4.0), ("k",), np.zeros((4, 1), np.float32), 1000)
    assert _half_open(arrays, T0 + 1, T0 + 3).timestamps.tolist() == [T0 + 1, T0 + 2]
    assert _half_open(arrays, None, T0 + 1).timestamps.tolist() == [T0]
    assert _half_open(arrays, T0 + 3, None).timestamps.tolist() == [T0 + 3]


def test_readers_of_an_empty_run_give_time_zero(tmp_path: Path) -> None:
    """smdebug's convention: no file yet, timestamp 0 (not 1, not an error)."""
    from trainspect.profiler.readers import FrameworkMetricsReader, SystemMetricsReader

    for reader in (SystemMetricsReader(tmp_path), FrameworkMetricsReader(tmp_path)):
        assert reader.get_timestamp_of_latest_available_file() == 0
        assert reader.get_timestamp_of_first_available_file() == 0


def test_the_first_file_time_sees_files_written_after_the_reader_was_made(tmp_path: Path) -> None:
    """A reader made before training (smdebug's live analysis) finds the first file once it exists."""
    from trainspect.profiler.readers import SystemMetricsReader

    reader = SystemMetricsReader(tmp_path)
    assert reader.get_timestamp_of_first_available_file() == 0
    write_system(tmp_path, "n0", 1000, T0 + np.arange(2.0), ["cpu0_utilization_percent"], np.ones((2, 1)), 2)
    assert reader.get_timestamp_of_first_available_file() == pytest.approx(T0, abs=3600)  # files are per hour


def test_finalization_runs_from_the_last_step_to_the_close_and_is_unknown_without_one() -> None:
    tab = _tab([0.0, 2.0], [1.0, 3.0])
    assert tab.phases()["finalization"] is None  # no close recorded (still running, or killed)
    tab.close_time = T0 + 5.0
    assert tab.phases()["finalization"] == (T0 + 3.0, T0 + 5.0)


def test_the_last_value_of_a_bucket_is_its_last_finite_sample() -> None:
    from trainspect.profiler.arrays import aggregate_buckets

    values = np.array([[1.0], [2.0], [3.0], [np.nan], [5.0], [6.0]])
    out = aggregate_buckets(values, np.array([0, 2, 4]), ["last"])
    assert out[:, 0].tolist() == [2.0, 3.0, 6.0]  # the second bucket's last sample is NaN: its last finite one


def test_a_per_device_metric_without_a_device_is_the_declaration_itself() -> None:
    metric = next(m for m in CATALOGUE.metrics() if m.per_device)
    assert metric.for_device(None) is metric
    filled = metric.for_device("3")
    assert "{i}" not in filled.key and filled.key == metric.key.replace("{i}", "3")
    plain = next(m for m in CATALOGUE.metrics() if not m.per_device)
    assert plain.for_device("3") is plain


def test_a_claim_file_being_written_holds_the_node_for_five_seconds_then_is_stale(tmp_path: Path) -> None:
    """Another process's claim that cannot be read yet (being written) holds; one unreadable for long is garbage."""
    import os
    import time

    from trainspect.hooks.system_monitor import NodeClaim

    claim = NodeClaim(tmp_path)
    claim.path.write_text("{")  # another process is writing its claim
    assert not claim.acquire()
    old = time.time() - 60
    os.utime(claim.path, (old, old))
    assert claim.acquire() and claim.held
    other = NodeClaim(tmp_path)  # a second process of this host, while this one holds it
    os.utime(claim.path, (old, old))  # however old the file, a live holder keeps it
    assert not other.acquire()
    claim.release()
    assert other.acquire()
    other.release()


def test_a_monitor_of_a_disabled_profiler_and_a_second_start_sample_nothing(tmp_path: Path) -> None:
    from trainspect.hooks.system_monitor import SystemMonitor
    from trainspect.profiler.config import ProfilerConfig

    off = SystemMonitor(tmp_path, node="n0", config=ProfilerConfig(enabled=False), samplers=[])
    assert not off.start() and not off.running
    on = SystemMonitor(tmp_path, node="n1", samplers=[])
    try:
        assert on.start() and on.running
        assert not on.start()  # already sampling
    finally:
        on.close()


def test_the_framework_recorder_ignores_an_unmatched_step_end_and_writes_metrics_and_loader_workers(
    tmp_path: Path,
) -> None:
    from trainspect.hooks.framework_metrics import SPAN_KINDS, FrameworkRecorder
    from trainspect.modes import ModeKeys
    from trainspect.profiler.data import load_profiler_data

    rec = FrameworkRecorder(tmp_path, "worker_0", node="n0")
    rec.start()
    rec.on_step_end(ModeKeys.TRAIN, 0, 0)  # nothing began
    rec.on_step_start(ModeKeys.TRAIN, 0, 0)
    rec.on_step_end(ModeKeys.TRAIN, 7, 7)  # not the step that began
    rec.on_step_end(ModeKeys.TRAIN, 0, 0)
    rec.set_dataloader_workers(3)
    rec.record_span("dataloader", T0, T0 + 1)
    rec.record_span("forward", T0 + 1, T0 + 2, 0)
    rec.record_metrics(0, {"gpu0_memory_allocated_bytes": 1024.0})
    rec.close()
    tab = load_profiler_data(tmp_path).framework["worker_0"]
    assert tab.steps["global_step"].tolist() == [0]
    workers = dict(zip(tab.spans["kind"].tolist(), tab.spans["workers"].tolist(), strict=True))
    assert workers == {SPAN_KINDS["dataloader"]: 3, SPAN_KINDS["forward"]: -1}  # loader spans carry the count
    assert tab.step_metrics["global_step"].tolist() == [0]
    assert tab.step_metrics["gpu0_memory_allocated_bytes"].tolist() == [1024.0]


def test_the_framework_recorder_writes_every_flush_interval_not_only_the_first(tmp_path: Path) -> None:
    """Steps reach disk while the run goes on (a live reader, a crash): after the first flush, the next ones too."""
    import time

    from trainspect.modes import ModeKeys
    from trainspect.profiler.readers import FrameworkMetricsReader

    rec = FrameworkRecorder(tmp_path, "worker_0", node="n0", flush_interval_s=0.05)
    rec.start()
    reader = FrameworkMetricsReader(tmp_path)
    try:
        for step in range(2):
            rec.on_step_start(ModeKeys.TRAIN, step, step)
            rec.on_step_end(ModeKeys.TRAIN, step, step)
            deadline = time.monotonic() + 30  # an event, bounded: it holds on a loaded machine
            while time.monotonic() < deadline:
                tab = reader.read_tables().get("worker_0")
                if tab is not None and step in tab.steps["global_step"].tolist():
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"step {step} was not written before the recorder closed")
    finally:
        rec.close()


def test_sagemaker_framework_events_become_steps_and_spans_of_the_right_kinds() -> None:
    """smdebug's PyTorch trace phases map to trainspect's span kinds; spans carry no step (-1), loader spans the pid
    of the worker that loaded, and an iterator start without a worker count means none."""
    from trainspect.hooks.framework_metrics import SPAN_KINDS
    from trainspect.profiler._sm_framework import _tables
    from trainspect.profiler.events import TraceEvent

    us = 1e6

    def ev(phase: str, at: float, pid: int = 7, **args: object) -> TraceEvent:
        return TraceEvent((T0 + at) * us, (T0 + at + 0.5) * us, phase, phase, "algo-1", pid=pid, event_args=args)

    tab = _tables(
        "algo-1",
        [
            ev("Step:ModeKeys.TRAIN", 0.0, step_num=0),
            ev("DataLoaderIterInitialize", 0.1),
            TraceEvent(
                (T0 + 0.2) * us, (T0 + 0.7) * us, "DataLoaderIterNext", "", "algo-1", pid=5, event_args={"pid": 9}
            ),
            TraceEvent(
                (T0 + 0.25) * us, (T0 + 0.75) * us, "DataLoaderIterNext", "", "algo-1", pid=5, event_args={"pid": 0}
            ),
            ev("forward", 0.3),
            ev("backward", 0.4),
            ev("optimizer_step", 0.5),
        ],
    )
    assert tab.steps["mode_step"].tolist() == [0]
    assert (tab.steps["start"].tolist(), tab.steps["end"].tolist()) == ([T0], [T0 + 0.5])
    kinds = tab.spans["kind"].tolist()
    names = ("dataloader", "dataloader", "forward", "backward", "optimizer")
    assert kinds == [SPAN_KINDS[k] for k in names]
    assert tab.spans["global_step"].tolist() == [-1] * 5
    assert tab.spans["pid"].tolist() == [9, 0, 7, 7, 7]  # a loader span: the worker that loaded (0: the main one)
    assert tab.dataloader_workers == 0 and tab.spans["workers"].tolist() == [0] * 5


def test_the_system_time_span_is_the_first_and_last_sample(small_run: Path) -> None:
    from trainspect.profiler.readers import SystemMetricsReader

    assert SystemMetricsReader(small_run).time_span() == (T0, T0 + 2)


def test_merging_no_system_parts_gives_no_rows_and_no_keys() -> None:
    from trainspect.profiler.arrays import merge_system

    empty = merge_system("n0", [], 500)
    assert (len(empty), empty.keys, empty.values.shape, empty.timestamps.shape) == (0, (), (0, 0), (0,))


def test_a_loaders_worker_count_and_batch_size_are_recorded_as_set(tmp_path: Path) -> None:
    from trainspect.profiler.data import load_profiler_data

    rec = FrameworkRecorder(tmp_path, "worker_0", node="n0")
    rec.start()
    rec.set_dataloader(2, 16)
    rec.close()
    tab = load_profiler_data(tmp_path).framework["worker_0"]
    assert [(e["num_workers"], e["batch_size"]) for e in tab.loaders] == [(2, 16)]


def test_a_node_claim_makes_the_folders_it_lives_in(tmp_path: Path) -> None:
    from trainspect.hooks.system_monitor import NodeClaim

    claim = NodeClaim(tmp_path / "run" / "system" / "n0")
    assert claim.acquire() and claim.path.exists()
    claim.release()
    assert claim.acquire()  # a later process of the run: the folder is there already
    claim.release()
