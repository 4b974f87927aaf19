"""Utilisation histograms, the heatmap and the ranks' step-cycle split give the exact figures of small inputs.

Bin boundaries (a sample on an edge), clipping, bucket widths, thinning limits and every part of a step cycle are
worked out by hand here; a moved boundary or a changed constant changes one of them.
"""

from __future__ import annotations

import numpy as np
import pytest
from profiler_synth import T0, data

from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.heatmap import heatmap
from trainspect.profiler.histograms import DEFAULT_BINS, histogram_edges, utilisation_histograms
from trainspect.profiler.ranks import RANK_COLUMNS, rank_times, step_cycles

NAN = np.nan


def _arrays(node: str = "n0", **cols: list[float]) -> SystemArrays:
    n = len(next(iter(cols.values())))
    values = np.array([cols[k] for k in cols], dtype=np.float32).T.reshape(n, len(cols))
    return SystemArrays(node, T0 + np.arange(n, dtype=np.float64), tuple(cols), values, 1000)


# --- histograms --------------------------------------------------------------------------------------------------
def test_a_sample_on_an_edge_counts_in_the_bin_above_and_out_of_range_samples_clip() -> None:
    cpu0 = [0.0, 24.9, 25.0, 50.0, 99.9, 100.0, -5.0, 120.0, NAN]
    h = utilisation_histograms(_arrays(cpu0_utilization_percent=cpu0), bins=4)["n0"]["cpu0"]
    assert h.edges == (0.0, 25.0, 50.0, 75.0, 100.0)
    assert h.counts == (3, 1, 1, 3) and h.samples == 8  # NaN is not counted
    assert h.mean == pytest.approx(414.8 / 8, rel=1e-6)  # the mean of the samples as recorded, not clipped


def test_devices_in_order_with_totals_over_cores_and_aligned_gpus() -> None:
    arrays = _arrays(
        cpu1_utilization_percent=[10.0, 30.0],
        cpu0_utilization_percent=[50.0, 70.0],
        gpu0_utilization_percent=[10.0, NAN],
        gpu1_utilization_percent=[NAN, 30.0],
    )
    hists = utilisation_histograms(arrays, bins=[0.0, 15.0, 100.0])["n0"]
    assert list(hists) == ["cpu_total", "cpu0", "cpu1", "gpu0", "gpu1", "gpu_total"]
    assert hists["cpu_total"].mean == 40.0 and hists["cpu_total"].counts == (0, 2)
    # GPU 1 not yet sampled in row 0: the total is GPU 0's 10; in row 1 the mean of 10 (latest) and 30
    assert hists["gpu_total"].mean == 15.0 and hists["gpu_total"].counts == (1, 1)
    assert hists["gpu0"].samples == 1 and hists["gpu0"].to_dict()["counts"] == [1, 0]


def test_a_node_with_one_cpu_column_and_nothing_sampled() -> None:
    hists = utilisation_histograms({"b": _arrays("b", cpu_utilization_percent=[NAN, NAN])}, bins=2)["b"]
    assert list(hists) == ["cpu_total"]
    assert hists["cpu_total"].samples == 0 and hists["cpu_total"].counts == (0, 0)
    assert hists["cpu_total"].to_dict()["mean"] is None
    assert utilisation_histograms({"c": _arrays("c", cpu_iowait_percent=[1.0])}) == {"c": {}}


def test_start_and_end_both_count() -> None:
    arrays = _arrays(cpu0_utilization_percent=[10.0, 20.0, 30.0, 40.0])
    h = utilisation_histograms(arrays, bins=2, start=T0 + 1, end=T0 + 2)["n0"]["cpu0"]
    assert h.samples == 2 and h.mean == 25.0
    assert utilisation_histograms(arrays, bins=2, start=T0 + 1)["n0"]["cpu0"].samples == 3
    assert utilisation_histograms(arrays, bins=2, end=T0 + 1)["n0"]["cpu0"].samples == 2


def test_histogram_edges_accept_one_bin_and_reject_fewer_or_unordered() -> None:
    assert histogram_edges().tolist() == np.linspace(0, 100, DEFAULT_BINS + 1).tolist() and DEFAULT_BINS == 20
    assert histogram_edges(1).tolist() == [0.0, 100.0]
    assert histogram_edges([0.0, 100.0]).tolist() == [0.0, 100.0]
    for bad in (0, -1, [5.0], [0.0, 50.0, 50.0], [0.0, 60.0, 50.0]):
        with pytest.raises(ValueError, match="bins="):
            histogram_edges(bad)


# --- heatmap -----------------------------------------------------------------------------------------------------
def _steps_at(starts: list[float], node: str = "n0", worker: str = "worker_0") -> FrameworkTables:
    tab = FrameworkTables(worker, node)
    n = len(starts)
    t = T0 + np.asarray(starts, dtype=np.float64)
    tab.steps = {
        "mode": np.ones(n, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": t,
        "end": t + 0.5,
    }
    return tab


def test_heatmap_buckets_means_and_step_boundaries() -> None:
    arrays = _arrays(
        cpu0_utilization_percent=[10.0, 20.0, 30.0, 40.0],
        cpu1_utilization_percent=[NAN, NAN, NAN, NAN],
        gpu0_utilization_percent=[1.234, 5.678, 0.0, 1.0],
    )
    other = _steps_at([0.5], node="n1", worker="worker_9")  # another node's steps are not this node's boundaries
    out = heatmap(data([arrays], [_steps_at([-1.0, 0.0, 3.0, 4.0]), other]), max_columns=2)
    assert out["node"] == "n0" and out["rows"] == ["cpu0", "cpu1", "gpu0"]
    assert out["bucket_s"] == 1.5 and out["times"] == [T0, T0 + 1.5]  # the last sample falls in the last bucket
    assert out["values"] == [[15.0, 35.0], [None, None], [3.46, 0.5]]
    assert out["step_boundaries"] == [T0, T0 + 3.0]  # both ends of the range count


def test_heatmap_columns_are_at_most_the_samples_and_boundaries_are_thinned() -> None:
    arrays = _arrays(cpu0_utilization_percent=[10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0])
    out = heatmap(data([arrays], [_steps_at([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]), max_columns=1)
    assert out["values"] == [[40.0]] and out["bucket_s"] == 6.0
    assert out["step_boundaries"] == [T0, T0 + 2.0, T0 + 4.0, T0 + 6.0]  # 7 boundaries thinned to 4 per column
    four = heatmap(data([arrays], [_steps_at([0.0, 1.0, 2.0, 3.0])]), max_columns=1)
    assert len(four["step_boundaries"]) == 4  # at the limit: all kept
    wide = heatmap(arrays, max_columns=100)
    assert len(wide["times"]) == 7 and wide["bucket_s"] == pytest.approx(6 / 7) and wide["step_boundaries"] == []
    window = heatmap(arrays, start=T0 + 2, end=T0 + 4, max_columns=2)
    assert window["values"] == [[30.0, 45.0]] and window["times"] == [T0 + 2, T0 + 3]


def test_heatmap_of_one_sample_one_node_and_no_data() -> None:
    one = heatmap(_arrays(cpu0_utilization_percent=[42.0]))
    assert one["values"] == [[42.0]] and 0 < one["bucket_s"] < 1e-6
    two = data([_arrays("a", cpu0_utilization_percent=[1.0, 2.0]), _arrays("b", cpu0_utilization_percent=[5.0, 7.0])])
    assert heatmap(two)["node"] == "a" and heatmap(two, node="b", max_columns=1)["values"] == [[6.0]]
    empty = heatmap(data())
    assert empty == {"node": None, "rows": [], "times": [], "bucket_s": 0.0, "values": [], "step_boundaries": []}


# --- ranks -------------------------------------------------------------------------------------------------------
def _rank_tab(worker: str = "worker_0", sync: bool = True) -> FrameworkTables:
    # TRAIN steps 0-1, 2-3, 4-5, 6-7, then two EVAL steps: three training cycles of 2 s, each with a 1 s step
    starts = np.array([0.0, 2.0, 4.0, 6.0, 8.0, 9.0])
    tab = FrameworkTables(worker, "n0")
    tab.steps = {
        "mode": np.array([1, 1, 1, 1, 2, 2], np.uint8),
        "mode_step": np.arange(6, dtype=np.int64),
        "global_step": np.arange(6, dtype=np.int64),
        "start": T0 + starts,
        "end": T0 + starts + np.array([1.0, 1.0, 1.0, 1.0, 0.5, 0.5]),
    }
    kinds = [4, 4] + ([5, 5] if sync else [])
    start = [1.5, 4.1] + ([2.6, 3.5] if sync else [])
    end = [1.9, 4.3] + ([2.8, 3.7] if sync else [])
    # the second wait is recorded with its step (2), though it lies between steps 1 and 2
    glob = [-1, -1] + ([-1, 2] if sync else [])
    tab.spans = {
        "kind": np.array(kinds, np.uint8),
        "start": T0 + np.array(start),
        "end": T0 + np.array(end),
        "global_step": np.array(glob, np.int64),
        "workers": np.full(len(kinds), -1, np.int16),
        "pid": np.zeros(len(kinds), np.int64),
    }
    return tab


def test_step_cycles_split_each_cycle_exactly() -> None:
    cyc = step_cycles(_rank_tab())
    assert cyc.steps.tolist() == [1, 2, 3] and len(cyc) == 3 and cyc.sync_recorded
    close = {"abs": 1e-6}
    assert cyc.cycle_s.tolist() == pytest.approx([2.0, 2.0, 2.0], **close)
    assert cyc.step_s.tolist() == pytest.approx([1.0, 1.0, 1.0], **close)
    assert cyc.sync_s.tolist() == pytest.approx([0.2, 0.2, 0.0], **close)
    assert cyc.loader_s.tolist() == pytest.approx([0.4, 0.2, 0.0], **close)
    assert cyc.compute_s.tolist() == pytest.approx([0.8, 0.6, 1.0], **close)  # less the wait inside step 2
    assert cyc.between_s.tolist() == pytest.approx([0.6, 1.0, 1.0], **close)
    assert cyc.busy_s.tolist() == pytest.approx([1.8, 1.8, 2.0], **close)


def test_rank_times_are_the_medians_per_worker() -> None:
    frame = rank_times(data([], [_rank_tab("worker_1", sync=False), _rank_tab("worker_0")]))
    assert list(frame.columns) == RANK_COLUMNS and frame["worker"].tolist() == ["worker_0", "worker_1"]
    w0, w1 = frame.iloc[0], frame.iloc[1]
    assert w0["cycles"] == 3 and bool(w0["sync_recorded"]) and not bool(w1["sync_recorded"])
    assert w0[["compute_s", "loader_s", "between_s", "sync_s", "busy_s", "step_s"]].tolist() == pytest.approx(
        [0.8, 0.2, 1.0, 0.2, 1.8, 1.0], abs=1e-6
    )
    # no synchronisation recorded: the compute is the step less the wait inside it, 1.0, 0.8, 1.0
    assert w1[["compute_s", "sync_s", "busy_s"]].tolist() == pytest.approx([1.0, 0.0, 2.0], abs=1e-6)
    assert len(rank_times(data([], [_rank_tab()]), min_cycles=3)) == 1
    assert rank_times(data([], [_rank_tab()]), min_cycles=4).empty


def test_cycles_of_a_run_without_training_steps_are_its_other_cycles() -> None:
    tab = _rank_tab()
    tab.steps["mode"] = np.array([2, 2, 2, 3, 3, 3], np.uint8)
    cyc = step_cycles(tab)
    assert cyc.steps.tolist() == [1, 2, 4, 5]  # the switch from EVAL to PREDICT starts no cycle


def test_a_wait_recorded_with_its_step_belongs_to_that_steps_cycle() -> None:
    tab = _rank_tab(sync=False)
    tab.spans = {
        k: np.append(v, x) for (k, v), x in zip(tab.spans.items(), (4, T0 + 0.5, T0 + 0.6, 3, -1, 0), strict=True)
    }
    cyc = step_cycles(tab)  # Keras times the wait for step 3's batch inside step 0's time
    assert cyc.loader_s.tolist() == pytest.approx([0.4, 0.2, 0.1], abs=1e-6)
    assert cyc.between_s.tolist() == pytest.approx([0.6, 1.0, 0.9], abs=1e-6)


def test_a_step_ending_with_the_previous_one_starts_no_cycle() -> None:
    tab = _rank_tab(sync=False)
    tab.steps["end"][2] = tab.steps["end"][1]  # step 2 ends with step 1 (a duplicate record): a cycle of 0 s
    cyc = step_cycles(tab)
    assert cyc.steps.tolist() == [1, 3] and cyc.cycle_s.tolist() == pytest.approx([2.0, 4.0], abs=1e-6)


def test_a_wait_ending_exactly_at_its_steps_end_is_inside_it() -> None:
    tab = _rank_tab()
    tab.spans["start"][2], tab.spans["end"][2] = T0 + 2.8, T0 + 3.0  # step 1's sync wait ends as step 1 ends
    cyc = step_cycles(tab)
    assert cyc.sync_s.tolist() == pytest.approx([0.2, 0.2, 0.0], abs=1e-6)
