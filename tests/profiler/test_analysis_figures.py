"""The profiler analyses give the exact figures of small hand-built timelines (percentiles, shares, counts, phases).

Every expected value below is worked out by hand from the synthetic input, so a changed percentile, a boundary
moved from ``>`` to ``>=``, a unit factor or a count off by one changes a figure and fails the test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from profiler_synth import T0, data, gpus, steps, system

from trainspect.profiler.analysis import (
    cuda_memory_statistics,
    dataloader_statistics,
    is_profiler_frame,
    job_statistics,
    phase_ratios,
    python_hotspots,
    step_histogram,
    step_statistics,
    timed_step_counts,
    top_operators,
    training_loader,
    training_loader_of,
    utilization_statistics,
)
from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.detailed import OPERATOR_COLUMNS, PYTHON_COLUMNS


def _tab(starts: list[float], ends: list[float], modes: list[int], worker: str = "worker_0") -> FrameworkTables:
    tab = FrameworkTables(worker, "n0")
    n = len(starts)
    tab.steps = {
        "mode": np.asarray(modes, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": T0 + np.asarray(starts, dtype=np.float64),
        "end": T0 + np.asarray(ends, dtype=np.float64),
    }
    return tab


def _spans(kinds: list[int], starts: list[float], ends: list[float], workers: list[int] | None = None) -> dict:
    n = len(kinds)
    return {
        "kind": np.asarray(kinds, np.uint8),
        "start": T0 + np.asarray(starts, dtype=np.float64),
        "end": T0 + np.asarray(ends, dtype=np.float64),
        "global_step": np.full(n, -1, np.int64),
        "workers": np.asarray(workers if workers is not None else [-1] * n, np.int16),
        "pid": np.zeros(n, np.int64),
    }


# --- job_statistics --------------------------------------------------------------------------------------------
def test_job_phases_are_the_exact_seconds_and_shares_of_the_job() -> None:
    tab = steps(np.ones(4), gap=0.0, start=T0 + 10, process_start=T0)
    tab.close_time = T0 + 20
    stats = job_statistics(data([system(10.0)], [tab]))
    assert stats["start"] == T0 and stats["end"] == T0 + 20 and stats["duration_s"] == 20.0
    assert stats["process_start"] == T0 and stats["before_job_s"] == 0.0  # a script's first run
    assert stats["training_loop_start"] == T0 + 10 and stats["training_loop_end"] == T0 + 14
    assert (stats["initialization_s"], stats["training_loop_s"], stats["finalization_s"]) == (10.0, 4.0, 6.0)
    assert stats["initialization_percent"] == pytest.approx(50.0)
    assert stats["training_loop_percent"] == pytest.approx(20.0)
    assert stats["finalization_percent"] == pytest.approx(30.0)


def test_a_notebook_kernel_idle_before_the_job_is_counted_apart() -> None:
    tab = steps(np.ones(2), gap=0.0, start=T0 + 4, process_start=T0 - 100)
    tab.job_start = tab.recorder_start = T0
    stats = job_statistics(data([], [tab]))
    assert stats["start"] == T0 and stats["process_start"] == T0 - 100 and stats["before_job_s"] == 100.0
    assert stats["initialization_s"] == 4.0 and stats["finalization_s"] is None  # no worker closed yet
    assert stats["finalization_percent"] is None and stats["duration_s"] == 6.0


def test_a_loop_starting_at_the_job_start_has_no_initialization() -> None:
    tab = steps(np.ones(2), gap=0.0, start=T0, process_start=T0)
    tab.close_time = T0 + 2
    stats = job_statistics(data([], [tab]))
    assert (stats["initialization_s"], stats["training_loop_s"], stats["finalization_s"]) == (0.0, 2.0, 0.0)
    assert stats["training_loop_percent"] == 100.0 and stats["initialization_percent"] == 0.0


def test_job_statistics_without_steps_or_data() -> None:
    assert job_statistics(data()) == {}
    stats = job_statistics(data([system(5.0)]))
    assert stats == {"start": T0, "end": T0 + 4.5, "duration_s": 4.5}


# --- utilization_statistics ------------------------------------------------------------------------------------
def test_utilisation_percentiles_are_exact_on_a_ramp() -> None:
    ramp = np.arange(101, dtype=np.float64)  # 0..100: the q-th percentile is q
    arrays = system(101 * 0.5, 0.5, cores=1, cpu0_utilization_percent=ramp, **gpus(2, 0.0))
    arrays.values[:, arrays.keys.index("gpu0_utilization_percent")] = 10.0
    arrays.values[:, arrays.keys.index("gpu1_utilization_percent")] = 30.0
    arrays.values[3, arrays.keys.index("cpu_iowait_percent")] = np.nan
    frame = utilization_statistics(data([arrays])).set_index("metric")
    cpu0 = frame.loc["cpu0_utilization_percent"]
    assert list(cpu0[["min", "max", "mean", "p50", "p90", "p95", "p99", "samples"]]) == [
        0.0,
        100.0,
        50.0,
        50.0,
        90.0,
        95.0,
        99.0,
        101,
    ]
    assert cpu0["unit"] == "percent" and cpu0["node"] == "n0"
    assert frame.loc["cpu_total_utilization_percent", "p90"] == 90.0  # one core: the total is that core
    assert frame.loc["gpu_total_utilization_percent", "mean"] == pytest.approx(20.0)  # mean over the GPUs
    assert frame.loc["cpu_iowait_percent", "samples"] == 100  # the NaN sample is not counted
    assert list(frame.columns) == ["node", "unit", "min", "max", "mean", "p50", "p90", "p95", "p99", "samples"]


def test_utilisation_of_a_metric_never_sampled_has_no_row() -> None:
    arrays = system(2.0, 0.5, cores=1, cpu_iowait_percent=np.nan)
    frame = utilization_statistics(data([arrays]))
    assert "cpu_iowait_percent" not in set(frame["metric"]) and "cpu0_utilization_percent" in set(frame["metric"])
    assert utilization_statistics(data()).empty


# --- step_statistics, step_histogram ---------------------------------------------------------------------------
def test_step_percentiles_and_time_between_steps_are_exact() -> None:
    durations = np.arange(1, 102) * 0.01  # 0.01..1.01 s: p50 0.51, p95 0.96, p99 1.00
    train = steps(durations, gap=0.02)
    other = steps(np.array([2.0, 4.0]), worker="worker_1", gap=0.5, mode=2)
    frame = step_statistics(data([], [other, train]))  # rows sorted by worker, whatever the order read
    assert frame[["worker", "mode"]].values.tolist() == [["worker_0", "TRAIN"], ["worker_1", "EVAL"]]
    row = frame.iloc[0]
    assert row["count"] == 101
    assert row[["mean", "min", "p50", "p95", "p99", "max", "between_mean"]].tolist() == pytest.approx(
        [0.51, 0.01, 0.51, 0.96, 1.00, 1.01, 0.02]
    )
    assert frame.iloc[1][["count", "mean", "min", "max", "between_mean"]].tolist() == pytest.approx(
        [2, 3.0, 2.0, 4.0, 0.5]
    )
    one = step_statistics(data([], [steps(np.array([1.0]))])).iloc[0]
    assert one["count"] == 1 and np.isnan(one["between_mean"])


def test_step_histogram_counts_per_bin() -> None:
    frame = step_histogram(data([], [steps(np.array([1.0, 1.0, 3.0, 2.0]))]), bins=2)
    assert frame[["bin_start", "bin_end", "count"]].values.tolist() == [[1.0, 2.0, 2], [2.0, 3.0, 2]]
    two = step_histogram(data([], [steps(np.array([1.0]), worker="worker_1"), steps(np.array([2.0]))]), bins=1)
    assert two["worker"].tolist() == ["worker_0", "worker_1"]  # by worker, whatever the order read
    assert step_histogram(data()).empty


# --- phase_ratios ----------------------------------------------------------------------------------------------
def test_phase_ratios_are_the_exact_shares_of_loop_and_step_time() -> None:
    tab = _tab([0, 2, 4], [1, 3, 5], [1, 1, 2])  # loop 5 s: train 2 s, eval 1 s, between 2 s
    tab.spans = _spans([1, 2, 3, 4, 5], [0.0, 0.5, 0.8, 1.5, 0.6], [0.5, 0.8, 0.9, 2.0, 0.7])
    out = phase_ratios(data([], [tab]))
    assert out["modes"] == pytest.approx({"train": 40.0, "eval": 20.0, "other": 40.0})
    # step time 3 s, plus 0.5 s of data loading: 3.5 s; other = 3 - (0.5 + 0.3 + 0.1)
    assert out["spans"] == pytest.approx(
        {
            "forward": 100 * 0.5 / 3.5,
            "backward": 100 * 0.3 / 3.5,
            "optimizer": 100 * 0.1 / 3.5,
            "dataloader": 100 * 0.5 / 3.5,
            "other": 100 * 2.1 / 3.5,
        },
        rel=1e-5,
    )
    assert phase_ratios(data()) == {"modes": {}, "spans": {}}


def test_spans_longer_than_the_steps_leave_no_negative_other() -> None:
    tab = _tab([0], [1], [1])
    tab.spans = _spans([1, 2], [0.0, 0.0], [1.0, 1.0])  # two full-step spans: 2 s of spans in a 1 s step
    out = phase_ratios(data([], [tab]))
    assert out["spans"] == {"forward": 100.0, "backward": 100.0, "optimizer": 0.0, "dataloader": 0.0, "other": 0.0}
    assert out["modes"] == {"train": 100.0, "other": 0.0}


# --- top_operators, python_hotspots ----------------------------------------------------------------------------
def _operators() -> pd.DataFrame:
    rows = [
        ["worker_0", 0, 5, "cpu", "aten::mm", 2, 300.0, 400.0],
        ["worker_0", 6, 9, "cpu", "aten::mm", 1, 100.0, 150.0],  # a second window of the same operator
        ["worker_0", 0, 5, "cpu", "aten::add", 4, 100.0, 100.0],
        ["worker_0", 0, 5, "cpu", "aten::relu", 1, 50.0, 60.0],
        ["worker_0", 0, 5, "gpu", "sgemm", 3, 800.0, 900.0],
        ["worker_0", 0, 5, "gpu", "relu_kernel", 3, 200.0, 200.0],
    ]
    return pd.DataFrame(rows, columns=OPERATOR_COLUMNS)


def test_top_operators_sum_windows_and_share_each_device() -> None:
    d = data()
    d.operators = _operators()
    top = top_operators(d, n=2)
    assert top[["device", "name", "calls", "self_time_us", "total_time_us"]].values.tolist() == [
        ["gpu", "sgemm", 3, 800.0, 900.0],
        ["cpu", "aten::mm", 3, 400.0, 550.0],
        ["gpu", "relu_kernel", 3, 200.0, 200.0],
        ["cpu", "aten::add", 4, 100.0, 100.0],
    ]
    assert top["percent"].tolist() == pytest.approx([80.0, 400 / 5.5, 20.0, 100 / 5.5])
    cpu = top_operators(d, device="cpu", n=20)
    assert cpu["name"].tolist() == ["aten::mm", "aten::add", "aten::relu"]
    assert cpu["percent"].sum() == pytest.approx(100.0) and set(cpu["device"]) == {"cpu"}
    assert top_operators(data()).columns.tolist() == [
        "worker",
        "device",
        "name",
        "calls",
        "self_time_us",
        "total_time_us",
        "percent",
    ]


def test_python_hotspots_leave_out_profiler_frames_and_keep_n_per_worker() -> None:
    rows = [
        ["worker_0", 0, 5, "forward", "/home/me/train.py", 10, 5, 2.0, 3.0],
        ["worker_0", 6, 9, "forward", "/home/me/train.py", 10, 5, 1.0, 1.0],
        ["worker_0", 0, 5, "load", "/home/me/data.py", 3, 9, 2.5, 2.5],
        ["worker_0", 0, 5, "<built-in method _lsprof.enable>", "~", 0, 1, 9.0, 9.0],
        ["worker_1", 0, 5, "step", "/home/me/train.py", 20, 1, 0.5, 0.5],
    ]
    d = data()
    d.python_stats = pd.DataFrame(rows, columns=PYTHON_COLUMNS)
    hot = python_hotspots(d, n=1)
    assert hot[["worker", "function", "calls", "total_time_s", "cumulative_time_s"]].values.tolist() == [
        ["worker_0", "forward", 10, 3.0, 4.0],
        ["worker_1", "step", 1, 0.5, 0.5],
    ]
    everything = python_hotspots(d, n=10, include_own=True)
    assert everything["function"].tolist()[0] == "<built-in method _lsprof.enable>" and len(everything) == 4
    assert is_profiler_frame("<built-in method _lsprof.enable>", "~") and not is_profiler_frame("forward", "~")
    assert python_hotspots(data()).empty


# --- loaders, dataloader_statistics ----------------------------------------------------------------------------
def _loader_tab() -> FrameworkTables:
    # TRAIN steps at 0-1, 2-3, 4-5; an EVAL step at 6-7; waits before each (the last wait inside the eval step)
    tab = _tab([0, 2, 4, 6], [1, 3, 5, 7], [1, 1, 1, 2])
    tab.spans = _spans(
        [4, 4, 4, 4, 4],
        [-0.5, 1.5, 3.5, 3.7, 6.2],
        [-0.4, 1.7, 3.8, 3.9, 6.7],
        workers=[4, 4, 2, 4, 0],
    )
    tab.loaders = [
        {"time": T0 - 1, "num_workers": 4, "batch_size": 32},
        {"time": T0 + 6.1, "num_workers": 0, "batch_size": 8},
    ]
    return tab


def test_the_training_loader_is_the_one_feeding_train_steps() -> None:
    tab = _loader_tab()
    assert training_loader_of(tab) == {"num_workers": 4, "batch_size": 32}  # not the eval loader that ran last
    assert training_loader(data([], [tab])) == {"num_workers": 4, "batch_size": 32}
    assert training_loader_of(_tab([0], [1], [1])) is None and training_loader(data()) is None


def test_a_wait_ending_inside_a_step_belongs_to_that_step() -> None:
    tab = _tab([0, 2], [1, 3], [2, 1])  # an EVAL step, then a TRAIN step
    tab.spans = _spans([4, 4], [0.2, 1.5], [1.0, 1.6], workers=[0, 6])  # the first wait ends at the eval step's end
    assert training_loader_of(tab) == {"num_workers": 6, "batch_size": None}
    tab.spans = _spans([4, 4], [0.2, 1.5], [1.2, 1.6], workers=[0, 6])  # now it ends after: it fed the next step
    assert training_loader_of(tab) == {"num_workers": 0, "batch_size": None}  # both fed TRAIN: 0 and 6 tie, 0 first
    only_eval = _tab([0], [1], [2])
    only_eval.spans = _spans([4, 4, 4], [-1, -0.5, 0.2], [-0.9, -0.4, 0.3], workers=[2, 2, -1])
    assert training_loader_of(only_eval) == {"num_workers": 2, "batch_size": None}  # the most common, -1 left out


def test_dataloader_statistics_are_exact() -> None:
    tab = _loader_tab()
    row = dataloader_statistics(data([], [tab])).iloc[0]
    waits = np.array([0.1, 0.2, 0.3, 0.2, 0.5])
    assert row["worker"] == "worker_0" and row["num_workers"] == 4 and row["count"] == 5
    assert row[["mean_s", "p50_s", "p95_s", "max_s", "total_s"]].tolist() == pytest.approx(
        [waits.mean(), 0.2, 0.46, 0.5, 1.3]
    )
    assert row["loop_percent"] == pytest.approx(100 * 1.3 / 7.0)
    no_steps = FrameworkTables("worker_1")
    no_steps.spans = _spans([4], [0.0], [0.25])
    lone = dataloader_statistics(data([], [no_steps])).iloc[0]
    assert lone["total_s"] == 0.25 and np.isnan(lone["loop_percent"])
    assert dataloader_statistics(data([], [_tab([0], [1], [1])])).empty


# --- timed_step_counts -----------------------------------------------------------------------------------------
def test_timed_steps_are_the_most_of_any_worker_per_mode() -> None:
    a = _tab([0, 1, 2, 3], [0.5, 1.5, 2.5, 3.5], [1, 1, 1, 2])
    b = _tab([0, 1, 2, 3], [0.5, 1.5, 2.5, 3.5], [1, 1, 2, 2], worker="worker_1")
    assert timed_step_counts(data([], [a, b])) == {"TRAIN": 3, "EVAL": 2}
    only_global = _tab([0, 1], [0.5, 1.5], [4, 4])
    assert timed_step_counts(data([], [only_global])) == {"GLOBAL": 2}
    mixed = _tab([0, 1, 2], [0.5, 1.5, 2.5], [4, 3, 4])
    assert timed_step_counts(data([], [mixed])) == {"PREDICT": 1}


# --- cuda_memory_statistics ------------------------------------------------------------------------------------
def test_cuda_memory_first_last_max_and_growth() -> None:
    tab = _tab([0, 1, 2, 3], [0.5, 1.5, 2.5, 3.5], [1, 1, 1, 1])
    tab.step_metrics = {
        "global_step": np.arange(4, dtype=np.int64),
        "time": T0 + np.arange(4.0),
        "gpu1_memory_allocated_bytes": np.array([100.0, np.nan, 300.0, 250.0]),
        "gpu1_memory_reserved_bytes": np.array([512.0, 1024.0, np.nan, 512.0]),
        "gpu1_memory_peak_allocated_bytes": np.full(4, np.nan),
        "gpu0_memory_allocated_bytes": np.full(4, np.nan),  # a device with no finite sample has no row
    }
    frame = cuda_memory_statistics(data([], [tab]))
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["device"] == "gpu1" and row["steps"] == 3
    assert row[["allocated_first_bytes", "allocated_last_bytes", "allocated_max_bytes", "growth_bytes"]].tolist() == [
        100.0,
        250.0,
        300.0,
        150.0,
    ]
    assert row["reserved_max_bytes"] == 1024.0 and np.isnan(row["peak_bytes"])
    assert cuda_memory_statistics(data([], [_tab([0], [1], [1])])).empty


def test_system_arrays_cpu_total_is_the_mean_of_the_cores() -> None:
    arrays = SystemArrays(
        "n0",
        np.array([0.0, 1.0]),
        ("cpu0_utilization_percent", "cpu1_utilization_percent"),
        np.array([[10.0, 30.0], [np.nan, 50.0]], np.float32),
    )
    assert arrays.cpu_total().tolist() == [20.0, 50.0]
