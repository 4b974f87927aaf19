"""``trainspect compare`` rows at their boundaries: change texts, the step-count ratio, noise, winners, the saving.

Every summary is built by hand, so each change text, interval and winner below is worked out from the figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainspect.report._compare_rows import (
    STEP_RATIO,
    Z_95,
    change_text,
    fairness,
    health_rows,
    loss_rows,
    metric_rows,
    ratio_saving,
    saving_row,
)
from trainspect.report.compare import compare_runs, compare_table, saving_percent, time_saving_percent
from trainspect.report.summary import RunSummary


def _rows(a: RunSummary, b: RunSummary) -> dict[str, dict]:
    return {r["key"]: r for r in metric_rows(a, b, fairness(a, b))}


def test_change_text_switches_to_a_ratio_beyond_100_percent() -> None:
    assert change_text(1.0, 2.0) == "+100.0%"  # exactly +100 %: still a percentage
    assert change_text(1.0, 2.01) == "2.01×"
    assert change_text(10.0, 8.0) == "-20.0%" and change_text(4, 0) == "-100.0%"
    assert change_text(-1.0, 3.0) == "+400.0%"  # a negative A: no ratio
    assert change_text(0, 5) == "" and change_text(None, 1.0) == "" and change_text("x", 1.0) == ""
    assert change_text(float("inf"), 1.0) == "non-finite" and change_text(1.0, float("nan")) == "non-finite"


def test_figures_are_formatted_with_their_digits_and_thousands() -> None:
    rows = _rows(RunSummary("a", steps=1234, cpu_mean=999.94), RunSummary("b", steps=12, cpu_mean=1000.4))
    assert (rows["steps"]["a"], rows["steps"]["b"]) == ("1,234", "12")
    assert (rows["cpu_mean"]["a"], rows["cpu_mean"]["b"]) == ("1e+03", "1,000")  # 3 digits below 1,000
    rows = _rows(RunSummary("a", step_p50_s=0.123456), RunSummary("b", step_p50_s=float("nan")))
    assert (rows["step_p50_s"]["a"], rows["step_p50_s"]["b"]) == ("0.1235", "NaN !")
    assert rows["step_p50_s"]["change"] == "non-finite" and rows["step_p50_s"]["winner"] is None
    assert "price_per_hour" not in rows  # unknown for both runs: no row
    one = _rows(RunSummary("a", io_wait_p95=5.125, gpu_mean=45.678), RunSummary("b", dataloader_wait_percent=12.345))
    assert (one["io_wait_p95"]["a"], one["io_wait_p95"]["b"]) == ("5.12", "–")  # known for one run: shown
    assert one["gpu_mean"]["a"] == "45.7" and one["dataloader_wait_percent"]["b"] == "12.3"  # 3 digits


def test_the_faster_run_wins_and_totals_rank_nothing() -> None:
    a = RunSummary("a", loop_s=100.0, steps=1000, step_p50_s=0.1, duration_s=120.0, gpu_p95=50.0)
    b = RunSummary("b", loop_s=80.0, steps=1000, step_p50_s=0.08, duration_s=90.0, gpu_p95=60.0)
    rows = _rows(a, b)
    assert rows["steps_per_s"]["winner"] == "b" and rows["steps_per_s"]["change"] == "+25.0%"
    assert rows["time_per_1k_steps_s"]["winner"] == "b" and rows["time_per_1k_steps_s"]["better"] is True
    assert rows["step_p50_s"]["winner"] == "b" and rows["gpu_p95"]["winner"] == "b"
    assert rows["duration_s"]["winner"] is None and rows["steps"]["winner"] is None
    rows = _rows(b, a)
    assert rows["steps_per_s"]["winner"] == "a" and rows["steps_per_s"]["better"] is False
    same = _rows(a, RunSummary("c", loop_s=100.0, steps=1000))
    assert same["steps_per_s"]["winner"] is None and same["steps_per_s"]["change"] == "+0.0%"


def test_cpu_rows_rank_only_cpu_only_healthy_runs_and_never_beyond_one_core() -> None:
    a, b = RunSummary("a", cpu_mean=50.0, cpu_p95=90.0), RunSummary("b", cpu_mean=70.0, cpu_p95=150.0)
    rows = _rows(a, b)
    assert rows["cpu_mean"]["winner"] == "b"  # busier CPUs win on CPU-only runs
    assert rows["cpu_p95"]["winner"] is None  # 150 %: more than one core's worth
    assert _rows(RunSummary("a", cpu_mean=50.0), RunSummary("b", cpu_mean=100.0))["cpu_mean"]["winner"] == "b"
    with_gpu = _rows(RunSummary("a", cpu_mean=50.0, gpu_p95=9.0), RunSummary("b", cpu_mean=70.0))
    assert with_gpu["cpu_mean"]["winner"] is None


def test_unlike_step_counts_beyond_the_ratio_are_said() -> None:
    assert STEP_RATIO == 3.0
    assert fairness(RunSummary("a", steps=10), RunSummary("b", steps=30)).note == ""  # exactly 3x: alike
    note = fairness(RunSummary("a", steps=10), RunSummary("b", steps=31)).note
    assert note == "unlike runs: B did 3.1× A's steps (10 vs 31): compared per step"
    note = fairness(RunSummary("a", steps=4000), RunSummary("b", steps=1000)).note
    assert note == "unlike runs: A did 4× B's steps (4,000 vs 1,000): compared per step"


def test_issues_one_run_has_alone_are_counted_and_block_its_wins() -> None:
    a = RunSummary("a", issues=("X", "Y", "Z"), loop_s=10.0, steps=100)
    b = RunSummary("b", issues=("Z",), loop_s=20.0, steps=100)
    f = fairness(a, b)
    assert (f.may_win_a, f.may_win_b) == (False, True) and not f.broken
    assert f.note == (
        "unlike runs: 2 of A's rules found issues (X, Y); a run with issues the other has not is ranked better in no row"
    )
    assert _rows(a, b)["steps_per_s"]["winner"] is None  # A is faster but may not win
    stopped = RunSummary("b", stops=("stopped by StopTraining at step 3 (rule X)",))
    f = fairness(RunSummary("a"), stopped)
    assert f.broken and f.note.endswith("its speed figures are not a fair comparison; no row ranks the runs")
    assert "B was stopped by StopTraining at step 3 (rule X)" in f.note


def test_noise_is_the_95_interval_of_the_ratio_and_a_difference_inside_it_wins_nothing() -> None:
    a = RunSummary("a", loop_s=100.0, steps=1000, cycle_rel_se=0.03)
    b = RunSummary("b", loop_s=95.0, steps=1000, cycle_rel_se=0.04)
    f = fairness(a, b)
    assert f.noise == pytest.approx(Z_95 * 0.05) and Z_95 == 2.09
    row = _rows(a, b)["steps_per_s"]
    lo, hi = 100 * math.expm1(math.log(100 / 95) - 0.1045), 100 * math.expm1(math.log(100 / 95) + 0.1045)
    assert row["winner"] is None and row["change"] == f"+5.3%, within noise (95% CI {lo:+.1f}% to {hi:+.1f}%)"
    nearer = RunSummary("b", loop_s=94.0, steps=1000, cycle_rel_se=0.04)  # ln(100/94) = 0.062: 0.6 of the noise
    assert _rows(a, nearer)["steps_per_s"]["winner"] is None
    fast = RunSummary("b", loop_s=40.0, steps=1000, cycle_rel_se=0.04)
    row = _rows(a, fast)["steps_per_s"]
    assert row["winner"] == "b" and row["change"].startswith("2.5× (95% CI +")
    assert fairness(a, RunSummary("b")).noise is None


def test_losses_at_matched_steps() -> None:
    a = RunSummary("a", loss_name="mse", train_loss={s: 1.0 / (s + 1) for s in range(0, 9)}, eval_loss=0.5)
    b = RunSummary("b", loss_name="mse", train_loss={s: 2.0 / (s + 1) for s in range(0, 13)})
    rows = loss_rows(a, b)
    assert [r["key"] for r in rows] == ["loss@0", "loss@2", "loss@4", "loss@6", "loss@8", "final_loss", "eval_loss"]
    assert rows[0]["label"] == "training loss (mse) at TRAIN step 0" and rows[0]["change"] == "+100.0%"
    assert rows[5]["a"] == "0.1111 (step 8)" and rows[5]["b"] == "0.1538 (step 12)"
    assert rows[6]["a"] == "0.5" and rows[6]["b"] == "–"
    assert loss_rows(RunSummary("a"), RunSummary("b")) == []
    few = loss_rows(RunSummary("a", train_loss={3: 1.0}), RunSummary("b", train_loss={3: 1.0, 4: 2.0}))
    assert [r["key"] for r in few] == ["loss@3", "final_loss"] and few[0]["label"].endswith("step 3")


def test_health_rows_show_each_verdict_and_the_rule_lines() -> None:
    a = RunSummary("a", issues=("X",), rules_line="2 rules: 2 judged, 1 found issues (X)")
    rows = health_rows(a, RunSummary("b"))
    assert [r["key"] for r in rows] == ["verdict", "rules", "report"]
    assert rows[0]["a"] == "1 rule found issues (X)" and rows[1]["b"] == "–"
    assert rows[1]["a"] == "2 rules: 2 judged, 1 found issues (X)" and rows[2]["a"] == "–"
    assert [r["key"] for r in health_rows(RunSummary("a"), RunSummary("b"))] == ["verdict", "report"]


def test_the_saving_per_unit_of_work_and_its_text() -> None:
    assert ratio_saving(100.0, 80.0) == 20.0 and ratio_saving(0.0, 1.0) is None and ratio_saving(None, 1.0) is None
    a = RunSummary("a", loop_s=100.0, steps=1000, price_per_hour=1.0)
    b = RunSummary("b", loop_s=60.0, steps=2000, price_per_hour=1.0)
    assert saving_percent(a, b) == pytest.approx(70.0) and time_saving_percent(a, b) == pytest.approx(70.0)
    row = saving_row(a, b, fairness(a, b))
    assert row["label"] == "projected cost saving for the same work" and row["b"] == "70%" and row["winner"] == "b"
    double = RunSummary("b", loop_s=200.0, steps=1000, price_per_hour=1.0)
    assert saving_row(a, double, fairness(a, double))["b"] == "-100%"  # at -100 %: still a percentage
    slower = RunSummary("b", loop_s=201.0, steps=1000, price_per_hour=1.0)
    row = saving_row(a, slower, fairness(a, slower))
    assert row["b"] == "none: B needs 2.01× A's" and row["winner"] == "a"
    same = RunSummary("b", loop_s=100.0, steps=1000)
    row = saving_row(a, same, fairness(a, same))
    assert row["label"] == "projected time saving for the same work" and row["b"] == "0%" and row["winner"] is None


def test_the_saving_of_whole_runs_and_of_unlike_runs() -> None:
    a = RunSummary("a", duration_s=503, instances=3, price_per_hour=14.688)
    b = RunSummary("b", duration_s=502, instances=2, price_per_hour=3.825)
    row = saving_row(a, b, fairness(a, b))
    assert row["label"] == "saving (whole runs)" and row["b"] == "83%" and row["change"] == ""
    broken = RunSummary("b", diverged="loss NaN from step 2")
    assert saving_row(a, broken, fairness(a, broken))["b"] == "not offered: unlike runs (see the first line)"
    assert saving_row(RunSummary("a"), RunSummary("b"), fairness(RunSummary("a"), RunSummary("b")))["b"] == "–"
    noisy_a = RunSummary("a", loop_s=100.0, steps=1000, cycle_rel_se=0.05)
    noisy_b = RunSummary("b", loop_s=97.0, steps=1000, cycle_rel_se=0.05)
    row = saving_row(noisy_a, noisy_b, fairness(noisy_a, noisy_b))
    assert row["b"] == "within noise (3%)" and row["winner"] is None and row["change"].startswith("95% CI ")


def test_the_table_marks_winners_and_ends_with_the_rule_lines() -> None:
    a = RunSummary("a", loop_s=100.0, steps=1000, rules_line="1 rule: 1 judged, 0 found issues")
    b = RunSummary("b", loop_s=50.0, steps=1000)
    table = compare_table(a, b)
    lines = table.splitlines()
    assert lines[0].split() == ["A:", "a", "B:", "b", "B", "vs", "A"] and set(lines[1]) <= {"-", " "}
    assert any(line.startswith("throughput (steps/s)") and line.split()[3:5] == ["20", "*"] for line in lines)
    assert "rules of A: 1 rule: 1 judged, 0 found issues" in lines and "rules of B" not in table
    assert [r["key"] for r in compare_runs(a, b)][-1] == "saving"


def test_run_ids_and_report_links(tmp_path: Path) -> None:
    from trainspect.report.compare import _href, is_mlflow_run_id

    assert is_mlflow_run_id("0123456789abcdef0123456789abcdef")
    assert not is_mlflow_run_id(str(tmp_path)) and not is_mlflow_run_id("runs/a")
    report = tmp_path / "a" / "report.html"
    report.parent.mkdir()
    report.write_text("<html></html>")
    assert _href(str(report), tmp_path / "compare.html") == "a/report.html"
    assert _href(str(report), None) == report.as_uri()
    assert _href("a/report.html", None) == "" and _href("", None) == "" and _href(str(tmp_path / "no.html"), None) == ""
