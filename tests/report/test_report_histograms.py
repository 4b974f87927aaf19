"""The utilisation-histogram section (issue 31): counts exact against numpy, findings, chart cap, escaping, empty state."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import synthetic_run

from trainspect.profiler import SystemMetricsReader
from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.data import ProfilerData
from trainspect.report import ReportContext, render_report
from trainspect.report._histogram_section import MAX_CORES, UtilisationHistogramSection
from trainspect.report.sections import Page, SectionRegistry

FIX = Path(__file__).resolve().parents[1] / "data" / "smdebug_profiler_resources" / "test_traces"
EDGES = np.linspace(0, 100, 21)
XSS = "<img src=x onerror=alert(1)>"
T0 = 1_700_000_000.0


def _write(run: Path, node: str, core_means: list[float], gpu_means: list[float], n: int = 120, seed: int = 0) -> dict:
    """System samples of one node around the given means, rounded to what the store keeps (0.01 %)."""
    rng = np.random.default_rng(seed)
    keys = [f"cpu{i}_utilization_percent" for i in range(len(core_means))]
    keys += [f"gpu{g}_utilization_percent" for g in range(len(gpu_means))]
    means = np.array(core_means + gpu_means)
    vals = np.round(np.clip(means + rng.normal(0, 6, size=(n, len(keys))), 0, 100), 2)
    synthetic_run.write_system(run, node, 500, T0 + np.arange(n) * 0.5, keys, vals, 20)
    return dict(zip(keys, vals.T, strict=True))


def _build(ctx: ReportContext) -> Page:
    page = Page(prefix="h")
    UtilisationHistogramSection().build(ctx, page)
    return page


def _counts(page: Page) -> dict[str, list[float]]:
    """Every charted device's bar heights, by series name (device)."""
    return {s["name"]: s["data"] for c in page.charts.values() for s in c["series"]}


def _texts(page: Page) -> str:
    return "\n".join(str(b.get("text", "")) for b in page.blocks)


def _hist(values: np.ndarray) -> list[float]:
    return [float(c) for c in np.histogram(values, bins=EDGES)[0]]


def test_counts_equal_numpy_and_the_findings_name_the_problems(tmp_path: Path) -> None:
    cores = [97.0, 96.0] + [20.0] * 8  # two pinned cores of ten
    written = _write(tmp_path, "algo-1", cores, [45.0, 10.0])
    page = _build(ReportContext.load(tmp_path))
    got = _counts(page)
    cpu = np.mean([written[f"cpu{i}_utilization_percent"] for i in range(10)], axis=0)
    assert got["cpu_total"] == _hist(cpu)
    for key, values in written.items():
        device = key.split("_")[0]
        if device in got:
            assert got[device] == _hist(values), device
    gpus = np.mean([written["gpu0_utilization_percent"], written["gpu1_utilization_percent"]], axis=0)
    assert got["gpu_total"] == _hist(gpus)
    charted_cores = [d for d in got if d.startswith("cpu") and d != "cpu_total"]
    assert len(charted_cores) == MAX_CORES and {"cpu0", "cpu1"} <= set(charted_cores)  # the busiest kept
    text = _texts(page)
    assert "Left out of the charts: 4 of 14 devices" in text
    assert "GPU means differ by" in text and "poor load distribution" in text
    assert "2 CPU core(s) pinned near 100 % (cpu0, cpu1)" in text and "underused" in text
    assert "centred at 80–90 %" in text  # the reading guidance
    table = next(b for b in page.blocks if b["kind"] == "table")
    assert [r[0] for r in table["rows"]][:3] == ["cpu_total", "cpu0", "cpu1"] and len(table["rows"]) == 14


def test_busy_even_gpus_read_as_good_use(tmp_path: Path) -> None:
    _write(tmp_path, "n", [40.0, 40.0], [85.0, 88.0])
    notes = [b for b in _build(ReportContext.load(tmp_path)).blocks if b["kind"] in ("note", "warn")]
    assert [(b["kind"], b["text"]) for b in notes] == [("note", notes[0]["text"])] and "good use" in notes[0]["text"]


def test_sagemaker_profiler_output_matches_numpy() -> None:
    arrays = SystemMetricsReader(FIX).read_arrays()["algo-1"]
    page = _build(ReportContext.load(FIX))
    got = _counts(page)
    for g in arrays.gpus:
        column = arrays.column(f"gpu{g}_utilization_percent").astype(np.float64)
        assert got[f"gpu{g}"] == _hist(column[np.isfinite(column)])
    assert got["cpu_total"] == _hist(arrays.cpu_total())
    for device in (d for d in got if d.startswith("cpu") and d != "cpu_total"):
        assert got[device] == _hist(arrays.column(f"{device}_utilization_percent").astype(np.float64))
    assert f"Left out of the charts: {32 - MAX_CORES} of" in _texts(page) and "and 10 more)" in _texts(page)


def _only_histograms() -> SectionRegistry:
    reg = SectionRegistry()
    reg.register(UtilisationHistogramSection())
    return reg


def test_a_hostile_node_name_renders_as_text(tmp_path: Path) -> None:
    """A node's name as a SageMaker file or a foreign store could give it (trainspect's own store sanitises it)."""
    values = np.array([[10.0, 80.0], [20.0, 90.0], [30.0, 85.0]], np.float32)
    arrays = SystemArrays(XSS, T0 + np.arange(3.0), ("cpu0_utilization_percent", "gpu0_utilization_percent"), values)
    ctx = ReportContext(run_dir=tmp_path, profiler=ProfilerData(path=tmp_path, system={XSS: arrays}))
    html = render_report(ctx, registry=_only_histograms())
    assert XSS not in html
    assert "Node &lt;img src=x onerror=alert(1)&gt;" in html
    payload = re.search(r'<script id="ts-charts" type="application/json">(.*?)</script>', html, re.S).group(1)
    assert "</" not in payload and any(XSS in c["title"]["text"] for c in json.loads(payload).values())


def test_no_system_metrics_is_an_empty_state_not_an_error(tmp_path: Path) -> None:
    html = render_report(tmp_path / "empty", registry=_only_histograms())
    assert re.search(
        r'<li id="utilisation-histograms" data-section="utilisation-histograms" data-empty="1">.*'
        r"No system metrics were recorded",
        html,
        re.S,
    )
    memory_only = tmp_path / "memory"
    synthetic_run.write_system(
        memory_only, "n", 500, T0 + np.arange(10.0), ["cpu_memory_used_percent"], np.full((10, 1), 30.0), 5
    )
    page = _build(ReportContext.load(memory_only))
    assert "Node n recorded no CPU or GPU utilisation." in _texts(page) and not page.charts


@pytest.mark.parametrize("means", [[], [5.0]])
def test_a_cpu_only_node_gets_one_chart_and_a_cpu_finding(tmp_path: Path, means: list[float]) -> None:
    _write(tmp_path, "cpu-box", [10.0, 12.0], means)
    page = _build(ReportContext.load(tmp_path))
    assert len(page.charts) == 1 + bool(means)
    assert ("No GPU recorded; the CPU averages" in _texts(page)) is (not means)
