"""The report opened in headless Chromium: every section present, charts drawn, no console errors, no network."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import synth_run

from trainspect.report import default_registry, render_compare, render_report, summary_for
from trainspect.rules.verdict import Status, Verdict

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
XSS = "<img src=x onerror=alert(1)>"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "install Debian's chromium (apt-get install chromium) for the browser tests"
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1400, "height": 900},
        )
        yield ctx
        ctx.close()


def _open(browser: Any, html_file: Path, shot: str) -> dict[str, Any]:
    page = browser.new_page()
    seen: dict[str, Any] = {"errors": [], "blocked": [], "dialogs": []}
    page.on("console", lambda m: m.type == "error" and seen["errors"].append(m.text))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))

    def route(r: Any) -> None:
        if r.request.url.startswith(("file:", "about:")):
            r.continue_()
        else:
            seen["blocked"].append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(html_file.as_uri(), wait_until="load")
    page.wait_for_selector("body[data-charts-ready]")
    seen["sections"] = page.eval_on_selector_all("[data-section]", "els => els.map(e => e.id)")
    seen["charts"] = int(page.get_attribute("body", "data-charts-ready") or 0)
    seen["drawn"] = page.evaluate("window.trainspectDrawAll()")
    seen["canvases"] = page.eval_on_selector_all("[data-chart] canvas", "els => els.length")
    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / shot), full_page=False)
    seen["text"] = page.inner_text("body")
    seen["first_screen"] = page.evaluate("""() => {
        const out = [];
        const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        while (walk.nextNode()) {
            const r = document.createRange();
            r.selectNodeContents(walk.currentNode);
            const box = r.getBoundingClientRect();
            if (box.height > 0 && box.bottom <= window.innerHeight && box.right <= window.innerWidth) {
                out.push(walk.currentNode.textContent);
            }
        }
        return out.join(" ");
    }""")
    page.close()
    return seen


def test_report_in_chromium(browser: Any, synthetic_run: Path, tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    html.write_text(render_report(synthetic_run, price_per_hour=3.825))
    seen = _open(browser, html, "report-synthetic.png")
    assert seen["errors"] == [] and seen["blocked"] == [] and seen["dialogs"] == []
    assert sorted(seen["sections"]) == sorted(s.id for s in default_registry().sections())
    # no Python profile, no CUDA memory: one line each, at the end
    assert seen["sections"][0] == "verdict" and seen["sections"][-2:] == ["python", "cuda-memory"]
    assert seen["charts"] > 10 and seen["drawn"] == seen["charts"] and seen["canvases"] >= seen["charts"]
    assert (ARTIFACTS / "report-synthetic.png").stat().st_size > 10_000


def test_torch_run_report_in_chromium(browser: Any, torch_run: Path) -> None:
    seen = _open(browser, torch_run / "report.html", "report-torch.png")
    assert seen["errors"] == [] and seen["blocked"] == []
    assert "Tensors and losses" in seen["text"] and seen["drawn"] > 0


def test_html_in_names_does_not_execute(browser: Any, tmp_path: Path) -> None:
    from trainspect.rules import Series

    run = synth_run.write_run(
        tmp_path / "run",
        seconds=30,
        steps=100,
        verdicts=[
            Verdict(
                f"R{XSS}",
                Status.ISSUES_FOUND,
                message=f"{XSS}</script><script>alert(2)</script>",
                triggers=1,
                tensors=(XSS,),
                series=(Series(f"{XSS}</script><!--", (0, 1), (1.0, 2.0)),),
            )
        ],
    )
    html = tmp_path / "x.html"
    html.write_text(render_report(run))
    seen = _open(browser, html, "report-xss.png")
    assert seen["dialogs"] == [] and seen["errors"] == []
    assert XSS in seen["text"]  # shown as text


def test_compare_page_in_chromium(browser: Any, tmp_path: Path) -> None:
    a = synth_run.write_run(tmp_path / "a", seconds=60, steps=100)
    b = synth_run.write_run(tmp_path / "b", seconds=60, steps=100, cpu=60)
    html = tmp_path / "compare.html"
    html.write_text(render_compare(summary_for(a, 14.688), summary_for(b, 3.825)))
    seen = _open(browser, html, "compare.png")
    assert seen["errors"] == [] and seen["blocked"] == [] and seen["sections"] == ["comparison"]
    assert "saving" in seen["text"] and seen["drawn"] == 1
    shutil.copy(html, ARTIFACTS / "compare.html")


def test_report_in_a_sandboxed_iframe_like_mlflows_artifact_view(browser: Any, synthetic_run: Path) -> None:
    """MLflow shows HTML artifacts as <iframe sandbox="allow-scripts" src=blob:...>: no same-origin access."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_content(
        "<html><body><iframe id=f sandbox='allow-scripts' style='width:1200px;height:800px'></iframe></body></html>"
    )
    page.evaluate(
        "html => { document.getElementById('f').src = URL.createObjectURL(new Blob([html], {type: 'text/html'})); }",
        render_report(synthetic_run),
    )
    frame = page.frame_locator("#f")
    frame.locator("body[data-charts-ready]").wait_for(timeout=30_000)
    assert int(frame.locator("body").get_attribute("data-charts-ready") or 0) > 10
    assert frame.locator("[data-section]").count() == len(default_registry().sections())
    frame.locator("[data-chart]").first.scroll_into_view_if_needed()
    frame.locator("[data-chart] canvas").first.wait_for(timeout=10_000)  # charts are drawn as they come into view
    assert errors == []
    page.close()


def test_first_screen_of_a_nan_run_names_the_rules_steps_and_fixes(browser: Any, nan_run: Path, tmp_path: Path) -> None:
    html = tmp_path / "nan.html"
    html.write_text(render_report(nan_run))
    seen = _open(browser, html, "report-nan-first-screen.png")
    assert seen["errors"] == [] and seen["blocked"] == []
    first = seen["first_screen"]  # the text fully inside the first 1400x900 viewport
    from trainspect.rules import Status, load_verdicts

    triggered = [v for v in load_verdicts(nan_run) if v.status is Status.ISSUES_FOUND]
    assert {"ExplodingTensor", "LossNotDecreasing"} <= {v.rule for v in triggered}
    for v in triggered:  # each rule with issues: its name, first step and mode, and the start of its recommendation
        mode = v.mode.split("+")[0] if v.mode else "TRAIN"
        for text in (v.rule, f"step {v.first_trigger_step} ({mode})", v.recommendation[:30]):
            assert text in first, text
    assert "MSELoss_output_0" in first


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (800, 600)])
def test_verdict_table_fits_narrow_windows_and_mlflows_iframe(
    browser: Any, nan_run: Path, tmp_path: Path, width: int, height: int
) -> None:
    """At 1024 px and in MLflow's ~800 px artifact iframe the recommendation column is on screen, nothing scrolls."""
    html = tmp_path / "nan.html"
    html.write_text(render_report(nan_run))
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": height})
    page.goto(html.as_uri())
    page.wait_for_selector("table.verdict-table")
    box = page.evaluate("""() => {
        const t = document.querySelector('table.verdict-table');
        const recs = [...t.querySelectorAll('tbody tr')].map((r) => r.cells[5].getBoundingClientRect());
        const holder = t.parentElement;  // .tablebox, which would scroll a table wider than itself
        return {recs: recs.map((r) => [r.left, r.right, r.width]), tableW: t.scrollWidth, boxW: holder.clientWidth,
                docW: document.documentElement.scrollWidth, viewW: window.innerWidth,
                text: [...t.querySelectorAll('tbody tr')].map((r) => r.cells[5].innerText)};
    }""")
    page.close()
    assert box["recs"] and all(t.strip() for t in box["text"])
    for left, right, w in box["recs"]:
        assert w > 80 and left >= 0 and right <= box["viewW"], box  # visible, inside the viewport's width
    assert box["tableW"] <= box["boxW"], box  # the table does not overflow its box
    assert box["docW"] <= box["viewW"], box  # the page does not scroll sideways
