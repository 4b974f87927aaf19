"""The numbers the report's sections and charts print: formats, unit scales, advice cut-offs, counts in notes.

Sections are built on in-memory profiler data; each expected text is the figure worked out by hand, so a moved
cut-off, a unit factor or a count off by one changes a sentence or a cell.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainspect._units import duration
from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.data import ProfilerData
from trainspect.report import charts
from trainspect.report._framework_sections import (
    CudaMemorySection,
    DataloaderSection,
    OperatorSection,
    PhaseRatioSection,
    StepDurationSection,
    _advice,
    _outliers_text,
    outlier_steps,
)
from trainspect.report._system_sections import (
    MIN_SAMPLES,
    CostSection,
    HeatmapSection,
    JobSummarySection,
    SystemUsageSection,
    human,
    usage_advice,
    with_job_rows,
)
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page, sig
from trainspect.rules.verdict import Status, Verdict

T0 = 1_700_000_000.0


def _system(n: int, node: str = "n0", **cols: float | np.ndarray) -> SystemArrays:
    values = np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), n) for v in cols.values()], axis=1)
    return SystemArrays(node, T0 + np.arange(n, dtype=np.float64), tuple(cols), values.astype(np.float32), 1000)


def _tab(starts: list[float], ends: list[float], modes: list[int] | None = None, worker: str = "w0") -> FrameworkTables:
    tab = FrameworkTables(worker, "n0", process_start=T0, recorder_start=T0)
    n = len(starts)
    tab.steps = {
        "mode": np.asarray(modes or [1] * n, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": T0 + np.asarray(starts, dtype=np.float64),
        "end": T0 + np.asarray(ends, dtype=np.float64),
    }
    return tab


def _ctx(tmp_path: Path, system: list[SystemArrays] = (), framework: list[FrameworkTables] = (), **kw) -> ReportContext:  # type: ignore[assignment]
    prof = ProfilerData(
        tmp_path, system={a.node: a for a in system}, framework={t.worker: t for t in framework}, job_ended=True
    )
    return ReportContext(run_dir=tmp_path, profiler=prof, **kw)


def _texts(page: Page, kind: str | None = None) -> list[str]:
    return [b["text"] for b in page.blocks if "text" in b and (kind is None or b["kind"] == kind)]


# --- number formats ----------------------------------------------------------------------------------------------
def test_sig_switches_format_at_its_bounds() -> None:
    assert [sig(x) for x in (0.001, 0.000999, 99.94, 100.4, 1e11, 1e12, -2.5e-4, 0.0)] == [
        "0.001",
        "9.99e-4",
        "99.9",
        "100",
        "100,000,000,000",
        "1e+12",
        "-2.5e-4",
        "0",
    ]
    assert sig(float("inf")) == "Inf" and sig(float("-inf")) == "-Inf" and sig(1234.5, digits=5) == "1234.5"


def test_page_cells_format_integers_with_separators_from_ten_thousand() -> None:
    page = Page()
    page.kv([("a", 9999), ("b", 10000), ("c", np.int64(-12345)), ("d", True), ("e", None), ("f", np.float32(0.5))])
    assert page.blocks[0]["rows"] == [
        ("a", "9999"),
        ("b", "10,000"),
        ("c", "-12,345"),
        ("d", "yes"),
        ("e", "–"),
        ("f", "0.5"),
    ]
    page.table(["x", "y"], [[1, "a"], [None, "b"]])
    assert page.blocks[1]["num"] == [True, False]


def test_human_scales_bytes_by_thousands() -> None:
    assert human(999.0, "bytes") == "999 B" and human(1000.0, "bytes") == "1 KB"
    assert human(2.5e6, "bytes/s") == "2.5 MB/s" and human(3e9, "bytes") == "3 GB"
    assert human(5e15, "bytes") == "5,000 TB" and human(float("nan"), "percent") == "–"
    assert human(7.0, "W") == "7 W" and human(7.0, "") == "7"


def test_durations_are_labelled_in_their_unit() -> None:
    assert [duration(x) for x in (0.000999, 0.001, 0.999, 1.0, 12.345)] == ["999 µs", "1 ms", "999 ms", "1 s", "12.3 s"]


# --- advice ------------------------------------------------------------------------------------------------------
def test_usage_advice_cut_offs_and_figures() -> None:
    assert usage_advice(69.6, None, None).startswith("CPU utilisation p95 is 70%: the node is underused.")
    assert usage_advice(70.0, None, None).startswith("No GPU was recorded")
    assert usage_advice(20.0, 69.9, 10.0).startswith("GPU utilisation p95 is 70% and CPU p95 20%: the instance is")
    assert usage_advice(70.0, 40.0, 10.0).startswith("GPU utilisation p95 is 40% while CPU p95 is 70%: a CPU bottl")
    assert usage_advice(10.0, 95.0, 70.0).startswith("GPU utilisation p95 is 95% but p50 only 70%: the GPUs are busy")
    assert usage_advice(10.0, 95.0, 70.5) == "GPUs are well utilised (p50 70%)."
    assert usage_advice(10.0, 70.0, 50.0).startswith("GPU utilisation p95 is 70% but p50 only 50%")  # not underused
    assert usage_advice(10.0, 95.0, None).startswith("GPU utilisation p95 is 95% but p50 only 0%")  # p50 unknown
    assert usage_advice(None, 40.0, 5.0).startswith("GPU utilisation p95 is 40% and CPU p95 0%: the instance")


def test_dataloader_advice_cut_offs() -> None:
    # 8 cores: fewer than 70 % of them (5.6) is few, more than 200 % (16) is many; a wait over 10 % matters
    assert _advice("w0", 5, 10.5, 8).endswith(
        "increase dataloader workers (num_workers=5) (up to 8, the number of cores), set pin_memory=True and pre-fetch."
    )
    assert _advice("w0", 5, 10.0, 8) == "w0 waited for data 10% of its training loop: data loading is not a bottleneck."
    assert _advice("w0", 6, 50.0, 8).endswith("data loading is not a bottleneck.")
    assert _advice("w0", 16, 1.0, 8).endswith("data loading is not a bottleneck.")
    assert _advice("w0", 17, 1.0, 8) == (
        "w0 waited for data 1% of its training loop; 17 dataloader workers on 8 cores: decrease num_workers to avoid "
        "contention."
    )
    assert "(num_workers=None), set" in _advice("w0", float("nan"), 40.0, 0)


# --- outlier notes -----------------------------------------------------------------------------------------------
def _outlier_verdict(count: int, status: Status = Status.NO_ISSUES_FOUND, **params: object) -> Verdict:
    d = {
        "number_of_outliers": count,
        "threshold_s": 0.25,
        "step_numbers": list(range(count)),
        "stall_step_numbers": [3, 4],
        "lost_percent": 12.345,
    }
    return Verdict(
        "StepOutlier", status, details={"w0/TRAIN": d, "w1/TRAIN": {"number_of_outliers": 0}}, parameters=params
    )


def test_outlier_notes_list_ten_steps_and_count_the_rest() -> None:
    v = _outlier_verdict(12, literal=False, mad_factor=5.0)
    assert outlier_steps(v) == {"w0/TRAIN": list(range(12))}
    assert _outliers_text(v, "w0/TRAIN", list(range(12))) == (
        "w0/TRAIN: 12 step(s) longer than StepOutlier's threshold 250 ms (median + 5·MAD): "
        "steps 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more"
    )
    ten = _outlier_verdict(10, Status.ISSUES_FOUND, literal=True, stddev=3.0)
    assert _outliers_text(ten, "w0/TRAIN", list(range(10))) == (
        "w0/TRAIN: 10 step(s) longer than StepOutlier's threshold 250 ms (mean + 3·std): "
        "steps 0, 1, 2, 3, 4, 5, 6, 7, 8, 9; the stalls among them (steps 3, 4) cost 12.3% of the training loop"
    )
    bare = _outlier_verdict(1)  # a verdict without its parameters (written by an older version): no rule named
    assert _outliers_text(bare, "w0/TRAIN", [0]).startswith(
        "w0/TRAIN: 1 step(s) longer than StepOutlier's threshold 250 ms: steps 0"
    )


def test_the_step_section_says_what_the_outliers_cost(tmp_path: Path) -> None:
    tab = _tab([0, 1, 2], [0.5, 1.5, 2.9])
    page = Page()
    StepDurationSection().build(
        _ctx(tmp_path, framework=[tab], verdicts=[_outlier_verdict(1, Status.ISSUES_FOUND)]), page
    )
    warn = _texts(page, "warn")
    assert len(warn) == 1 and warn[0].startswith("w0/TRAIN: 1 step(s) longer than StepOutlier's threshold 250 ms")
    assert page.blocks[0]["rows"][0][:3] == ["w0", "TRAIN", "3"]
    assert sum(1 for b in page.blocks if b["kind"] == "chart") == 2  # one histogram, one timeline


# --- sections ----------------------------------------------------------------------------------------------------
def test_job_summary_warns_when_initialization_outlasts_the_loop(tmp_path: Path) -> None:
    tab = _tab([10.0], [19.0])
    tab.close_time = T0 + 20
    page = Page()
    JobSummarySection().build(_ctx(tmp_path, framework=[tab]), page)
    assert _texts(page, "warn")[0].startswith("Initialization took longer than the training loop")
    rows = dict(page.blocks[0]["rows"])
    assert (rows["Job duration (s)"], rows["Initialization %"], rows["Finalization (s)"]) == ("20", "50", "1")
    page = Page()
    JobSummarySection().build(_ctx(tmp_path, framework=[_tab([10.0], [20.0])]), page)
    assert _texts(page, "warn") == []  # 10 s each: not longer


def test_system_usage_says_how_few_samples_there_were(tmp_path: Path) -> None:
    assert MIN_SAMPLES == 5
    few = _system(4, cpu0_utilization_percent=50.0)
    page = Page()
    SystemUsageSection().build(_ctx(tmp_path, system=[few]), page)
    assert any(t.startswith("Only 4 system sample(s) were recorded on n0 (every 1000 ms)") for t in _texts(page))
    assert not any(b["kind"] == "chart" for b in page.blocks)
    enough = _system(5, cpu0_utilization_percent=50.0, process_cpu_utilization_percent=12.5)
    page = Page()
    SystemUsageSection().build(_ctx(tmp_path, system=[enough]), page)
    assert not any("system sample(s)" in t for t in _texts(page))
    assert any(b["kind"] == "chart" for b in page.blocks)
    assert _texts(page, "p")[0].startswith(
        "CPU p95: the training job's processes 12.5% of all cores; the whole host 50.0%"
    )
    table = next(b for b in page.blocks if b["kind"] == "table")
    assert table["rows"] == [
        ["CPU, training job's processes (% of all cores)", *["12.5 %"] * 6],
        ["CPU, whole host (mean of cores)", *["50 %"] * 6],
    ]


def test_heatmap_section_needs_five_samples_and_adds_job_rows(tmp_path: Path) -> None:
    page = Page()
    HeatmapSection().build(_ctx(tmp_path, system=[_system(4, cpu0_utilization_percent=50.0)]), page)
    assert _texts(page, "note") == ["Node n0: only 4 system sample(s), too few for a heatmap."]
    page = Page()
    HeatmapSection().build(_ctx(tmp_path, system=[_system(5, cpu0_utilization_percent=50.0)]), page)
    assert [b["kind"] for b in page.blocks] == ["p", "chart"]
    option = next(iter(page.charts.values()))
    assert option["title"]["text"] == "Utilisation % (n0, 0.8 s buckets)" and option["yAxis"]["data"] == ["cpu0"]
    assert page.blocks[1]["height"] == 220  # one row: the smallest chart


def test_the_heatmap_grows_with_its_rows_up_to_a_limit(tmp_path: Path) -> None:
    """14 px per row plus 140 px of title, axes and legend, between 220 and 900 px."""
    for cores, height in ((40, 14 * 40 + 140), (80, 900)):
        page = Page()
        cols = {f"cpu{i}_utilization_percent": float(i) for i in range(cores)}
        HeatmapSection().build(_ctx(tmp_path, system=[_system(5, **cols)]), page)
        option = next(iter(page.charts.values()))
        assert len(option["yAxis"]["data"]) == cores and page.blocks[1]["height"] == height


def test_job_rows_share_the_heatmaps_buckets() -> None:
    arr = _system(
        4,
        cpu0_utilization_percent=np.array([10.0, 20.0, 30.0, 40.0]),
        process_cpu_utilization_percent=np.array([1.0, np.nan, 3.0, 5.0]),
    )
    hm = {"rows": ["cpu0"], "times": [T0, T0 + 1.5], "bucket_s": 1.5, "values": [[15.0, 35.0]]}
    out = with_job_rows(hm, arr)
    assert out["rows"] == ["job CPU", "host CPU", "cpu0"]
    assert out["values"] == [[1.0, 4.0], [15.0, 35.0], [15.0, 35.0]]
    assert with_job_rows(hm, _system(4, cpu0_utilization_percent=1.0)) is hm  # no job CPU: unchanged


def test_cost_section_prices_the_run_and_flags_an_underused_instance(tmp_path: Path) -> None:
    arr = _system(3601, cpu0_utilization_percent=69.0)
    page = Page()
    CostSection().build(_ctx(tmp_path, system=[arr], price_per_hour=2.0), page)
    rows = dict(page.blocks[0]["rows"])
    assert (
        rows["Price per instance-hour"] == "$2.000" and rows["Cost"] == "$2.0000" and rows["Instances (nodes)"] == "1"
    )
    assert _texts(page, "warn")[0].startswith("Utilisation p95 is 69%: a smaller or cheaper instance")
    page = Page()
    CostSection().build(_ctx(tmp_path, system=[_system(10, cpu0_utilization_percent=70.0)], price_per_hour=2.0), page)
    assert _texts(page, "warn") == []


def test_phase_section_warns_over_a_quarter_between_steps(tmp_path: Path) -> None:
    # steps 0-1 and 2-3: the loop is 3 s, 1 s of it between steps (33 %)
    tab = _tab([0.0, 2.0], [1.0, 3.0])
    tab.spans = {
        "kind": np.array([1, 2], np.uint8),
        "start": T0 + np.array([0.0, 0.4]),
        "end": T0 + np.array([0.4, 1.0]),
        "global_step": np.full(2, -1, np.int64),
        "workers": np.full(2, -1, np.int16),
        "pid": np.zeros(2, np.int64),
    }
    page = Page()
    PhaseRatioSection().build(_ctx(tmp_path, framework=[tab]), page)
    assert _texts(page, "warn")[0].startswith("33% of the training loop was spent between steps")
    assert _texts(page, "p") == [
        "Forward to backward ratio: 0.67 (backward passes usually take about twice as long as forward passes)."
    ]
    page = Page()
    PhaseRatioSection().build(_ctx(tmp_path, framework=[_tab([0.0, 1.25], [1.0, 2.25])]), page)
    assert _texts(page, "warn") == []  # 0.25 of 2.25 s: 11 %
    page = Page()
    PhaseRatioSection().build(_ctx(tmp_path, framework=[_tab([0.0, 2.5], [1.5, 4.0])]), page)
    assert _texts(page, "warn") == []  # 1 of 4 s between steps: exactly a quarter, not more


def test_operator_and_memory_sections_state_their_figures(tmp_path: Path) -> None:
    import pandas as pd

    from trainspect.profiler.detailed import OPERATOR_COLUMNS

    ctx = _ctx(tmp_path)
    ctx.profiler.operators = pd.DataFrame(
        [["w0", 0, 3, "gpu", "sgemm", 2, 3_000_000.0, 3_500_000.0], ["w0", 0, 3, "gpu", "relu", 2, 1_000_000.0, 1e6]],
        columns=OPERATOR_COLUMNS,
    )
    page = Page()
    OperatorSection().build(ctx, page)
    assert _texts(page, "note") == ["No CPU operator was recorded in the detailed window."]
    assert _texts(page, "p") == ["The most expensive GPU operator is sgemm (75.0% of GPU self time on w0)."]
    table = next(b for b in page.blocks if b["kind"] == "table")
    assert table["rows"] == [
        ["w0", "sgemm", "2", "3,000,000", "3,500,000", "75"],
        ["w0", "relu", "2", "1,000,000", "1,000,000", "25"],
    ]
    option = next(iter(page.charts.values()))
    assert option["series"][0]["data"] == [1.0, 3.0]  # seconds, smallest first
    assert option["yAxis"]["data"] == ["relu", "sgemm"] and option["xAxis"]["type"] == "value"  # horizontal bars
    tab = _tab([0.0, 1.0], [0.5, 1.5])
    tab.step_metrics = {
        "global_step": np.arange(2, dtype=np.int64),
        "time": T0 + np.arange(2.0),
        "gpu0_memory_allocated_bytes": np.array([2.0**20, 3 * 2.0**20]),
    }
    page = Page()
    CudaMemorySection().build(_ctx(tmp_path, framework=[tab]), page)
    assert page.blocks[1]["rows"] == [["w0", "gpu0", "2", "1.0", "3.0", "3.0", "–", "–", "2.0"]]


def test_dataloader_section_warns_over_ten_percent(tmp_path: Path) -> None:
    tab = _tab([0.0, 1.0], [0.9, 1.9])
    tab.spans = {
        "kind": np.array([4, 4], np.uint8),
        "start": T0 + np.array([0.8, 0.9]),
        "end": T0 + np.array([0.9, 1.0]),
        "global_step": np.full(2, -1, np.int64),
        "workers": np.array([2, 2], np.int16),
        "pid": np.zeros(2, np.int64),
    }
    page = Page()
    DataloaderSection().build(_ctx(tmp_path, system=[_system(5, cpu0_utilization_percent=1.0)], framework=[tab]), page)
    # 0.2 s of waits in a 1.9 s loop: 10.5 %, over the 10 % that matters; 2 loaders on 1 core: not too many
    assert _texts(page, "warn") == ["w0 waited for data 11% of its training loop: data loading is not a bottleneck."]
    assert page.blocks[0]["rows"][0][:3] == ["w0", "2", "2"]
    option = next(iter(page.charts.values()))
    assert sum(option["series"][0]["data"]) == 2 and len(option["series"][0]["data"]) == 40


# --- charts ------------------------------------------------------------------------------------------------------
def test_downsample_means_and_maxima_per_bucket() -> None:
    x, y = charts.downsample(np.arange(6.0), np.array([1.0, np.nan, 3.0, 4.0, np.nan, np.nan]), 3)
    assert x.tolist() == [0.0, 2.0, 4.0] and y[:2].tolist() == [1.0, 3.5] and np.isnan(y[2])
    _, peaks = charts.downsample(np.arange(6.0), np.array([1.0, 2.0, 3.0, 9.0, np.nan, np.nan]), 3, how="max")
    assert peaks[:2].tolist() == [2.0, 9.0] and np.isnan(peaks[2])
    same_x, same_y = charts.downsample([1.0, 2.0], [3.0, 4.0], 2)
    assert same_y.tolist() == [3.0, 4.0]


def test_a_log_axis_needs_positive_values_spanning_more_than_a_thousand() -> None:
    assert not charts.wants_log([np.array([1.0, 1000.0])]) and charts.wants_log([np.array([1.0, 1000.1])])
    assert not charts.wants_log([np.array([0.0, 1e6])]) and not charts.wants_log([])
    assert charts.wants_log([np.array([1.0, 2.0])], threshold=5000.0)


def test_line_chart_marks_triggers_thresholds_and_the_first_nan() -> None:
    option = charts.line_chart(
        {"loss": ([0, 1, 2, 3], [1.0, 0.5, np.nan, 0.25])}, x_type="value", mark_x=[1, 3], threshold=0.3
    )
    names = [s["name"] for s in option["series"]]
    assert names == ["loss", "triggers (2)", "NaN/Inf in loss"]
    assert option["series"][0]["markLine"]["label"]["formatter"] == "threshold 0.3"
    assert option["series"][1]["data"] == [[1.0, 0.5], [3.0, 0.25]]
    assert option["series"][2]["markLine"]["label"]["formatter"] == "first NaN/Inf: step 2"
    assert option["series"][2]["data"] == [[2.0, 1.0]]  # at the chart's top: the largest finite value
    assert option["yAxis"]["type"] == "value" and option["xAxis"]["minInterval"] == 1
    timed = charts.line_chart({"a": ([T0 + 5, T0 + 6], [1.0, 2.0])}, y_unit="count", mark_x=[T0 + 6])
    assert timed["series"][0]["data"] == [[0.0, 1.0], [1.0, 2.0]] and timed["yAxis"]["minInterval"] == 1
    assert timed["series"][1]["data"] == [[1.0, 2.0]]  # the trigger at elapsed 1 s, on the value there


def test_pie_and_bar_charts_drop_what_cannot_be_drawn() -> None:
    pie = charts.pie_chart({"a": 1.23456, "b": 0.0, "c": float("nan")})
    assert pie["series"][0]["data"] == [{"name": "a", "value": 1.235}]
    bar = charts.bar_chart(["x", "y"], {"s": [float("nan"), 0.1234567]}, y_unit="count")
    assert bar["series"][0]["data"] == [None, 0.123457] and bar["yAxis"]["minInterval"] == 1


def test_elapsed_labels_keep_close_times_apart() -> None:
    assert charts.elapsed_labels([0, 0.25, 0.5]) == ["0.0 s", "0.2 s", "0.5 s"]
    assert charts.elapsed_labels([0, 0.01, 0.02]) == ["0.00 s", "0.01 s", "0.02 s"]
    assert charts.elapsed_labels([0, 599]) == ["0 s", "599 s"]
    assert charts.elapsed_labels([0, 300, 600]) == ["0:00", "5:00", "10:00"]
    assert charts.elapsed_labels([599, 600, 601]) == ["9:59", "10:00", "10:01"]  # a second apart: minutes past 10
    assert charts.elapsed_labels([]) == []


def test_heatmap_chart_marks_step_starts_up_to_its_limit() -> None:
    hm = {
        "rows": ["cpu0"],
        "times": [T0, T0 + 1, T0 + 2, T0 + 3],
        "bucket_s": 1.0,
        "values": [[1.0, None, 3.0, 4.0]],
        "step_boundaries": [T0 + 0.5, T0 + 1.5, T0 + 1.7, T0 + 9.0],
    }
    option = charts.heatmap_chart(hm, max_marks=3)
    assert option["yAxis"] == {"type": "category", "data": ["cpu0"], "inverse": True}  # the first row on top
    assert option["series"][0]["data"] == [[0, 0, 1.0], [2, 0, 3.0], [3, 0, 4.0]]
    assert option["series"][0]["markLine"]["data"] == [{"xAxis": "0 s"}, {"xAxis": "1 s"}, {"xAxis": "3 s"}]
    dense = charts.heatmap_chart(hm, max_marks=2)
    assert "markLine" not in dense["series"][0]
    assert dense["title"]["subtext"] == "step starts in 3 of 4 time buckets (too dense to mark)"


def test_a_failing_step_outlier_rule_loses_only_its_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trainspect.rules.profiler.step_outlier import StepOutlier

    def boom(self: object, data: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(StepOutlier, "evaluate", boom)
    page = Page()
    with caplog.at_level("WARNING", logger="trainspect.report._framework_sections"):
        StepDurationSection().build(_ctx(tmp_path, framework=[_tab([0, 1, 2], [0.5, 1.5, 2.9])]), page)
    assert [r.getMessage() for r in caplog.records] == ["trainspect report: StepOutlier failed: boom"]
    assert _texts(page) == [] and sum(b["kind"] == "chart" for b in page.blocks) == 2
