"""The HTML report at scale: 1 h of 100 ms samples on 64 cores + 8 GPUs plus 36,000 steps (issue 5 targets).

    .venv/bin/python benchmarks/bench_report.py [--quick]

The run directory is written with trainspect's own profiler writers (tests/report/synth_run.py). Targets: generated
in < 10 s (load + profiler rules + render + write), file < 5 MB, opening in headless Chromium in < 3 s (navigation
until the page's charts are registered).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "report"))

import synth_run  # noqa: E402

from trainspect.report import write_report  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip


def open_time(html: Path, tries: int = 3) -> tuple[float, int, list[str]]:
    """Median seconds from navigation to charts registered (ECharts parsed, visible charts drawn)."""
    from playwright.sync_api import sync_playwright

    times, errors, drawn = [], [], 0
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(tempfile.mkdtemp(), executable_path=CHROMIUM, headless=True,
                                                   args=ARGS, viewport={"width": 1280, "height": 900})  # fmt: skip
        for _ in range(tries):
            page = ctx.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            start = time.perf_counter()
            page.goto(html.as_uri(), wait_until="load")
            page.wait_for_selector("body[data-charts-ready]")
            times.append(time.perf_counter() - start)
            drawn = page.evaluate("window.trainspectDrawAll()")
            page.close()
        ctx.close()
    return sorted(times)[len(times) // 2], drawn, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10 minutes of data instead of 1 hour")
    args = parser.parse_args()
    seconds, steps = (600, 6000) if args.quick else (3600, 36000)
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    run = tmp / "run"
    t = time.perf_counter()
    synth_run.write_run(run, seconds=seconds, interval_s=0.1, cores=64, gpus=8, steps=steps, step_s=0.09,
                        gpu=45.0, verdicts=synth_run.sample_verdicts())  # fmt: skip
    written = time.perf_counter() - t
    t = time.perf_counter()
    out = write_report(run, tmp / "report.html", price_per_hour=24.48)
    generated = time.perf_counter() - t
    size = out.stat().st_size
    opened, drawn, errors = open_time(out)
    result = {
        "data": f"{seconds} s x 100 ms, 64 cores + 8 GPUs (84 metrics), {steps} steps",
        "write_synthetic_s": round(written, 2),
        "generate_s": round(generated, 2),
        "size_mb": round(size / 1e6, 2),
        "open_chromium_s": round(opened, 2),
        "charts": drawn,
        "page_errors": errors,
        "targets": {"generate_s": "< 10", "size_mb": "< 5", "open_chromium_s": "< 3"},
        "ok": generated < 10 and size < 5e6 and opened < 3 and not errors,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
