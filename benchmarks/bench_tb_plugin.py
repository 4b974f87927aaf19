"""TensorBoard plugin benchmark: heatmap route time and size, is_active, data provider vs direct read, render time.

Run: ``.venv/bin/python benchmarks/bench_tb_plugin.py`` (about 2 minutes on 2 cores; needs /usr/bin/chromium for
the render measurement). Writes one hour of synthetic 100 ms samples on 72 rows with trainspect's own profiler
writers, then measures through TensorBoard's WSGI app and a real TensorBoard.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.context import RequestContext
from tensorboard.plugins import base_plugin
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util
from werkzeug import test as wtest
from werkzeug import wrappers

from trainspect.profiler import SystemMetricsReader, heatmap, load_profiler_data, schema
from trainspect.profiler.writers import FrameFile, SystemChunkWriter
from trainspect.store.layout import RunLayout
from trainspect.tb_plugin import metadata
from trainspect.tb_plugin.plugin import TrainspectPlugin

T0 = 1_760_000_000.0
SECONDS = 3600
KEYS = [f"cpu{i}_utilization_percent" for i in range(64)] + [f"gpu{g}_utilization_percent" for g in range(8)]
KEYS += ["cpu_memory_used_percent", "disk_read_bytes_per_second", "network_sent_bytes_per_second"]


def write_run(run: Path) -> np.ndarray:
    rows = SECONDS * 10
    rng = np.random.default_rng(0)
    values = np.clip(
        50 + 40 * np.sin(np.arange(rows)[:, None] / 300 + np.arange(len(KEYS))) + rng.normal(0, 5, (rows, len(KEYS))),
        0,
        100,
    ).round(1)
    RunLayout(run).root.mkdir(parents=True)
    (run / "trainspect.json").write_text(json.dumps({"format_version": 1, "job_id": "b", "created": T0}))
    writer = SystemChunkWriter(RunLayout(run).system_dir("node-a"), "node-a", 100)
    for i in range(rows):
        writer.append(T0 + i * 0.1, dict(zip(KEYS, values[i], strict=True)))
        if i % 10 == 9:
            writer.flush()
    writer.close()
    steps = SECONDS * 5
    starts = T0 + 1 + np.arange(steps) * 0.2
    frames = FrameFile(RunLayout(run).framework_dir("worker_0") / f"{int(T0 * 1000):013d}{schema.FRAMEWORK_SUFFIX}")
    frames.write_json(
        schema.KIND_EVENT,
        {
            "event": "start",
            "time": T0,
            "process_start": T0,
            "worker": "worker_0",
            "node": "node-a",
            "host": "node-a",
            "pid": 1,
        },
    )
    frames.write(
        schema.KIND_TABLE,
        schema.encode_table(
            "steps",
            {
                "mode": np.ones(steps, np.uint8),
                "mode_step": np.arange(steps),
                "global_step": np.arange(steps),
                "start": starts,
                "end": starts + 0.19,
            },
        ),
    )
    frames.close()
    return values


def client_for(logdir: Path) -> tuple[wtest.Client, TrainspectPlugin]:
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    ctx = base_plugin.TBContext(
        logdir=str(logdir), data_provider=data_provider.MultiplexerDataProvider(mux, str(logdir))
    )
    plugin = TrainspectPlugin(ctx)
    return wtest.Client(application.TensorBoardWSGI([plugin]), wrappers.Response), plugin


def bench_heatmap(logdir: Path) -> None:
    c, _plugin = client_for(logdir)
    start = time.perf_counter()
    c.get("/data/plugin/trainspect/profiler?run=big")
    print(
        f"first load of the 1 h run (reads 36,000 x {len(KEYS)} samples + 18,000 steps): "
        f"{(time.perf_counter() - start) * 1000:.0f} ms"
    )
    print("heatmap route, 1 h at 100 ms on 72 rows (median of 5; max):")
    for label, lo, hi in (("full hour", None, None), ("10 min", 600, 1200), ("1 min", 600, 660), ("10 s", 600, 610)):
        for columns in (400, 1000):
            q = {"run": "big", "columns": str(columns)}
            if lo is not None:
                q.update(start=str(T0 + lo), end=str(T0 + hi))
            times, size, gz = [], 0, 0
            for _ in range(5):
                t = time.perf_counter()
                r = c.get("/data/plugin/trainspect/heatmap", query_string=q)
                times.append((time.perf_counter() - t) * 1000)
                size = len(r.data)
            gz = len(c.get("/data/plugin/trainspect/heatmap", query_string=q, headers={"Accept-Encoding": "gzip"}).data)
            print(
                f"  {label:9s} columns={columns:4d}: {statistics.median(times):6.0f} ms (max {max(times):4.0f}), "
                f"{size / 1e3:6.0f} kB JSON, {gz / 1e3:5.0f} kB gzip"
            )
    t = time.perf_counter()
    r = c.get("/data/plugin/trainspect/timeseries", query_string={"run": "big", "points": "600"})
    print(
        f"timeseries route (full hour, 600 points): {(time.perf_counter() - t) * 1000:.0f} ms, {len(r.data) / 1e3:.0f} kB"
    )
    data = load_profiler_data(logdir / "big")
    t = time.perf_counter()
    heatmap(data, max_columns=1000)
    print(
        f"reference trainspect.profiler.heatmap(max_columns=1000), no HTTP: {(time.perf_counter() - t) * 1000:.0f} ms"
    )


def bench_is_active(root: Path) -> None:
    runs = root / "hundred"
    for i in range(100):
        run = runs / f"run_{i:03d}"
        (run / "profiler" / "system").mkdir(parents=True)
        (run / "rules").mkdir()
        (run / "trainspect.json").write_text("{}")
        (run / "rules" / "verdicts.json").write_text('{"verdicts": []}')
    plain = root / "plain"
    for i in range(100):
        (plain / f"run_{i:03d}").mkdir(parents=True)
        (plain / f"run_{i:03d}" / "events.out.tfevents.1.x").write_bytes(b"")
    for label, logdir in (("100 trainspect runs", runs), ("100 runs, none trainspect", plain)):
        plugin = TrainspectPlugin(base_plugin.TBContext(logdir=str(logdir)))
        t = time.perf_counter()
        first = plugin.is_active()
        cold = (time.perf_counter() - t) * 1000
        warm = []
        for _ in range(200):
            t = time.perf_counter()
            plugin.is_active()
            warm.append((time.perf_counter() - t) * 1000)
        plugin._index.runs(force=True)
        t = time.perf_counter()
        plugin._index.runs(force=True)
        rescan = (time.perf_counter() - t) * 1000
        print(
            f"is_active, {label}: {first}; first call {cold:.2f} ms, cached median {statistics.median(warm):.4f} ms, "
            f"full rescan {rescan:.2f} ms (done at most every 2 s while nothing is found)"
        )


def bench_provider(root: Path, values: np.ndarray) -> None:
    """The alternative design: the same samples as TensorBoard tensor summaries, one per 1 s chunk."""
    run = root / "as_summaries"
    run.mkdir()
    writer = EventFileWriter(str(run))
    md = metadata.create_summary_metadata(kind="system_chunk")
    t = time.perf_counter()
    for chunk in range(SECONDS):
        block = values[chunk * 10 : chunk * 10 + 10].astype(np.float32)
        value = summary_pb2.Summary.Value(tag="system/node-a", metadata=md, tensor=tensor_util.make_tensor_proto(block))
        writer.add_event(event_pb2.Event(wall_time=T0 + chunk, step=chunk, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    write_s = time.perf_counter() - t
    size = sum(p.stat().st_size for p in run.iterdir())
    direct = sum(p.stat().st_size for p in (root / "logdir" / "big" / "profiler" / "system").rglob("*.tsys"))
    print(
        f"as TB tensor summaries: {size / 1e6:.1f} MB event file (direct format: {direct / 1e6:.1f} MB), "
        f"written in {write_s:.1f} s"
    )
    for label, guidance in (("default reservoir", None), ("--samples_per_plugin trainspect=all", {"trainspect": 0})):
        mux = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance=guidance)
        mux.AddRunsFromDirectory(str(run))
        t = time.perf_counter()
        mux.Reload()
        load = time.perf_counter() - t
        provider = data_provider.MultiplexerDataProvider(mux, str(run))
        t = time.perf_counter()
        got = provider.read_tensors(RequestContext(), experiment_id="", plugin_name="trainspect", downsample=10**6)
        read = time.perf_counter() - t
        kept = sum(len(d) for tags in got.values() for d in tags.values())
        print(
            f"  data provider, {label}: ingest {load:.1f} s, read_tensors {read * 1000:.0f} ms, "
            f"{kept} of {SECONDS} chunks kept"
        )
    t = time.perf_counter()
    SystemMetricsReader(root / "logdir" / "big").read_arrays()
    print(f"  direct read (SystemMetricsReader.read_arrays): {(time.perf_counter() - t) * 1000:.0f} ms, all chunks")


def bench_render(logdir: Path) -> None:
    from playwright.sync_api import sync_playwright
    from tensorboard import default, program

    board = program.TensorBoard(plugins=default.get_plugins())
    board.configure(logdir=str(logdir), host="127.0.0.1", port=0, load_fast="false", reload_interval=5)
    url = board.launch()
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
    ]
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        ctx = pw.chromium.launch_persistent_context(
            profile,
            executable_path="/usr/bin/chromium",
            headless=True,
            args=args,
            viewport={"width": 1400, "height": 1000},
        )
        page = ctx.new_page()
        warm = []
        for i in range(4):
            t = time.perf_counter()
            page.goto(url + "data/plugin_entry.html?name=trainspect")
            page.wait_for_function("document.body.dataset.profilerReady", timeout=60_000)
            ms = (time.perf_counter() - t) * 1000
            spans = page.evaluate("""() => performance.getEntriesByType('resource')
                .filter((e) => /(profiler|heatmap|timeseries|echarts)/.test(e.name))
                .map((e) => `${e.name.split('/').pop().split('?')[0]} ${Math.round(e.responseEnd - e.startTime)} ms`)""")
            if i == 0:
                drawn = page.get_attribute("canvas.heatmap-canvas", "data-drawn")
                print(
                    f"Profiler view in headless Chromium, cold server (first read of the run): {ms:.0f} ms to heatmap "
                    f"+ time series drawn ({drawn} cells); requests: {', '.join(spans)}"
                )
            else:
                warm.append(ms)
        print(
            f"Profiler view, warm server: median {statistics.median(warm):.0f} ms, min {min(warm):.0f} ms "
            f"(last requests: {', '.join(spans)}); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        ctx.close()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        values = write_run(root / "logdir" / "big")
        print(f"wrote 1 h x 100 ms x {len(KEYS)} metrics with SystemChunkWriter in {time.perf_counter() - t:.1f} s")
        bench_heatmap(root / "logdir")
        bench_is_active(root)
        bench_provider(root, values)
        if Path("/usr/bin/chromium").exists():
            bench_render(root / "logdir")
        else:
            print("render time: skipped, /usr/bin/chromium is missing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
