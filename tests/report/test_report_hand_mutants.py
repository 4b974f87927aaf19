"""Figures, sentences and MLflow values that hand-written mutants of the report and the MLflow plugin got past.

Each test pins one documented, user-visible behaviour (docs/report.md, docs/mlflow.md) at the place where a
small slip (mean for median, ``>`` for ``>=``, the first for the last, per worker for per job) changes what a
user reads:

* the run summary (:mod:`trainspect.report.summary`): the job's own CPU before the host's, the GPU *mean*, the
  noisiest worker's step-cycle noise, the first step a loss became NaN, every StopTraining stop in the verdict;
* the comparison (:mod:`trainspect.report.compare`): which rows never rank (start-up), which way a row ranks (I/O
  wait), busier CPUs win only between two healthy CPU-only runs, the saving's interval read low to high, the
  unlike-runs sentence when B alone has issues, no saving for the same work when one run's work is unknown;
* the report's sections: the verdict badge's colour, the issues table's order and what it keeps out, the job's
  duration in its unit, the advice sentences at their cut-offs, the truncated lists ("and K more");
* the MLflow plugin: the summary metrics, the step axis of logged values and evaluations, the divergence tags.

Everything is built by hand (summaries, verdicts, profiler tables, a fake sink): no server, no clock, no sleep.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _support.fakes import LossTrial, RecordingSink

from trainspect.mlflow_plugin.divergence import Divergence
from trainspect.mlflow_plugin.params import hook_params, profiler_param
from trainspect.modes import ModeKeys
from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.config import FrameworkProfile, ProfilerConfig
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.histograms import UtilisationHistogram
from trainspect.report._compare_rows import fairness, metric_rows, saving_row
from trainspect.report._framework_sections import DataloaderSection, PhaseRatioSection
from trainspect.report._histogram_section import _node, histogram_findings
from trainspect.report._rule_sections import RulesSummarySection, TensorSection, TriggeredRulesSection
from trainspect.report._system_sections import CostSection, SystemUsageSection
from trainspect.report._verdict_section import VerdictSection, _duration, involved, triggered_first
from trainspect.report.compare import compare_note, saving_percent
from trainspect.report.context import REQUIREMENT_HINTS, ReportContext
from trainspect.report.render import skip_text
from trainspect.report.sections import Page
from trainspect.report.summary import RunSummary, relative_se, step_cycles, summarize
from trainspect.rules.verdict import Status, Verdict
from trainspect.step import StepRecord, TensorRecord

T0 = 1_700_000_000.0


# --- helpers -----------------------------------------------------------------------------------------------------
def _tab(
    durations: list[float], worker: str = "worker_0", gap: float = 0.0, start: float = T0 + 10.0
) -> FrameworkTables:
    """A worker's TRAIN steps back to back (``gap`` seconds between them) from ``start``."""
    d = np.asarray(durations, dtype=np.float64)
    starts = start + np.concatenate([[0.0], np.cumsum(d[:-1] + gap)])
    tab = FrameworkTables(worker, "n0", process_start=T0, recorder_start=T0)
    n = len(d)
    tab.steps = {
        "mode": np.ones(n, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": starts,
        "end": starts + d,
    }
    return tab


def _system(columns: dict[str, Any], node: str = "n0") -> SystemArrays:
    n = max(len(np.atleast_1d(v)) for v in columns.values())
    values = np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), n) for v in columns.values()], axis=1)
    return SystemArrays(node, T0 + np.arange(n, dtype=np.float64), tuple(columns), values.astype(np.float32), 1000)


def _ctx(
    tmp_path: Path, system: tuple[SystemArrays, ...] = (), framework: tuple[FrameworkTables, ...] = (), **kw: Any
) -> ReportContext:
    prof = ProfilerData(
        tmp_path, system={a.node: a for a in system}, framework={t.worker: t for t in framework}, job_ended=True
    )
    return ReportContext(run_dir=tmp_path, profiler=prof, **kw)


def _rows(a: RunSummary, b: RunSummary) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in metric_rows(a, b, fairness(a, b))}


def _blocks(page: Page, kind: str) -> list[dict[str, Any]]:
    return [b for b in page.blocks if b["kind"] == kind]


# --- the run summary ---------------------------------------------------------------------------------------------
def test_the_summary_takes_the_jobs_own_cpu_before_the_hosts(tmp_path: Path) -> None:
    # the host's cores are at 80 %, the training job's processes at 20 % of all cores: the summary is the job's
    arrays = _system(
        {"process_cpu_utilization_percent": np.full(10, 20.0), "cpu0_utilization_percent": np.full(10, 80.0)}
    )
    s = summarize(_ctx(tmp_path, system=(arrays,)))
    assert s.cpu_p95 == pytest.approx(20.0) and s.cpu_mean == pytest.approx(20.0)


def test_the_gpu_mean_is_a_mean_not_the_median(tmp_path: Path) -> None:
    # busy one second in four: the mean is 25 %, the median 0 %
    arrays = _system({"gpu0_utilization_percent": np.array([0.0, 0.0, 0.0, 100.0] * 5)})
    s = summarize(_ctx(tmp_path, system=(arrays,)))
    assert s.gpu_mean == pytest.approx(25.0)
    assert s.to_metrics()["trainspect/gpu_mean"] == pytest.approx(25.0)


def test_the_step_cycle_noise_is_the_noisiest_workers(tmp_path: Path) -> None:
    steady = _tab([0.1] * 40, "worker_0")
    bursty = _tab([0.1] * 20 + [0.3] * 20, "worker_1")  # slowed down halfway: the block means differ
    s = summarize(_ctx(tmp_path, framework=(steady, bursty)))
    starts = np.asarray(bursty.steps["start"])
    expected = relative_se(step_cycles(starts, np.asarray(bursty.steps["end"])))
    assert expected is not None and expected > 0.1
    assert s.cycle_rel_se == pytest.approx(expected)  # not the steady worker's (about 0)


def _diverging_trial() -> LossTrial:
    """A loss that becomes NaN at TRAIN step 2 (global 102) and Inf at step 4 (global 104)."""
    return LossTrial({0: 2.0, 1: 1.0, 2: float("nan"), 3: 1.0, 4: float("inf")})


def test_a_diverged_run_names_the_first_step_its_loss_became_nan(tmp_path: Path) -> None:
    s = summarize(_ctx(tmp_path, trial=_diverging_trial()))
    assert s.diverged == "loss NaN from step 102"  # the first NaN, not the later Inf
    assert s.verdict().startswith("diverged (loss NaN from step 102)")


def test_the_verdict_lists_every_stop() -> None:
    stops = ("stopped by StopTraining at step 52 (rule ExplodingTensor)", "stopped by StopTraining at step 60 (rule X)")
    assert RunSummary("a", stops=stops).verdict() == "; ".join(stops)


# --- the comparison ----------------------------------------------------------------------------------------------
def test_no_saving_for_the_same_work_when_one_runs_work_is_unknown() -> None:
    # A did 1,000 steps; B's steps are unknown: its cost per 1,000 steps is unknown, so is the saving
    a = RunSummary("a", duration_s=100.0, steps=1000, price_per_hour=1.0)
    b = RunSummary("b", duration_s=50.0, price_per_hour=1.0)
    assert saving_percent(a, b) is None
    row = saving_row(a, b, fairness(a, b))
    assert row["label"] == "projected time saving for the same work" and row["b"] == "–" and row["winner"] is None
    # neither knows its steps: the runs' total costs
    assert saving_percent(RunSummary("a", duration_s=100.0, price_per_hour=1.0), b) == pytest.approx(50.0)


def test_cpu_rows_rank_only_two_healthy_cpu_only_runs() -> None:
    healthy = RunSummary("a", cpu_mean=90.0, cpu_p95=95.0)
    flagged = RunSummary("b", cpu_mean=50.0, cpu_p95=60.0, issues=("CPUBottleneck",))
    rows = _rows(healthy, flagged)
    assert rows["cpu_mean"]["winner"] is None and rows["cpu_p95"]["winner"] is None
    rows = _rows(flagged, healthy)
    assert rows["cpu_mean"]["winner"] is None and rows["cpu_p95"]["winner"] is None
    both = _rows(RunSummary("a", cpu_mean=90.0), RunSummary("b", cpu_mean=50.0))
    assert both["cpu_mean"]["winner"] == "a"  # two healthy CPU-only runs: busier wins


def test_less_io_wait_wins_and_start_up_never_ranks() -> None:
    a = RunSummary("a", io_wait_p95=10.0, startup_s=30.0)
    b = RunSummary("b", io_wait_p95=2.0, startup_s=5.0)
    rows = _rows(a, b)
    assert rows["io_wait_p95"]["winner"] == "b" and rows["io_wait_p95"]["better"] is True
    assert rows["startup_s"]["winner"] is None and rows["startup_s"]["better"] is None
    assert rows["startup_s"]["change"] == "-83.3%"


def test_the_savings_interval_reads_from_low_to_high() -> None:
    a = RunSummary("a", loop_s=100.0, steps=1000, price_per_hour=1.0, cycle_rel_se=0.01)
    b = RunSummary("b", loop_s=80.0, steps=1000, price_per_hour=1.0, cycle_rel_se=0.01)
    row = saving_row(a, b, fairness(a, b))
    noise = 2.09 * math.hypot(0.01, 0.01)
    lo, hi = -100.0 * math.expm1(math.log(0.8) + noise), -100.0 * math.expm1(math.log(0.8) - noise)
    assert lo < 20.0 < hi
    assert row["b"] == "20%" and row["winner"] == "b"
    assert row["change"] == f"95% CI {lo:.0f}% to {hi:.0f}%" == "95% CI 18% to 22%"


def test_the_unlike_runs_sentence_when_only_b_has_issues() -> None:
    note = compare_note(RunSummary("a"), RunSummary("b", issues=("LowGPUUtilization",)))
    assert note == (
        "unlike runs: 1 of B's rules found issues (LowGPUUtilization); "
        "a run with issues the other has not is ranked better in no row"
    )


# --- the verdict section -----------------------------------------------------------------------------------------
def test_the_issues_table_puts_the_most_triggers_first_at_the_same_step() -> None:
    few = Verdict("Aaa", Status.ISSUES_FOUND, triggers=2, first_trigger_step=5)
    many = Verdict("Bbb", Status.ISSUES_FOUND, triggers=9, first_trigger_step=5)
    early = Verdict("Ccc", Status.ISSUES_FOUND, triggers=1, first_trigger_step=3)
    assert [v.rule for v in triggered_first([few, many, early])] == ["Ccc", "Bbb", "Aaa"]


def test_the_issues_table_keeps_the_summarising_rules_out() -> None:
    hidden = [Verdict(r, Status.ISSUES_FOUND, triggers=1) for r in ("OverallSystemUsage", "OverallFrameworkMetrics")]
    assert triggered_first([*hidden, Verdict("LowGPUUtilization", Status.ISSUES_FOUND, triggers=1)]) == [
        Verdict("LowGPUUtilization", Status.ISSUES_FOUND, triggers=1)
    ]


def test_three_tensors_are_named_without_a_count() -> None:
    assert involved(Verdict("X", Status.ISSUES_FOUND, tensors=("a", "b", "c"))) == "a, b, c"
    assert involved(Verdict("X", Status.ISSUES_FOUND, tensors=("a", "b", "c", "d"))) == "a, b, c and 1 more"


@pytest.mark.parametrize(
    ("verdicts", "text", "state"),
    [
        ([Verdict("ExplodingTensor", Status.ISSUES_FOUND, triggers=1)], "Issues found. 1 rule: 1 judged", "bad"),
        ([Verdict("ExplodingTensor", Status.NO_ISSUES_FOUND)], "No issues. 1 rule: 1 judged", "ok"),
        ([], "No rule was evaluated", "none"),
    ],
)
def test_the_verdict_badge_is_red_green_or_grey(tmp_path: Path, verdicts: list[Verdict], text: str, state: str) -> None:
    page = Page()
    VerdictSection().build(_ctx(tmp_path, verdicts=verdicts), page)
    (badge,) = _blocks(page, "verdict")
    assert badge["text"].startswith(text) and badge["state"] == state


def test_the_job_duration_is_in_seconds_minutes_or_hours() -> None:
    assert [_duration(x) for x in (119.94, 120.0, 7199.0, 7200.0, 9000.0)] == [
        "119.9 s",
        "2.0 min",
        "120.0 min",
        "2.00 h",
        "2.50 h",
    ]


def test_a_stop_on_several_workers_names_them_all(tmp_path: Path) -> None:
    stops = [{"rule": "ExplodingTensor", "step": 52, "worker": w} for w in ("worker_0", "worker_1")]
    page = Page()
    VerdictSection().build(_ctx(tmp_path, stops=stops), page)
    warns = [b["text"] for b in _blocks(page, "warn")]
    assert warns == [
        "The training was stopped by StopTraining at step 52 (rule ExplodingTensor) on worker_0, worker_1."
    ]


def test_a_rule_with_issues_but_no_counted_trigger_is_in_the_issues_table(tmp_path: Path) -> None:
    v = Verdict("LowGPUUtilization", Status.ISSUES_FOUND, kind="profiler", message="GPUs idle")
    assert triggered_first([v]) == [v]
    page = Page()
    VerdictSection().build(_ctx(tmp_path, verdicts=[v]), page)
    (table,) = _blocks(page, "table")
    assert [row[0] for row in table["rows"]] == ["LowGPUUtilization"]
    assert table["rows"][0][3] == "system / framework metrics"


def test_the_rules_that_failed_are_named_and_those_without_data_are_not(tmp_path: Path) -> None:
    verdicts = [
        Verdict("DeadRelu", Status.ERROR, message="boom"),
        Verdict("LowGPUUtilization", Status.NO_DATA, message="no GPU: this rule needs GPU utilisation"),
        Verdict("ExplodingTensor", Status.NO_ISSUES_FOUND),
    ]
    page = Page()
    VerdictSection().build(_ctx(tmp_path, verdicts=verdicts), page)
    assert [b["text"] for b in _blocks(page, "warn")] == ["Rules that failed to evaluate: DeadRelu (boom)"]


def test_the_job_line_counts_the_gpus_of_every_node(tmp_path: Path) -> None:
    cols = {"cpu0_utilization_percent": 10.0, "gpu0_utilization_percent": 50.0, "gpu1_utilization_percent": 50.0}
    nodes = (
        _system({k: np.full(6, v) for k, v in cols.items()}, "n0"),
        _system({k: np.full(6, v) for k, v in cols.items()}, "n1"),
    )
    page = Page()
    VerdictSection().build(_ctx(tmp_path, system=nodes), page)
    rows = dict(_blocks(page, "kv")[-1]["rows"])
    assert rows["Hardware"] == "2 node(s), 4 GPU(s)" and rows["Job duration"] == "5.0 s"


# --- the rule and tensor sections --------------------------------------------------------------------------------
def test_the_rules_summary_leads_with_the_rule_that_triggered_most(tmp_path: Path) -> None:
    verdicts = [
        Verdict("LossNotDecreasing", Status.ISSUES_FOUND, triggers=5, datapoints=100, recommendation="Lower the lr."),
        Verdict("DeadRelu", Status.NO_ISSUES_FOUND, datapoints=100, recommendation="Use LeakyReLU."),
    ]
    page = Page()
    RulesSummarySection().build(_ctx(tmp_path, verdicts=verdicts), page)
    assert _blocks(page, "p")[0]["text"] == (
        "The rule that triggered most is LossNotDecreasing: 5 times over 100 datapoints. Lower the lr."
    )
    (table,) = _blocks(page, "table")
    recommendation = {row[0]: row[6] for row in table["rows"]}
    assert recommendation == {"LossNotDecreasing": "Lower the lr.", "DeadRelu": ""}  # only where it found issues


@pytest.mark.parametrize(("count", "tail"), [(20, "t19"), (21, "t19 and 1 more")])
def test_a_triggered_rule_names_twenty_tensors_then_counts(tmp_path: Path, count: int, tail: str) -> None:
    v = Verdict("ExplodingTensor", Status.ISSUES_FOUND, triggers=1, tensors=tuple(f"t{i}" for i in range(count)))
    page = Page()
    TriggeredRulesSection().build(_ctx(tmp_path, verdicts=[v]), page)
    shown = dict(_blocks(page, "kv")[0]["rows"])["Tensors"]
    assert shown.endswith(", " + tail) and shown.startswith("t0, t1,") and "more" not in shown.replace(tail, "")


def test_the_loss_note_names_the_first_nan_step(tmp_path: Path) -> None:
    page = Page()
    TensorSection().build(_ctx(tmp_path, trial=_diverging_trial()), page)
    assert [b["text"] for b in _blocks(page, "warn")] == [
        "loss (TRAIN) is NaN/Inf at 2 of 5 saved steps, first at step 2."
    ]


# --- the framework sections --------------------------------------------------------------------------------------
def test_a_data_wait_of_exactly_ten_percent_is_no_warning(tmp_path: Path) -> None:
    # one 10 s step after a 1 s wait: 10 % of the loop, not over the Dataloader rule's 10 %
    tab = _tab([10.0], start=T0 + 1.0)
    tab.spans = {
        "kind": np.array([4], np.uint8),
        "start": np.array([T0]),
        "end": np.array([T0 + 1.0]),
        "global_step": np.full(1, -1, np.int64),
        "workers": np.array([0], np.int16),
        "pid": np.zeros(1, np.int64),
    }
    page = Page()
    DataloaderSection().build(_ctx(tmp_path, framework=(tab,)), page)
    notes = [b for b in page.blocks if b["kind"] in ("note", "warn")]
    assert [(b["kind"], b["text"]) for b in notes] == [
        ("note", "worker_0 waited for data 10% of its training loop: data loading is not a bottleneck.")
    ]


def _spans(tab: FrameworkTables, kinds: list[int], starts: list[float], ends: list[float]) -> FrameworkTables:
    n = len(kinds)
    tab.spans = {
        "kind": np.array(kinds, np.uint8),
        "start": T0 + np.array(starts),
        "end": T0 + np.array(ends),
        "global_step": np.full(n, -1, np.int64),
        "workers": np.full(n, -1, np.int16),
        "pid": np.zeros(n, np.int64),
    }
    return tab


def test_the_forward_to_backward_ratio_is_given_only_when_both_were_timed(tmp_path: Path) -> None:
    both = _spans(_tab([4.0]), [1, 2], [10.0, 11.0], [11.0, 13.0])  # 1 s forward, 2 s backward
    only_backward = _spans(_tab([4.0]), [2], [11.0], [13.0])
    texts = []
    for tab in (both, only_backward):
        page = Page()
        PhaseRatioSection().build(_ctx(tmp_path, framework=(tab,)), page)
        texts.append([b["text"] for b in page.blocks if b["kind"] == "p" and "Forward to backward" in b["text"]])
    assert texts[0] and texts[0][0].startswith("Forward to backward ratio: 0.50 ")
    assert texts[1] == []


# --- the system sections -----------------------------------------------------------------------------------------
def test_the_usage_advice_judges_the_jobs_own_cpu(tmp_path: Path) -> None:
    arrays = _system(
        {"process_cpu_utilization_percent": np.full(10, 20.0), "cpu0_utilization_percent": np.full(10, 80.0)}
    )
    page = Page()
    SystemUsageSection().build(_ctx(tmp_path, system=(arrays,)), page)
    assert _blocks(page, "p")[0]["text"].startswith("CPU p95: the training job's processes 20.0% of all cores; ")
    assert _blocks(page, "warn")[0]["text"].startswith("CPU utilisation p95 is 20%: the node is underused.")


@pytest.mark.parametrize(("gpu", "cpu", "flagged"), [(90.0, 30.0, False), (30.0, 90.0, True)])
def test_the_cost_advice_judges_the_gpus_before_the_cpu(tmp_path: Path, gpu: float, cpu: float, flagged: bool) -> None:
    arrays = _system({"cpu0_utilization_percent": np.full(10, cpu), "gpu0_utilization_percent": np.full(10, gpu)})
    page = Page()
    CostSection().build(_ctx(tmp_path, system=(arrays,), price_per_hour=3.6), page)
    warns = [b["text"] for b in _blocks(page, "warn")]
    assert warns == (
        [
            "Utilisation p95 is 30%: a smaller or cheaper instance would likely do the same work for less. "
            "Compare runs with `trainspect compare A B --price-per-hour A=.. B=..`."
        ]
        if flagged
        else []
    )


# --- the utilisation histograms ----------------------------------------------------------------------------------
def _hist(device: str, mean: float) -> UtilisationHistogram:
    return UtilisationHistogram("n0", device, (0.0, 100.0), (1,), 1, mean)


def test_gpu_means_twenty_points_apart_are_not_poorly_distributed() -> None:
    hists = {"gpu0": _hist("gpu0", 80.0), "gpu1": _hist("gpu1", 60.0), "gpu_total": _hist("gpu_total", 70.0)}
    assert histogram_findings(hists) == [("GPUs average 70 %: good use.", False)]  # 70 %: LowGPUUtilization's cut-off
    hists["gpu1"] = _hist("gpu1", 59.0)
    assert histogram_findings(hists)[0] == (
        "GPU means differ by 21 points (gpu0 80 %, gpu1 59 %): poor load distribution over the GPUs.",
        True,
    )


def test_a_core_at_ninety_percent_is_pinned() -> None:
    hists = {"cpu0": _hist("cpu0", 90.0), "cpu1": _hist("cpu1", 89.9), "gpu_total": _hist("gpu_total", 40.0)}
    assert histogram_findings(hists) == [
        (
            "1 CPU core(s) pinned near 100 % (cpu0) while the GPUs average 40 %: a CPU bottleneck is likely "
            "(data loading, preprocessing).",
            True,
        ),
        ("GPUs average 40 %: underused; increase the batch size or feed them faster.", True),
    ]


def test_devices_at_fifty_percent_are_not_underused() -> None:
    assert histogram_findings({"gpu0": _hist("gpu0", 50.0), "gpu_total": _hist("gpu_total", 50.0)}) == []
    assert histogram_findings({"cpu_total": _hist("cpu_total", 50.0)}) == [
        ("No GPU recorded; the CPU averages 50 %.", False)
    ]
    assert histogram_findings({"cpu_total": _hist("cpu_total", 49.0)}) == [
        ("No GPU recorded; the CPU averages 49 %: underused.", True)
    ]


def test_sixteen_devices_left_out_are_all_named() -> None:
    # the CPU chart keeps the total and 6 of 22 cores: 16 left out, each named
    hists = {"cpu_total": _hist("cpu_total", 50.0), **{f"cpu{i}": _hist(f"cpu{i}", float(i)) for i in range(22)}}
    page = Page()
    _node(page, "n0", hists)
    (text,) = [b["text"] for b in _blocks(page, "p") if b["text"].startswith("Left out")]
    names = ", ".join(f"cpu{i}" for i in range(3, 19))
    assert text.startswith(f"Left out of the charts: 16 of 23 devices ({names}); the charts keep")


def test_a_run_that_failed_early_still_says_no_rule_found_issues(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, job_exit={"returncode": 2, "steps_recorded": False})
    assert skip_text(ctx, "triggered") == REQUIREMENT_HINTS["triggered"] == "No rule found issues."
    assert (
        skip_text(ctx, "system") == "Nothing was recorded: the script failed with exit status 2 before its first step."
    )


# --- the MLflow plugin -------------------------------------------------------------------------------------------
def _record(
    mode_step: int, global_step: int, loss: float, mode: ModeKeys = ModeKeys.TRAIN, wall: float = T0
) -> StepRecord:
    t = TensorRecord("loss", np.array(loss), collections=frozenset({"losses"}))
    return StepRecord(mode, mode_step, global_step, wall, "worker_0", {"loss": t})


def _logger(tmp_path: Path, sink: RecordingSink, **kw: Any) -> Any:
    pytest.importorskip("mlflow")  # an optional dependency (trainspect[mlflow])
    from trainspect.mlflow_plugin.logger import MlflowLogger

    return MlflowLogger(tmp_path, sink, interval_s=3600.0, tail_system=False, watch_verdicts=False, **kw)  # type: ignore[arg-type]


def test_step_metrics_are_logged_at_the_mode_step_with_a_millisecond_timestamp(tmp_path: Path) -> None:
    sink = RecordingSink()
    logger = _logger(tmp_path, sink, log_every_n_steps=1)
    logger.submit(_record(3, 7, 0.5, wall=T0 + 0.25))  # the fourth TRAIN step, global step 7 (after an evaluation)
    assert logger.tick(force=True)
    assert [(m.key, m.value, m.step, m.timestamp) for m in sink.metrics] == [("train/loss", 0.5, 3, 1_700_000_000_250)]


def test_a_logging_interval_of_zero_logs_every_step(tmp_path: Path) -> None:
    sink = RecordingSink()
    logger = _logger(tmp_path, sink, log_every_n_steps=0)
    assert logger.log_every_n_steps == 1
    for step in range(3):
        logger.submit(_record(step, step, 1.0 / (step + 1)))
    assert logger.tick(force=True)
    assert [m.step for m in sink.metrics] == [0, 1, 2]


def test_the_diverged_tag_leads_with_the_loss_and_says_what_went_first() -> None:
    d = Divergence()
    d.observe({"train/acc": float("nan"), "train/loss": 1.0}, 5)
    d.observe({"train/acc": float("nan"), "train/loss": float("inf")}, 7, losses={"train/loss"})
    tags = d.tags()
    assert tags["trainspect.diverged"] == "loss Inf from step 7 (first non-finite at step 5: acc)"
    detail = json.loads(tags["trainspect.diverged.detail"])
    assert (detail["step"], detail["last_finite_step"], detail["values"]) == (5, 4, 2)
    assert d.metric() == {"trainspect/first_nonfinite_step": 5.0}


def test_the_diverged_tag_names_three_values_then_counts() -> None:
    three = Divergence()
    three.observe({"train/a": float("nan"), "train/b": float("nan"), "train/c": float("nan")}, 2)
    assert three.tags()["trainspect.diverged"] == "a NaN from step 2 (first non-finite: a, b, c)"
    four = Divergence()
    four.observe({f"train/{k}": float("-inf") for k in "abcd"}, 2)
    assert four.tags()["trainspect.diverged"] == "a -Inf from step 2 (first non-finite: a, b, c +1 more)"


def test_the_run_dir_param_is_the_directorys_name_not_its_path(tmp_path: Path) -> None:
    assert hook_params(tmp_path / "resnet-sweep-3")["trainspect.run_dir"] == "resnet-sweep-3"


def test_the_profiler_param_says_when_detailed_profiling_is_on() -> None:
    detailed = ProfilerConfig(system_monitor_interval_millis=100, framework_profile_params=FrameworkProfile())
    assert profiler_param(detailed) == "system every 100 ms, framework, detailed"
    assert profiler_param(ProfilerConfig(system_monitor_interval_millis=500)) == "system every 500 ms, framework"
    assert profiler_param(ProfilerConfig(enabled=False)) == "off"


class _OldSummary:
    """A summary whose metrics still name the job's duration ``trainspect/duration_s`` (before ``job_s``)."""

    workers = 1

    def to_metrics(self) -> dict[str, float]:
        return {"trainspect/duration_s": 120.0, "trainspect/steps": 100.0}


def test_the_job_duration_is_logged_as_job_s_only() -> None:
    pytest.importorskip("mlflow")
    from trainspect.mlflow_plugin.session import summary_metrics

    out = summary_metrics(_OldSummary())
    assert out == {"trainspect/job_s": 120.0, "trainspect/steps": 100.0}
    metrics = summary_metrics(RunSummary("a", duration_s=90.0, loop_s=80.0, steps=800))
    assert metrics["trainspect/job_s"] == 90.0 and "trainspect/duration_s" not in metrics
    assert metrics["trainspect/steps_per_s"] == 10.0 and metrics["trainspect/time_per_1k_steps_s"] == 100.0


def test_a_chart_added_to_a_page_returns_the_id_its_block_names() -> None:
    """A section that adds two charts gets their ids back, each the id of its block and of its ECharts option."""
    page = Page(prefix="sec")
    first, second = page.chart({"series": []}), page.chart({"series": [1]}, height=200)
    assert (first, second) == ("sec-0", "sec-1")
    assert [b["id"] for b in page.blocks] == [first, second] and page.charts[second] == {"series": [1]}


def test_thinned_nan_markers_keep_the_first_and_the_last_non_finite_step() -> None:
    """900 NaN steps are drawn as 400 markers, from the first NaN step (where the line marks it) to the last."""
    from trainspect.report import charts

    x, y = np.arange(1000.0), np.ones(1000)
    y[100:] = np.nan
    option = charts.line_chart({"loss": (x, y)}, "Loss", x_type="value", y_name="loss")
    (marks,) = [s for s in option["series"] if s["name"] == "NaN/Inf in loss"]
    assert len(marks["data"]) == 400 and marks["data"][0][0] == 100.0 and marks["data"][-1][0] == 999.0
    assert marks["markLine"]["data"] == [{"xAxis": 100.0}]


# --- sixth pass (seed-43 survivors) -----------------------------------------------------------------------------
def test_a_section_needs_both_an_id_and_a_title() -> None:
    """A section with an id but no title (or a title but no id) is refused at registration, naming its class."""
    from trainspect.report.sections import Section, SectionRegistry

    class Untitled(Section):
        id, title = "untitled", ""

    class Anonymous(Section):
        id, title = "", "Anonymous"

    registry = SectionRegistry()
    for section in (Untitled(), Anonymous()):
        with pytest.raises(ValueError, match=f"report section {type(section).__name__} must set id and title"):
            registry.register(section)
    assert len(registry) == 0
