"""The HTML report at scale: 1 h of 100 ms samples on 64 cores + 8 GPUs plus 36,000 steps (issue 5 targets).

    .venv/bin/python benchmarks/bench_report.py [--quick]
    .venv/bin/python benchmarks/bench_report.py --scaling [--quick]

``--scaling`` (issue 30): ``trainspect report`` in a subprocess on runs of 1 h, 24 h and 48 h of 100 ms system
samples (``--quick``: 1 h, 4 h, 8 h), 4 cores + 2 GPUs (12 metrics) and a step every 0.3 s; prints wall time and
peak RSS per run and the exponent of a log-log fit of time against length. Targets: <= 30 s and <= 1 GB at 48 h,
exponent <= 1.1.

The run directory is written with trainspect's own profiler writers (tests/report/synth_run.py). Targets: generated
in < 10 s (load + profiler rules + render + write), file < 5 MB, opening in headless Chromium in < 3 s (navigation
until the page's charts are registered).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
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
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def open_time(html: Path, tries: int = 3) -> tuple[float, int, list[str]]:
    """Median seconds from navigation to charts registered (ECharts parsed, visible charts drawn)."""
    from playwright.sync_api import sync_playwright

    times, errors, drawn = [], [], 0
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            tempfile.mkdtemp(),
            executable_path=CHROMIUM,
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 900},
        )
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


def _peak_rss_mb(proc: subprocess.Popen[bytes]) -> float:
    """Wait for the process; its peak RSS (MB) from wait4's rusage, so no other child is counted."""
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024.0  # KiB on Linux


def _report_once(run: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``trainspect report RUN`` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "trainspect.cli", "report", str(run), "-o", str(run.parent / f"{run.name}.html")]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=ROOT)
    rss = _peak_rss_mb(proc)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"trainspect report failed on {run} (exit {proc.returncode})")
    return wall, rss


def _exponent(hours: list[float], values: list[float]) -> float:
    """Slope of the least-squares line through (log hours, log value)."""
    x = [math.log(h) for h in hours]
    y = [math.log(max(v, 1e-9)) for v in values]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sum((a - mx) ** 2 for a in x)


def scaling(quick: bool) -> None:
    """Report time and peak RSS on runs of growing length; a log-log fit of time against hours."""
    hours = [1.0, 4.0, 8.0] if quick else [1.0, 24.0, 48.0]
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-scaling-"))
    rows = []
    for h in hours:
        run = tmp / f"run-{h:g}h"
        t = time.perf_counter()
        seconds = int(h * 3600)
        synth_run.write_run(
            run, seconds=seconds, interval_s=0.1, cores=4, gpus=2, steps=int(seconds / 0.3), step_s=0.29
        )
        written = time.perf_counter() - t
        wall, rss = _report_once(run)
        rows.append((h, seconds * 10, wall, rss, written))
        print(
            f"{h:6g} h  {seconds * 10:>10,} samples  report {wall:7.2f} s  peak RSS {rss:7.0f} MB  "
            f"(synthetic run written in {written:.0f} s)",
            flush=True,
        )
    time_exp = _exponent([r[0] for r in rows], [r[2] for r in rows])
    rss_exp = _exponent([r[0] for r in rows], [r[3] for r in rows])
    last = rows[-1]
    tail_exp = _exponent([r[0] for r in rows[-2:]], [r[2] for r in rows[-2:]])  # start-up cost flattens the fit
    print(
        f"log-log exponent: time {time_exp:.2f} (two longest runs {tail_exp:.2f}), peak RSS {rss_exp:.2f}   "
        "(target: time exponent <= 1.1)"
    )
    if not quick:
        print(f"at {last[0]:g} h: {last[2]:.1f} s (target <= 30 s), {last[3]:.0f} MB (target <= 1024 MB)")
    ok = max(time_exp, tail_exp) <= 1.1 and (quick or (last[2] <= 30 and last[3] <= 1024))
    print(
        json.dumps(
            {
                "hours": hours,
                "report_s": [round(r[2], 2) for r in rows],
                "peak_rss_mb": [round(r[3]) for r in rows],
                "time_exponent": round(time_exp, 3),
                "tail_exponent": round(tail_exp, 3),
                "rss_exponent": round(rss_exp, 3),
                "ok": ok,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10 minutes of data instead of 1 hour")
    parser.add_argument("--scaling", action="store_true", help="report time and memory against the run's length")
    args = parser.parse_args()
    if args.scaling:
        scaling(quick=args.quick)
        return
    seconds, steps = (600, 6000) if args.quick else (3600, 36000)
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    run = tmp / "run"
    t = time.perf_counter()
    synth_run.write_run(
        run,
        seconds=seconds,
        interval_s=0.1,
        cores=64,
        gpus=8,
        steps=steps,
        step_s=0.09,
        gpu=45.0,
        verdicts=synth_run.sample_verdicts(),
    )
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
