"""Before/after comparison: per unit of work (runs of different lengths), SageMaker's 83 % example, the HTML page."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import synth_run

from trainspect.cli import main
from trainspect.report import RunSummary, compare_runs, compare_table, render_compare, summary_for
from trainspect.report.cli import parse_prices
from trainspect.report.compare import saving_percent, time_saving_percent

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _run(path: Path, nodes: int, seconds: float, steps: int = 100, step_s: float | None = None) -> Path:
    # steps end `seconds` after the start: init 5 s + steps, closing 1 s later
    step_s = step_s or (seconds - 5.0 - 1.0 - 0.005 * (steps - 1)) / steps
    return synth_run.write_run(path, seconds=seconds, interval_s=0.5, nodes=nodes, steps=steps, step_s=step_s, seed=1)


def _rows(a: RunSummary, b: RunSummary) -> dict[str, dict[str, Any]]:
    return {r["label"]: r for r in compare_runs(a, b)}


def test_sagemaker_example_saving_of_83_percent(tmp_path: Path) -> None:
    a = summary_for(_run(tmp_path / "p3.8xlarge-x3", nodes=3, seconds=503), 14.688)
    b = summary_for(_run(tmp_path / "p3.2xlarge-x2", nodes=2, seconds=502), 3.825)
    assert (a.instances, b.instances) == (3, 2) and (a.steps, b.steps) == (100, 100)
    assert a.duration_s == pytest.approx(503, abs=1.5) and b.duration_s == pytest.approx(502, abs=1.5)
    assert round(saving_percent(a, b)) == 83
    table = compare_table(a, b)
    assert "83%" in table and "p3.8xlarge-x3" in table
    rows = _rows(a, b)
    saving = rows["projected cost saving for the same work"]
    assert saving["winner"] == "b" and saving["b"] == "83%"
    assert rows["instances (nodes)"]["b"] == "2" and rows["cost per 1,000 steps ($)"]["winner"] == "b"


def test_twice_the_steps_in_60_percent_of_the_time_wins() -> None:
    """The issue's case: B did twice the steps in 60 % of A's time. B wins every per-work row; totals rank nothing."""
    a = RunSummary(
        "a",
        duration_s=100.0,
        loop_s=90.0,
        steps=1000,
        step_p50_s=0.09,
        step_p95_s=0.1,
        price_per_hour=3.6,
        batch_size=32,
        steps_per_epoch=500,
        gpu_mean=40.0,
        gpu_p95=60.0,
    )
    b = RunSummary(
        "b",
        duration_s=60.0,
        loop_s=54.0,
        steps=2000,
        step_p50_s=0.027,
        step_p95_s=0.03,
        price_per_hour=3.6,
        batch_size=32,
        steps_per_epoch=500,
        gpu_mean=80.0,
        gpu_p95=95.0,
    )
    assert round(saving_percent(a, b)) == 70 and round(time_saving_percent(a, b)) == 70
    rows = _rows(a, b)
    for label in (
        "throughput (steps/s)",
        "throughput (samples/s)",
        "time per 1,000 steps (s)",
        "cost per 1,000 steps ($)",
        "time per epoch (s)",
        "cost per epoch ($)",
        "step time p95 (s, compute, no input wait)",
        "GPU utilisation mean (%)",
        "projected cost saving for the same work",
    ):
        assert rows[label]["winner"] == "b", label
    for label in ("job duration (s, start-up included)", "steps done", "cost of the run ($)"):
        assert rows[label]["winner"] is None, label
    assert rows["projected cost saving for the same work"]["b"] == "70%"
    # training-loop time per 1,000 steps: 1,000 / steps/s (90 s / 1000 steps, 54 s / 2000 steps)
    assert rows["time per 1,000 steps (s)"]["a"] == "90" and rows["time per 1,000 steps (s)"]["b"] == "27"
    assert rows["throughput (samples/s)"]["b"] == "1,185"  # 2000 steps / 54 s x 32


def test_shorter_run_that_did_less_work_loses() -> None:
    """B ends sooner but did a quarter of the steps: per step it is slower, so A wins and the saving is negative."""
    a = RunSummary("a", duration_s=100.0, steps=1000, price_per_hour=1.0)
    b = RunSummary("b", duration_s=50.0, steps=250, price_per_hour=1.0)
    assert saving_percent(a, b) == pytest.approx(-100.0)
    rows = _rows(a, b)
    assert rows["time per 1,000 steps (s)"]["winner"] == "a" and rows["throughput (steps/s)"]["winner"] == "a"
    assert rows["projected cost saving for the same work"]["winner"] == "a"
    assert rows["projected cost saving for the same work"]["b"] == "-100%"


def test_without_a_price_the_saving_is_in_time_and_cpu_rows_rank_nothing_beside_gpus() -> None:
    a = RunSummary("a", duration_s=100.0, steps=1000, cpu_mean=20.0, gpu_mean=50.0, gpu_p95=60.0)
    b = RunSummary("b", duration_s=100.0, steps=2000, cpu_mean=60.0, gpu_mean=40.0, gpu_p95=50.0)
    rows = _rows(a, b)
    assert rows["projected time saving for the same work"]["b"] == "50%"
    cpu = "CPU utilisation mean (%; over 100 = more than one core)"
    assert rows[cpu]["winner"] is None  # with GPUs, a busier CPU is no win
    assert rows["GPU utilisation mean (%)"]["winner"] == "a"
    assert "cost per 1,000 steps ($)" not in rows  # unknown for both: left out
    cpu_only = _rows(RunSummary("a", cpu_mean=20.0), RunSummary("b", cpu_mean=60.0))
    assert cpu_only[cpu]["winner"] == "b"


def test_runs_of_different_lengths_from_run_directories(tmp_path: Path) -> None:
    a = summary_for(_run(tmp_path / "slow", nodes=1, seconds=60, steps=100, step_s=0.4))
    b = summary_for(_run(tmp_path / "fast", nodes=1, seconds=60, steps=400, step_s=0.1), batch_size=16)
    assert (a.steps, b.steps) == (100, 400)
    assert a.step_p99_s is not None and a.step_p99_s >= a.step_p95_s >= a.step_p50_s
    assert a.dataloader_wait_percent == pytest.approx(0.5, abs=0.1)  # 2 ms waits per 0.4 s step
    assert b.samples_per_s == pytest.approx(16 * b.steps_per_s) and a.samples_per_s is None
    rows = _rows(a, b)
    assert rows["throughput (steps/s)"]["winner"] == "b"
    assert rows["job duration (s, start-up included)"]["winner"] is None
    assert time_saving_percent(a, b) > 50


def test_compare_cli_prints_a_table_and_writes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _run(tmp_path / "a", 3, 503), _run(tmp_path / "b", 2, 502)
    out = tmp_path / "cmp.html"
    code = main(
        [
            "compare",
            str(a),
            str(b),
            "--price-per-hour",
            "A=14.688",
            "B=3.825",
            "--batch-size",
            "32",
            "--steps-per-epoch",
            "50",
            "-o",
            str(out),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "saving" in text and "83%" in text and "samples/s" in text and "cost per epoch" in text
    assert "83%" in out.read_text()
    assert main(["compare", str(a), str(tmp_path / "missing")]) == 2
    assert main(["compare", str(a), str(b), "--price-per-hour", "C=1"]) == 2
    assert main(["compare", str(a), str(b), "--batch-size", "A=x"]) == 2


def test_price_parsing_and_metrics_round_trip() -> None:
    assert parse_prices(["2.5"]) == (2.5, 2.5)
    with pytest.raises(ValueError, match="A=<price>"):
        parse_prices(["A=x"])
    s = RunSummary(
        "r",
        duration_s=10.0,
        instances=2,
        steps=5,
        loop_s=8.0,
        step_p99_s=0.5,
        gpu_p95=50.0,
        dataloader_wait_percent=3.0,
        batch_size=8,
        triggers={"X": 3},
        price_per_hour=1.0,
        startup_s=1.5,
        issues=("X",),
    )
    metrics = s.to_metrics()
    back = RunSummary.from_metrics("r", metrics)
    assert back.to_dict() == s.to_dict()
    assert metrics["trainspect/job_s"] == 10.0 and metrics["trainspect/startup_s"] == 1.5
    assert metrics["trainspect/steps_per_s"] == 5 / 8.0 and metrics["trainspect/time_per_1k_steps_s"] == 1600.0
    assert metrics["trainspect/samples_per_s"] == 5 / 8.0 * 8
    assert not any("duration" in k for k in metrics)  # MLflow shows its own run duration
    old = {**{k: v for k, v in metrics.items() if k != "trainspect/job_s"}, "trainspect/duration_s": 10.0}
    assert RunSummary.from_metrics("r", old).duration_s == 10.0  # a run logged before job_s


@pytest.mark.browser
def test_compare_page_shows_throughput_and_cost_per_1000_steps_in_chromium(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    a = summary_for(_run(tmp_path / "before", nodes=1, seconds=60, steps=100, step_s=0.4), 14.688)
    b = summary_for(_run(tmp_path / "after", nodes=1, seconds=40, steps=200, step_s=0.1), 3.825)
    html = tmp_path / "compare.html"
    html.write_text(render_compare(a, b), encoding="utf-8")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(html.as_uri(), wait_until="load")
        page.wait_for_selector("body[data-charts-ready]")
        cells = page.eval_on_selector_all(
            "#comparison tbody tr",
            "rows => rows.map(r => [r.querySelector('th').innerText, ...[...r.querySelectorAll('td')].map("
            "td => [td.innerText, getComputedStyle(td).color])])",
        )
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "compare-per-work.png"))
        browser.close()
    shutil.copy(html, ARTIFACTS / "compare-per-work.html")
    assert errors == []
    rows = {r[0]: r[1:] for r in cells}
    green = "rgb(21, 128, 61)"
    assert rows["throughput (steps/s)"][1][1] == green and rows["throughput (steps/s)"][0][1] != green
    assert rows["cost per 1,000 steps ($)"][1][1] == green
    assert rows["cost per 1,000 steps ($)"][1][0] == f"{b.cost_per_1k_steps:.4g}"
    duration = rows["job duration (s, start-up included)"]
    assert duration[1][1] != green and duration[0][1] != green  # a total: no winner
