"""The report judges nothing itself: its step-outlier note and its utilisation advice are the rules' judgements."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import synth_run
import synthetic_run

from trainspect.profiler import load_profiler_data
from trainspect.report._framework_sections import StepDurationSection
from trainspect.report._system_sections import usage_advice
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page
from trainspect.rules.profiler import OverallSystemUsage, StepOutlier
from trainspect.rules.profiler.low_gpu_utilization import UNDERUSED_P95
from trainspect.rules.profiler.overall_system_usage import usage_class
from trainspect.rules.verdict import Status

LABEL = "worker_0/TRAIN"


def _steps_run(root: Path, durations: np.ndarray) -> Path:
    run = root / "run"
    synthetic_run.start_run(run, "agree", {"framework": "synthetic"})
    synth_run.write_framework(run, "worker_0", "algo-1", durations)
    return synthetic_run.end_run(run)


def _note(run: Path) -> tuple[dict[str, str], list[int]]:
    """The step-duration note of the report (or ``{}``) and the steps it names as outliers."""
    page = Page()
    StepDurationSection().build(ReportContext.load(run), page)
    notes = [b for b in page.blocks if b["kind"] in ("note", "warn") and LABEL in b["text"]]
    if not notes:
        return {}, []
    (note,) = notes
    m = re.search(rf"{LABEL}: (\d+) step\(s\) longer than StepOutlier's threshold .*?: steps ([0-9, ]+)", note["text"])
    assert m, note["text"]
    return note, [int(s) for s in m.group(2).split(", ")]


def test_steps_between_the_rules_threshold_and_three_medians_are_flagged_as_the_rule_flags(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    dur = 0.010 + rng.normal(0, 0.0002, 300)
    slow = [40, 120, 200, 260]
    dur[slow] = 0.020  # twice the median: far above median + 5·MAD, below three medians
    assert dur.max() < 3 * np.median(dur)  # the old cut-off saw nothing here
    verdict = StepOutlier().evaluate(load_profiler_data(_steps_run(tmp_path, dur)))
    assert verdict.details[LABEL]["step_numbers"] == slow
    note, listed = _note(tmp_path / "run")
    assert listed == slow
    assert (note["kind"] == "warn") == (verdict.status is Status.ISSUES_FOUND)


def test_steps_over_three_medians_that_the_rule_accepts_are_not_flagged(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    dur = 0.01 * rng.lognormal(0.0, 0.8, 300)  # heavy-tailed noise: many steps over three medians
    over = set(np.flatnonzero(dur > 3 * np.median(dur)).tolist())
    verdict = StepOutlier().evaluate(load_profiler_data(_steps_run(tmp_path, dur)))
    flagged = verdict.details[LABEL]["step_numbers"]
    assert len(over - set(flagged)) >= 5  # steps the old cut-off called long, the rule does not
    assert 0 < len(flagged) <= 10  # the rule's own outliers, all named in the note
    note, listed = _note(tmp_path / "run")
    assert listed == flagged


def test_too_few_steps_for_the_rule_give_no_note(tmp_path: Path) -> None:
    dur = np.full(50, 0.01)
    dur[10] = 0.2  # twenty medians, but the rule judges only more than 100 steps
    assert _note(_steps_run(tmp_path, dur))[0] == {}


_CUTS = (None, 30.0, UNDERUSED_P95 - 0.1, UNDERUSED_P95, UNDERUSED_P95 + 5.0, 95.0)
_GRID = [
    (c, g95, g50)
    for c in _CUTS
    for g95 in _CUTS
    for g50 in ((None,) if g95 is None else (20.0, UNDERUSED_P95, 80.0))
    if g50 is None or g50 <= g95
]


@pytest.mark.parametrize(("cpu_p95", "gpu_p95", "gpu_p50"), _GRID)
def test_the_usage_advice_says_what_overall_system_usage_judges(
    cpu_p95: float | None, gpu_p95: float | None, gpu_p50: float | None
) -> None:
    kind = usage_class(cpu_p95, gpu_p95, gpu_p50)
    advice = usage_advice(cpu_p95, gpu_p95, gpu_p50)
    assert ("CPU bottleneck is likely" in advice) == (kind == "cpu_bottleneck")
    assert ("well utilised" in advice) == (kind == "well_utilised")
    assert ("busy in bursts" in advice) == (kind == "uneven")
    underused = kind == "underutilised" or (kind == "no_gpu" and cpu_p95 is not None and cpu_p95 < UNDERUSED_P95)
    assert ("underused" in advice) == underused


def test_a_busy_cpu_next_to_busy_gpus_is_no_cpu_bottleneck_in_either() -> None:
    # GPU p95 above the cut-off: LowGPUUtilization and OverallSystemUsage see no bottleneck; the report used to
    assert usage_class(80.0, 75.0, 60.0) == "uneven"
    assert "CPU bottleneck" not in usage_advice(80.0, 75.0, 60.0)


def test_the_report_and_the_rule_word_one_judgement_of_a_run(tmp_path: Path) -> None:
    run = synth_run.write_run(tmp_path / "run", seconds=60, cpu=30.0, gpu=40.0)
    verdict = OverallSystemUsage().evaluate(load_profiler_data(run))
    assert "underutilised" in verdict.message
    from trainspect.report._system_sections import SystemUsageSection

    page = Page()
    SystemUsageSection().build(ReportContext.load(run), page)
    assert any(b["kind"] == "warn" and "underused" in b["text"] for b in page.blocks)
