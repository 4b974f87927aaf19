"""examples/analysis.ipynb runs top to bottom in a real kernel; its views draw in headless Chromium, offline."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")  # declared test dependencies ([test] extra)
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.slow  # a real kernel, torch and a short training: about 20 s

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "analysis.ipynb"
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
LABELS = {
    "MetricsHistogram": ["cpu_total", "utilisation %"],
    "StepHistogram": ["Step:ModeKeys.TRAIN", "DataLoaderIter"],
    "Heatmap": ["cpu0", "% utilisation"],
    "Timeline": ["TRAIN steps", "dataloader", "cpu total %"],
    "Verdicts": ["<table", "NoIssuesFound"],
}


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    """(view name, HTML) of every view the executed notebook displayed, in order."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cwd = tmp_path_factory.mktemp("nb")
    nbclient.NotebookClient(nb, timeout=90, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    out = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", output
            page = output.get("data", {}).get("text/html", "")
            found = re.match(r'<div class="trainspect-nb" data-view="(\w+)"', page)
            if found:
                out.append((found.group(1), page))
    return out


def test_the_notebook_shows_every_view_with_its_labels(views: list[tuple[str, str]]) -> None:
    names = [name for name, _page in views]
    assert names == ["MetricsHistogram", "StepHistogram", "Heatmap", "Timeline", "Verdicts", "MetricsHistogram"]
    for name, page in views:
        assert "<svg" in page and 'data-empty="1"' not in page, name
        for label in LABELS[name]:
            assert label in page, (name, label)
    assert "total (" in views[-1][1] or "cpu_total" in views[-1][1]  # the smdebug cell: CPU totals


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    playwright = pytest.importorskip("playwright.sync_api")
    assert Path(CHROMIUM).exists(), "install Debian's chromium (apt-get install chromium) for the browser tests"
    with playwright.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1200, "height": 900},
        )
        yield ctx
        ctx.close()


@pytest.mark.browser
def test_the_saved_views_draw_in_chromium_offline(views: list[tuple[str, str]], browser: Any, tmp_path: Path) -> None:
    page_file = tmp_path / "views.html"
    page_file.write_text(
        "<!doctype html><html><head><meta charset='utf-8'></head><body>"
        + "".join(page for _name, page in views)
        + "</body></html>",
        encoding="utf-8",
    )
    page = browser.new_page()
    errors: list[str] = []
    blocked: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route(
        "**/*",
        lambda r: (
            r.continue_()
            if r.request.url.startswith(("file:", "about:"))
            else (blocked.append(r.request.url), r.abort())
        ),
    )
    page.goto(page_file.as_uri(), wait_until="load")
    drawn = page.evaluate("""() => [...document.querySelectorAll('.trainspect-nb')].map(v => ({
        view: v.dataset.view,
        svgs: [...v.querySelectorAll('svg')].map(s => {
            const box = s.getBoundingClientRect();
            return {shapes: s.querySelectorAll('rect,polyline,line').length, w: box.width, h: box.height};
        })}))""")
    page.close()
    assert errors == [] and blocked == []
    assert [d["view"] for d in drawn] == [name for name, _page in views]
    for d in drawn:
        assert d["svgs"] and all(s["shapes"] > 0 and s["w"] > 0 and s["h"] > 0 for s in d["svgs"]), d
