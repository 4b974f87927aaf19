"""Verdict first, readable charts, short runs: the report's first screen answers "is my run OK?"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import synth_run

from trainspect.report import render_report
from trainspect.report.charts import elapsed_labels, line_chart
from trainspect.report.sections import sig
from trainspect.rules.verdict import Series, Status, Verdict


def _charts(html: str) -> dict:
    m = re.search(r'<script id="ts-charts" type="application/json">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


def _first_section(html: str) -> tuple[str, str]:
    m = re.search(r'<section id="([\w-]+)" data-section="[\w-]+">(.*?)</section>', html, re.S)
    assert m
    return m.group(1), m.group(2)


def test_a_nan_run_opens_on_its_verdict(nan_run: Path) -> None:
    html = render_report(nan_run)
    sid, body = _first_section(html)
    assert (
        sid == "verdict" and "Issues found." in body and "2 found issues (ExplodingTensor, LossNotDecreasing)" in body
    )
    # the earliest problem first, with its step, tensor and what to do
    assert body.index("ExplodingTensor") < body.index("LossNotDecreasing")
    assert "step 3 (TRAIN)" in body and "MSELoss_output_0" in body and "lower the learning rate" in body
    # the NaN steps are marked on the loss chart, and said in words
    loss = next(c for c in _charts(html).values() if c["title"]["text"] == "Loss (TRAIN)")
    nan_marks = [s for s in loss["series"] if s["name"].startswith("NaN/Inf in")]
    assert nan_marks and nan_marks[0]["data"] and "first NaN/Inf: step 3" in json.dumps(nan_marks[0]["markLine"])
    assert "NaN/Inf at" in html and "first at step 3" in html


def test_a_healthy_run_says_so_and_empty_sections_take_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    from trainspect.rules.verdict import write_verdicts
    from trainspect.store.layout import RunLayout

    write_verdicts(RunLayout(run).verdicts, [Verdict("ExplodingTensor", Status.NO_ISSUES_FOUND, datapoints=5)])
    html = render_report(run)
    from trainspect.rules.counts import RuleCounts
    from trainspect.rules.verdict import read_verdicts

    line = RuleCounts.of(read_verdicts(RunLayout(run).verdicts)).line()
    assert _first_section(html)[0] == "verdict" and f"No issues. {line}" in html.replace("&#39;", "'")
    empty = re.findall(
        r'<li id="([\w-]+)" data-section="[\w-]+" data-empty="1"><strong>(.*?)</strong>(.*?)</li>', html, re.S
    )
    ids = [e[0] for e in empty]
    assert "system-usage" in ids and "heatmap" in ids and "Not shown" not in html
    assert all(e[2].strip() and "\n" not in e[2].strip() for e in empty)  # one line each: what to enable


def test_thresholds_triggers_and_log_scale() -> None:
    x = np.arange(200, dtype=float)
    y = 1e-2 * 10.0 ** (-x / 20)  # spans 10 orders of magnitude
    opt = line_chart({"mean |grad|": (x, y)}, "t", x_type="value", mark_x=list(range(150, 200)), threshold=1e-7)
    assert opt["yAxis"]["type"] == "log" and opt["xAxis"]["name"] == "step" and opt["xAxis"]["minInterval"] == 1
    main, marks = opt["series"][0], opt["series"][1]
    assert main["name"] == "mean |grad|" and main["markLine"]["data"] == [{"yAxis": 1e-7}]
    assert main["markLine"]["label"]["formatter"] == "threshold 1e-07"
    assert marks["type"] == "scatter" and len(marks["data"]) == 50  # one marker per trigger, no curtain of lines
    assert marks["data"][0] == [150.0, float(f"{y[150]:.4g}")]
    assert min(p[1] for p in main["data"]) > 0  # 1e-11 is not rounded to 0
    lin = line_chart({"loss": (x, x + 1)}, "t", x_type="value")
    assert lin["yAxis"]["type"] == "value"


def test_time_axes_fit_a_one_second_run() -> None:
    t = 1_700_000_000 + np.arange(10) * 0.1
    opt = line_chart({"cpu": (t, np.full(10, 50.0))}, "t", y_unit="%")
    assert opt["xAxis"]["min"] == "dataMin" and opt["xAxis"]["max"] == "dataMax"
    assert opt["series"][0]["data"][0][0] == 0.0 and opt["series"][0]["data"][-1][0] == 0.9
    assert opt["xAxis"]["name"].startswith("time since ") and opt["yAxis"]["tsUnit"] == "%"


def test_labels_never_repeat_and_numbers_keep_three_digits() -> None:
    for width in (0.05, 0.1, 0.37, 1.5, 2.5, 7.3):
        labels = elapsed_labels(list(np.arange(0, 3700, width)[:3000]))
        assert len(set(labels)) == len(labels), width
    assert [sig(v) for v in (0.01, 0.009688, 148022768.0)] == ["0.01", "0.00969", "148,022,768"]


def test_short_runs_say_so_instead_of_empty_axes(tmp_path: Path) -> None:
    run = synth_run.write_run(
        tmp_path / "run",
        seconds=0.3,
        interval_s=0.1,
        steps=3,
        step_s=0.05,
        verdicts=[
            Verdict(
                "R",
                Status.ISSUES_FOUND,
                triggers=1,
                series=(Series("v", (0.0,), (1.0,)),),
                parameters={"only_nan": False},
            )
        ],
    )
    html = render_report(run)
    assert "system sample(s) were recorded" in html and "too few to chart" in html
    assert "only_nan=false" in html
    assert not any(c["title"]["text"].startswith("Utilisation over time") for c in _charts(html).values())
