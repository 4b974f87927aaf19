"""The HTML report: sections, missing-data notes, bad input, escaping, and the hook writing it at close."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import synth_run

from trainspect.report import (
    REQUIREMENT_HINTS,
    Page,
    ReportContext,
    Section,
    SectionRegistry,
    default_registry,
    render_report,
    script_json,
    write_report,
)
from trainspect.rules.verdict import Status, Verdict, write_verdicts
from trainspect.store.layout import RunLayout

XSS = "<img src=x onerror=alert(1)>"
ALL_SECTIONS = [s.id for s in default_registry().sections()]


def _section(html: str, sid: str) -> str:
    """A section's HTML: a full section with data, or its one line under "Not recorded in this run"."""
    m = re.search(rf'<section id="{sid}" data-section="{sid}">(.*?)</section>', html, re.S) or re.search(
        rf'<li id="{sid}" data-section="{sid}" data-empty="1">(.*?)</li>', html, re.S
    )
    assert m, f"section {sid} missing"
    return m.group(1)


def _charts(html: str) -> dict:
    m = re.search(r'<script id="ts-charts" type="application/json">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


def test_every_section_renders_for_a_full_run(synthetic_run: Path) -> None:
    html = render_report(synthetic_run, price_per_hour=3.825)
    for sid in (
        "job-summary",
        "system-usage",
        "heatmap",
        "framework-ratios",
        "step-durations",
        "dataloader",
        "rules-summary",
        "triggered-rules",
        "cost",
    ):
        body = _section(html, sid)
        assert "Not shown" not in body, sid
    charts = _charts(html)
    assert any(c["series"][0]["type"] == "heatmap" for c in charts.values())
    assert "algo-1" in _section(html, "system-usage") and "algo-2" in _section(html, "system-usage")
    # plain-language advice at 30 % CPU and 40 % GPU
    assert "smaller instance" in _section(html, "system-usage")
    assert "$" in _section(html, "cost")


def test_report_is_self_contained(synthetic_run: Path) -> None:
    html = render_report(synthetic_run)
    assert "echarts" in html and len(html) > 1_000_000  # ECharts inlined
    assert not re.search(r'<script[^>]+src=|<link[^>]+href=|https?://(?!www\.w3\.org)[^"\s]*\.(js|css)', html)
    assert "default-src 'none'" in html


def test_rules_summary_sorted_by_triggers_with_parameters_and_recommendations(synthetic_run: Path) -> None:
    body = _section(render_report(synthetic_run), "rules-summary")
    rows = re.findall(r'<tr><td>(\w+)</td><td>\w+</td><td>\w+</td><td class="num">([\d,]+)</td>', body)
    counts = [int(n.replace(",", "")) for _, n in rows]
    assert counts == sorted(counts, reverse=True) and len(rows) >= 2
    assert "threshold=1e-07" in body
    assert "Use ReLU activations" in body


def test_triggered_rule_has_its_chart_with_steps_and_tensors(synthetic_run: Path) -> None:
    html = render_report(synthetic_run)
    body = _section(html, "triggered-rules")
    assert "VanishingGradient" in body and "10 … 30" in body and "gradient/fc1.weight" in body
    chart_ids = re.findall(r'data-chart="(triggered-rules-\d+)"', body)
    series = [_charts(html)[c]["series"][0] for c in chart_ids]
    assert any(s["name"].startswith("mean |gradient/fc1.weight|") and s["markLine"]["data"] for s in series)


@pytest.mark.parametrize("setup", ["missing", "empty", "no_profiler", "corrupt"])
def test_bad_or_partial_run_directories_give_a_report_that_says_what_is_missing(tmp_path: Path, setup: str) -> None:
    run = tmp_path / "run"
    if setup != "missing":
        run.mkdir()
    if setup == "no_profiler":
        write_verdicts(RunLayout(run).verdicts, synth_run.sample_verdicts())
    if setup == "corrupt":
        synth_run.write_run(run, seconds=20, steps=50)
        for f in (run / "profiler").rglob("*.t*"):
            f.write_bytes(b"TS\x01garbage" * 50)
        RunLayout(run).verdicts.parent.mkdir(exist_ok=True)
        RunLayout(run).verdicts.write_text("{not json")
    html = render_report(run)
    assert REQUIREMENT_HINTS["system"].split(".")[0] in _section(html, "system-usage")  # one line, what to enable
    assert "Not shown" not in html
    if setup == "no_profiler":
        assert "Not shown" not in _section(html, "rules-summary")
    if setup == "corrupt":
        assert "Could not read rule verdicts" in html
    if setup == "missing":
        assert "is not a directory" in html


def test_names_with_html_render_as_text(tmp_path: Path) -> None:
    run = synth_run.write_run(
        tmp_path / "run",
        seconds=30,
        steps=100,
        verdicts=[
            Verdict(
                f"Rule{XSS}",
                Status.ISSUES_FOUND,
                message=f"tensor {XSS} </script><!-- is bad",
                triggers=2,
                tensors=(XSS,),
                parameters={XSS: XSS},
                recommendation=XSS,
                series=(__import__("trainspect").rules.Series(f"{XSS}</script>", (0, 1, 2), (1.0, 2.0, 3.0)),),
            ),
        ],
    )
    html = render_report(run)
    assert XSS not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    payload = re.search(r'<script id="ts-charts" type="application/json">(.*?)</script>', html, re.S).group(1)
    assert "</" not in payload and "<!--" not in payload
    assert any(s.get("name") == f"{XSS}</script>" for c in json.loads(payload).values() for s in c.get("series", []))


def test_script_json_escapes_script_breakers() -> None:
    text = script_json({"k": "</script><!-- & >"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"k": "</script><!-- & >"}


def test_sections_registry_declares_requirements_and_skips_with_a_note(tmp_path: Path) -> None:
    class Needy(Section):
        id, title, requires = "needy", "Needs operators", ("operators",)

        def build(self, ctx: ReportContext, page: Page) -> None:
            raise AssertionError("must not be built without its data")

    class Broken(Section):
        id, title = "broken", "Broken section"

        def build(self, ctx: ReportContext, page: Page) -> None:
            raise RuntimeError("boom")

    reg = SectionRegistry()
    reg.register(Needy())
    reg.register(Broken())
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Needy())

    class Unknown(Section):
        id, title, requires = "unknown", "Unknown", ("telepathy",)

    with pytest.raises(ValueError, match="telepathy"):
        reg.register(Unknown())
    html = render_report(tmp_path, registry=reg)
    assert REQUIREMENT_HINTS["operators"].split(":")[0] in _section(html, "needy")
    assert "could not be rendered (RuntimeError: boom)" in _section(html, "broken")


def test_hook_writes_the_report_at_close_from_a_real_torch_run(torch_run: Path) -> None:
    report = RunLayout(torch_run).report
    assert report.exists()
    html = report.read_text()
    for sid in ALL_SECTIONS:
        assert f'id="{sid}"' in html
    for sid in ("job-summary", "system-usage", "heatmap", "step-durations", "rules-summary", "tensors"):
        assert "Not shown" not in _section(html, sid), sid
    assert "LossNotDecreasing" in _section(html, "rules-summary")
    loss_charts = [c for c in _charts(html).values() if c["title"]["text"].startswith("Loss (TRAIN)")]
    assert loss_charts and len(loss_charts[0]["series"][0]["data"]) == 96


def test_write_report_cli(synthetic_run: Path, tmp_path: Path) -> None:
    from trainspect.cli import main

    out = tmp_path / "r.html"
    assert main(["report", str(synthetic_run), "-o", str(out), "--price-per-hour", "2.5"]) == 0
    assert "Price per instance-hour" in out.read_text()
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert write_report(synthetic_run, tmp_path / "x.html").exists()
