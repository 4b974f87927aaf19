"""Edges of the report and compare figures that other tests left open: what a user reads in a section or a chart.

The step histogram's bin labels, how many operators and Python hotspots a table lists, the data-loader wait share,
where NaN markers sit when no value is finite, the threshold line, and the error for a run that is neither a
directory nor an MLflow run id. Runs are built in memory; each expected figure is worked out by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.detailed import OPERATOR_COLUMNS, PYTHON_COLUMNS
from trainspect.report import charts
from trainspect.report._compare_rows import fairness, saving_row
from trainspect.report._framework_sections import OperatorSection, PythonSection, StepDurationSection, _advice
from trainspect.report._system_sections import JobSummarySection
from trainspect.report.compare import _charts as compare_charts
from trainspect.report.compare import compare_runs, summary_for
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page
from trainspect.report.summary import RunSummary, summarize

T0 = 1_700_000_000.0


def _tab(starts: list[float], ends: list[float], worker: str = "w0") -> FrameworkTables:
    tab = FrameworkTables(worker, "n0", process_start=T0, recorder_start=T0)
    n = len(starts)
    tab.steps = {
        "mode": np.ones(n, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": T0 + np.asarray(starts, dtype=np.float64),
        "end": T0 + np.asarray(ends, dtype=np.float64),
    }
    return tab


def _ctx(tmp_path: Path, framework: list[FrameworkTables] = ()) -> ReportContext:  # type: ignore[assignment]
    prof = ProfilerData(tmp_path, framework={t.worker: t for t in framework}, job_ended=True)
    return ReportContext(run_dir=tmp_path, profiler=prof)


def _table(page: Page) -> dict:
    return next(b for b in page.blocks if b["kind"] == "table")


# --- step durations ----------------------------------------------------------------------------------------------
def test_the_step_histogram_labels_each_bar_with_its_bin_centre(tmp_path: Path) -> None:
    # durations 0.5, 0.5 and 0.9 s: 50 bins of 8 ms from 0.5 s, centres 504 ms ... 896 ms
    page = Page()
    StepDurationSection().build(_ctx(tmp_path, [_tab([0, 1, 2], [0.5, 1.5, 2.9])]), page)
    hist = next(o for o in page.charts.values() if o["title"]["text"].startswith("Step duration histogram"))
    labels = hist["xAxis"]["data"]
    assert len(labels) == 50
    assert (labels[0], labels[25], labels[-1]) == ("504 ms", "704 ms", "896 ms")
    assert hist["series"][0]["data"][0] == 2 and hist["series"][0]["data"][-1] == 1  # two steps of 0.5 s, one of 0.9


# --- operators and Python hotspots -------------------------------------------------------------------------------
def test_the_operator_table_lists_the_fifteen_most_expensive_operators_of_a_device(tmp_path: Path) -> None:
    rows = [["w0", 0, 3, "gpu", f"op{i:02d}", 1, 1000.0 * (30 - i), 1000.0 * (30 - i)] for i in range(20)]
    ctx = _ctx(tmp_path)
    ctx.profiler.operators = pd.DataFrame(rows, columns=OPERATOR_COLUMNS)
    page = Page()
    OperatorSection().build(ctx, page)
    table = _table(page)
    assert [r[1] for r in table["rows"]] == [f"op{i:02d}" for i in range(15)]  # op15..op19 are left out
    option = next(iter(page.charts.values()))
    assert option["yAxis"]["data"] == [f"op{i:02d}" for i in range(9, -1, -1)]  # the chart: the top 10


def test_the_python_table_lists_the_twenty_functions_with_the_most_own_time(tmp_path: Path) -> None:
    rows = [
        {
            "worker": "w0",
            "start_step": 0,
            "end_step": 3,
            "function": f"f{i:02d}",
            "filename": "/job/train.py",
            "line": 10 + i,
            "calls": 1,
            "total_time_s": 0.1 * (30 - i),
            "cumulative_time_s": 0.2 * (30 - i),
        }
        for i in range(25)
    ]
    ctx = _ctx(tmp_path)
    ctx.profiler.python_stats = pd.DataFrame(rows)[PYTHON_COLUMNS]
    page = Page()
    PythonSection().build(ctx, page)
    table = _table(page)
    assert [r[1] for r in table["rows"]] == [f"f{i:02d}" for i in range(20)]  # f20..f24 are left out
    assert table["rows"][0][2:] == ["/job/train.py", "10", "1", "3", "6"]


# --- the run summary ---------------------------------------------------------------------------------------------
def test_the_data_loader_wait_is_the_share_of_the_training_loop(tmp_path: Path) -> None:
    tab = _tab([float(i) for i in range(10)], [i + 1.0 for i in range(10)])  # 10 steps of 1 s: a 10 s loop
    tab.spans = {
        "kind": np.full(4, 4, np.uint8),
        "start": T0 + np.array([0.0, 2.0, 4.0, 6.0]),
        "end": T0 + np.array([0.5, 2.5, 4.5, 6.5]),  # 4 waits of 0.5 s: 2 s of 10
        "global_step": np.arange(4, dtype=np.int64),
        "workers": np.full(4, 2, np.int16),
        "pid": np.full(4, -1, np.int64),
    }
    s = summarize(_ctx(tmp_path, [tab]))
    assert s.loop_s == pytest.approx(10.0) and s.dataloader_wait_percent == pytest.approx(20.0)
    row = next(
        r
        for r in compare_runs(s, RunSummary("b", dataloader_wait_percent=5.0))
        if r["key"] == "dataloader_wait_percent"
    )
    assert row["a"] == "20" and row["b"] == "5"


# --- charts ------------------------------------------------------------------------------------------------------
def test_nan_markers_of_a_series_without_a_finite_value_sit_at_zero_on_a_linear_axis() -> None:
    nan, inf = math.nan, math.inf
    option = charts.line_chart({"loss": ([0, 1, 2], [nan, inf, nan])}, x_type="value", log=False)
    marks = next(s for s in option["series"] if s["name"] == "NaN/Inf in loss")
    assert [y for _x, y in marks["data"]] == [0.0, 0.0, 0.0]
    assert marks["markLine"]["label"]["formatter"] == "first NaN/Inf: step 0"
    option = charts.line_chart({"loss": ([0, 1, 2], [nan, inf, nan])}, x_type="value", log=True)
    marks = next(s for s in option["series"] if s["name"] == "NaN/Inf in loss")
    assert [y for _x, y in marks["data"]] == [1.0, 1.0, 1.0]  # a log axis has no zero


def test_the_threshold_line_is_a_labelled_dashed_red_line_that_ignores_the_mouse() -> None:
    option = charts.line_chart({"grad": ([0, 1, 2], [1e-3, 1e-6, 1e-9])}, x_type="value", threshold=1e-7)
    line = option["series"][0]["markLine"]
    assert line["data"] == [{"yAxis": 1e-7}] and line["label"]["formatter"] == "threshold 1e-07"
    assert line["lineStyle"] == {"color": "#d32f2f", "type": "dashed"} and line["symbol"] == "none"
    assert line["silent"] is True  # no hover highlight and no pointer cursor over the curves it crosses


# --- compare -----------------------------------------------------------------------------------------------------
def test_a_run_that_is_neither_a_directory_nor_an_mlflow_run_id_is_refused_without_asking_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    with pytest.raises(FileNotFoundError) as err:
        summary_for(tmp_path / "no-such-run")
    assert str(err.value) == (
        f"{tmp_path / 'no-such-run'} is neither a run directory nor an MLflow run id (32 hex digits)"
    )
    assert not (tmp_path / "mlruns").exists()


def test_a_threshold_at_or_below_zero_is_drawn_on_a_linear_axis_and_left_out_on_a_log_axis() -> None:
    series = {"delta": ([0, 1, 2], [1.0, -1.0, 0.5])}
    for threshold in (0.0, -0.5):
        option = charts.line_chart(series, x_type="value", threshold=threshold, log=False)
        assert option["series"][0]["markLine"]["data"] == [{"yAxis": threshold}]
        option = charts.line_chart(
            {"grad": ([0, 1, 2], [1.0, 2.0, 3.0])}, x_type="value", threshold=threshold, log=True
        )
        assert "markLine" not in option["series"][0]  # a log axis has no place at or below zero


def test_a_utilisation_figure_one_run_has_alone_is_charted_for_both_runs() -> None:
    option = compare_charts(RunSummary("a", cpu_mean=50.0), RunSummary("b"))["util"]
    assert option["xAxis"]["data"] == ["CPU mean %"]
    assert [s["data"] for s in option["series"]] == [[50.0], [0.0]]
    assert compare_charts(RunSummary("a"), RunSummary("b")) == {}  # no utilisation figure in either run: no chart


def test_the_saving_of_runs_without_step_time_noise_has_a_zero_width_interval() -> None:
    a = RunSummary("a", loop_s=100.0, steps=1000, cycle_rel_se=0.0)
    b = RunSummary("b", loop_s=80.0, steps=1000, cycle_rel_se=0.0)
    fair = fairness(a, b)
    assert fair.noise == 0.0
    row = saving_row(a, b, fair)
    assert row["b"] == "20%" and row["change"] == "95% CI 20% to 20%" and row["winner"] == "b"


def test_the_job_summary_says_when_the_job_has_not_ended(tmp_path: Path) -> None:
    tab = _tab([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])  # steps 1 s after the process began: a short initialization
    notes, slices = {}, {}
    for ended in (True, False):
        tab.close_time = T0 + 5.0 if ended else None  # a worker that closed 1.5 s after its last step, or none yet
        prof = ProfilerData(tmp_path, framework={"w0": tab}, job_ended=ended)
        page = Page()
        JobSummarySection().build(ReportContext(run_dir=tmp_path, profiler=prof), page)
        notes[ended] = [b["text"] for b in page.blocks if b["kind"] == "note"]
        pie = next(o for o in page.charts.values() if o["title"]["text"] == "Job phases (seconds)")
        slices[ended] = {d["name"]: d["value"] for d in pie["series"][0]["data"]}
    assert notes[True] == []
    assert notes[False] == ["The job has not ended (no end marker): the figures cover what was recorded so far."]
    assert slices[True] == {"Initialization": 1.0, "Training loop": 2.5, "Finalization": 1.5}
    assert slices[False] == {"Initialization": 1.0, "Training loop": 2.5}  # no finalization time yet: no slice


def test_exactly_seventy_percent_as_many_loaders_as_cores_is_enough_for_the_worker_advice() -> None:
    # the Dataloader rule's cut-off (MIN_LOADERS_PERCENT): fewer than 70 % of the cores is few, 70 % is not
    assert (
        _advice("w0", 7, 50.0, 10) == "w0 waited for data 50% of its training loop: data loading is not a bottleneck."
    )
    assert "increase dataloader workers (num_workers=6)" in _advice("w0", 6, 50.0, 10)


def test_a_saving_below_one_percent_still_names_the_run_that_saves() -> None:
    a, b = RunSummary("a", loop_s=100.0, steps=1000), RunSummary("b", loop_s=99.5, steps=1000)  # no noise figure
    row = saving_row(a, b, fairness(a, b))
    assert row["b"] == "1%" and row["winner"] == "b"  # 0.5 % rounds to 1 %: B saves, A is not marked better
