"""Both views in headless Chromium inside a real TensorBoard (Playwright); screenshots in test-artifacts/."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import tb_synth as synth
from _support.tensorboard import XSS, TensorBoardProcess

from trainspect.rules.verdict import Status, Verdict, write_verdicts
from trainspect.store.layout import RunLayout
from trainspect.tb_plugin.runs import RunIndex

playwright_api = pytest.importorskip("playwright.sync_api")  # a declared test dependency ([test] extra)

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts" / "tb_plugin"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
pytestmark = [pytest.mark.browser, pytest.mark.slow]
# Every wait is on an element, a URL or a download, never a fixed sleep; its deadline only ends a test that would
# otherwise hang, so it is generous: TensorBoard, Chromium and the plugin's 5 s auto-refresh share a possibly busy
# machine (Playwright's default of 30 s is not enough there).
WAIT_MS = 120_000


@pytest.fixture(scope="module")
def live_logdir(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared runs plus one run whose verdicts the tests rewrite (TensorBoard reads a symlink-free copy)."""
    import shutil

    root = tmp_path_factory.mktemp("browser")
    for child in logdir.iterdir():
        shutil.copytree(child, root / child.name)
    write_verdicts(RunLayout(root / "live").verdicts, [Verdict("CPUBottleneck", Status.IN_PROGRESS, kind="profiler")])
    synth.write_manifest(root / "short")  # two system samples: too few to draw
    synth.write_system(root / "short", 0.2, cores=2, gpus=0)
    for f in (root / "short").rglob("*"):  # older than the others: the tab must not open on it
        os.utime(f, (1_600_000_000, 1_600_000_000))
    return root


@pytest.fixture(scope="module")
def tb_url(live_logdir: Path) -> Iterator[str]:
    board = TensorBoardProcess(live_logdir, "false")
    yield board.url
    board.close()


@pytest.fixture(scope="module")
def page(tb_url: str) -> Iterator[tuple[object, list[str]]]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path="/usr/bin/chromium",
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        context.set_default_timeout(WAIT_MS)
        pg = context.new_page()
        problems: list[str] = []
        pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        pg.goto(tb_url + "#trainspect")
        yield pg, problems
        context.close()


def frame(pg):  # noqa: ANN001, ANN201 - the plugin's iframe (data/plugin_entry.html?name=trainspect)
    pg.wait_for_selector("iframe")
    return pg.frame_locator("iframe")


def plugin_frame(pg):  # noqa: ANN001, ANN201
    return next(f for f in pg.frames if "/data/plugin/trainspect/" in f.url or "plugin_entry" in f.url)


def distinct_colours(pg) -> int:  # noqa: ANN001
    return plugin_frame(pg).evaluate("""() => {
        const c = document.querySelector('canvas.heatmap-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < d.length; i += 4 * 7) seen.add(`${d[i]},${d[i + 1]},${d[i + 2]}`);
        return seen.size;
    }""")


def test_profiler_view_draws_the_heatmap_and_charts(page, live_logdir: Path) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.locator("canvas.heatmap-canvas[data-drawn]").wait_for()
    runs = RunIndex(str(live_logdir)).runs()
    newest = max((r for r in runs.values() if r.profiler_at is not None), key=lambda r: r.profiler_at)
    assert f.locator("select[aria-label=run]").input_value() == newest.name  # opens on the newest profiled run
    f.locator("select[aria-label=run]").select_option("synth")
    f.locator(".rec strong", has_text="LowGPUUtilization").wait_for()
    f.locator(".controls .muted", has_text="3000 samples").wait_for()  # the synthetic run's 5 minutes at 100 ms
    drawn = int(f.locator("canvas.heatmap-canvas").get_attribute("data-drawn") or 0)
    assert drawn % 72 == 0 and drawn >= 72 * 50  # 72 rows (64 cores, 8 GPUs) x one bucket per pixel column
    assert distinct_colours(pg) > 50  # not blank: a colour scale over many values
    assert f.locator(".series-card").count() == 5
    assert f.locator(".series-card canvas").count() >= 5
    assert f.locator("text=aten::op0").count() == 1
    assert f.locator("select[aria-label='worker and mode'] option").count() == 2
    pg.screenshot(path=str(ARTIFACTS / "profiler.png"), full_page=True)
    assert problems == []


def test_zoom_into_a_time_range(page) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    canvas = f.locator("canvas.heatmap-canvas")
    before = f.locator(".controls .muted").inner_text()
    box = canvas.bounding_box()
    assert box is not None
    pg.mouse.move(box["x"] + 300, box["y"] + 50)
    pg.mouse.down()
    pg.mouse.move(box["x"] + 420, box["y"] + 60, steps=4)
    pg.mouse.up()
    f.locator(".controls .muted", has_text="samples").filter(has_not_text=before).wait_for()
    after = f.locator(".controls .muted").inner_text()
    assert int(after.split(" · ")[1].split()[0]) < 3000  # fewer samples in the zoomed range
    f.get_by_role("button", name="Reset zoom").click()
    f.locator(".controls .muted", has_text="3000 samples").wait_for()
    assert problems == []


def test_runs_without_data_say_so(page) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.locator("select[aria-label=run]").select_option("halfwritten")
    f.locator(".notice", has_text="no profiler data").wait_for()
    f.locator("select[aria-label=run]").select_option("corrupt")
    f.locator(".notice", has_text="Skipped damaged data").wait_for()
    pg.screenshot(path=str(ARTIFACTS / "profiler_corrupt.png"))
    assert problems == []


def test_a_run_with_two_samples_says_so_instead_of_empty_axes(page) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.locator("select[aria-label=run]").select_option("short")
    f.locator(".notice", has_text="system sample(s) were recorded").wait_for()
    assert f.locator(".heatmap").is_hidden() and f.locator(".series-card").count() == 0
    pg.screenshot(path=str(ARTIFACTS / "profiler_short_run.png"))
    assert problems == []


def _first_run_with_issues(root: Path) -> str:
    from trainspect.tb_plugin.run_data import RunData

    runs = RunIndex(str(root)).runs()
    for name in sorted(runs):
        if any(v.status is Status.ISSUES_FOUND for v in RunData(runs[name].path).verdicts()[0]):
            return name
    raise AssertionError("no run with issues in the test log directory")


def test_rules_tab_opens_on_the_run_with_issues_with_its_count_and_stop(page, live_logdir: Path) -> None:  # noqa: ANN001
    from trainspect.rules.counts import RuleCounts
    from trainspect.store.job_events import write_stop
    from trainspect.tb_plugin.run_data import RunData

    pg, problems = page
    expected = _first_run_with_issues(live_logdir)
    info = RunIndex(str(live_logdir)).runs()[expected]
    write_stop(info.path, "CPUBottleneck", 7, "TRAIN", "worker_0")
    f = frame(pg)
    f.get_by_role("button", name="Rules").click()
    f.locator(".run-summary").first.wait_for()
    assert f.locator("select.rules-run").input_value() == expected  # the first run whose rules found issues
    summary = f.locator(".run-summary")
    assert summary.count() == 1 and summary.get_attribute("data-run") == expected
    line = RuleCounts.of(RunData(info.path).verdicts()[0]).line()
    assert summary.locator(".count-line").inner_text() == f"{expected}: {line}"
    assert "stopped by StopTraining at step 7 (rule CPUBottleneck)" in summary.locator(".stop-line").inner_text()
    detail = f.locator(".rule-detail")
    detail.locator(".chip", has_text="IssuesFound").wait_for()  # the detail opens on its first rule with issues
    assert expected in detail.inner_text()
    assert all(r == expected for r in f.locator("tr.clickable td:first-child").all_inner_texts())
    links = plugin_frame(pg).evaluate("""async () => {
        const r = await import('/data/plugin/trainspect/static/rules.js');
        return Object.fromEntries(r.tensorLinks('loss', 'run.1'));
    }""")
    assert "regexInput=%5Erun%5C.1%24" in links["Scalars"] and "regexInput=%5Erun%5C.1%24" in links["Histograms"]
    ts_url = __import__("urllib.parse", fromlist=["x"]).urlparse(links["Time Series"])
    query = __import__("urllib.parse", fromlist=["x"]).parse_qs(ts_url.query)
    assert query["runFilter"] == ["^run\\.1$"] and query["tagFilter"] == ["^loss$"] and ts_url.fragment == "timeseries"
    assert problems == []


def test_rules_table_and_detail(page) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.get_by_role("button", name="Rules").click()
    f.locator("tr.clickable").first.wait_for()
    f.locator("select.rules-run option", has_text="every run").wait_for(state="attached")
    f.locator("select.rules-run").select_option("")  # every run (the tab opens on the run with issues)
    rows = f.locator("tr.clickable")
    assert rows.count() >= 2 + 2 + 2 + 10  # synth, XSS run, live, torch run
    f.locator(".notice", has_text="corrupt: rules/verdicts.json could not be read").wait_for()
    f.locator("tr.clickable", has=f.locator("td", has_text="synth")).filter(has_text="LowGPUUtilization").click()
    detail = f.locator(".rule-detail")
    detail.locator("th", has_text="threshold_p95").wait_for()
    assert "Increase the batch size." in detail.inner_text()
    detail.locator(".chart canvas").wait_for()
    pg.screenshot(path=str(ARTIFACTS / "rules.png"), full_page=True)
    assert problems == []


def test_xss_run_name_is_harmless(page) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.get_by_role("button", name="Rules").click()
    f.locator("select.rules-run option", has_text="every run").wait_for(state="attached")
    f.locator("select.rules-run").select_option("")  # every run (the tab opens on the run with issues)
    cell = f.locator("td", has_text="<img src=x onerror")
    cell.first.wait_for()
    assert cell.first.inner_text() == XSS
    cell.first.click()
    f.locator(".rule-detail", has_text=XSS).wait_for()
    assert f.locator("img").count() == 0
    f.get_by_role("button", name="Profiler").click()
    f.locator("select[aria-label=run]").select_option(XSS)
    f.locator("canvas.heatmap-canvas[data-drawn]").wait_for()
    assert f.locator("img").count() == 0
    assert pg.evaluate("window.__xss") is None and plugin_frame(pg).evaluate("window.__xss") is None
    assert problems == []


def test_rules_view_follows_new_verdicts(page, live_logdir: Path) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.get_by_role("button", name="Rules").click()
    f.locator("select.rules-run option", has_text="every run").wait_for(state="attached")
    f.locator("select.rules-run").select_option("")  # every run (the tab opens on the run with issues)
    live = f.locator("tr.clickable", has=f.locator("td", has_text="live"))
    live.locator(".chip", has_text="InProgress").wait_for()
    write_verdicts(
        RunLayout(live_logdir / "live").verdicts,
        [Verdict("CPUBottleneck", Status.ISSUES_FOUND, kind="profiler", triggers=4)],
    )
    f.get_by_role("button", name="Reload").click()
    live.locator(".chip", has_text="IssuesFound").wait_for()  # this reload, or the next auto-refresh
    assert problems == []


def test_profiler_view_has_python_hotspots_statistics_and_the_trace(page) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.get_by_role("button", name="Profiler").click()
    f.locator("select[aria-label=run]").select_option("torch_run")
    f.locator("canvas.heatmap-canvas[data-drawn]").wait_for()
    hot = f.locator("section.card", has_text="Python hotspots")
    hot.locator("td").first.wait_for()
    assert hot.locator("tbody tr").count() >= 3
    stats = f.locator("section.card", has_text="Utilisation statistics")
    assert "%" in stats.inner_text() and " B" in stats.inner_text()  # memory in bytes, not "%"
    link = f.locator("a.trace-link").first
    assert "Download the Chrome trace" in link.inner_text()
    with pg.expect_download() as info:
        link.click()
    path = info.value.path()
    body = __import__("json").loads(Path(path).read_text())
    assert body["traceEvents"] if isinstance(body, dict) else body  # a Chrome trace Perfetto opens
    pg.screenshot(path=str(ARTIFACTS / "profiler_torch_run.png"), full_page=True)
    assert problems == []


def test_units_come_from_the_catalogue_and_a_count_reads_as_a_count(page) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.get_by_role("button", name="Profiler").click()
    f.locator("select[aria-label=run]").select_option("torch_run")
    stats = f.locator("section.card[data-card=utilization]")
    row = stats.locator("tr", has_text="Processes of the training job")  # process_count, unit "count"
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == "Processes of the training job" and all(c.strip().isdigit() for c in cells[1:]), cells
    memory = stats.locator("tr", has_text="Memory, training job's processes").locator("td").all_inner_texts()
    assert all(c.endswith(" MB") or c.endswith(" GB") for c in memory[1:-1]), memory
    formatted = plugin_frame(pg).evaluate("""async () => {
        const u = await import('/data/plugin/trainspect/static/util.js');
        return [[12, 'count'], [1234, 'count'], [2.5, 'count'], [12, 'percent'], [12, '%'], [2048, 'bytes'],
                [1500, 'bytes/s'], [250, 'W'], [41.5, '°C'], [0.25, 's'], [7, '']].map(([v, unit]) => u.fmtUnit(v, unit));
    }""")
    assert formatted == ["12", "1,234", "2.5", "12 %", "12 %", "2.05 KB", "1.5 KB/s", "250 W", "41.5 °C", "250 ms", "7"]
    assert problems == []


def test_a_rules_tensor_link_opens_the_tensor_in_tensorboard(page, tb_url: str) -> None:  # noqa: ANN001
    pg, problems = page
    f = frame(pg)
    f.get_by_role("button", name="Rules").click()
    f.locator("select.rules-run option", has_text="every run").wait_for(state="attached")
    f.locator("select.rules-run").select_option("")  # every run (the tab opens on the run with issues)
    f.locator("tr.clickable", has=f.locator("td", has_text="torch_run")).filter(has_text="Overtraining").click()
    item = f.locator(".tensor-list li").first
    item.wait_for()
    tensor = item.get_attribute("data-tensor")
    assert tensor and tensor in item.inner_text()
    assert [a.inner_text() for a in item.locator("a.tb-link").all()] == ["Scalars", "Histograms", "Time Series"]
    f.locator(".rule-detail").scroll_into_view_if_needed()
    pg.screenshot(path=str(ARTIFACTS / "rules_detail.png"), full_page=True)
    item.locator("a.tb-link", has_text="Scalars").click()
    pg.wait_for_url(lambda url: "#scalars" in url and "tagFilter=" in url)
    assert "regexInput=%5Etorch_run%24" in pg.url  # the runs selector's filter: the rule's run only
    pg.get_by_text(tensor, exact=True).first.wait_for()  # the tag's card in TensorBoard's Scalars
    pg.screenshot(path=str(ARTIFACTS / "scalars_from_rule.png"))
    assert problems == []
    pg.goto(tb_url + "#trainspect")  # back to the plugin for any later test
