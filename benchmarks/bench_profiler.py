"""Profiler benchmark: monitor cost vs MLflow's, bytes per sample, bulk read time, framework-timer overhead.

Run: ``.venv/bin/python benchmarks/bench_profiler.py`` (about 1 minute on 2 cores). Prints ratios.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from trainspect.hooks.system_monitor import SystemMonitor
from trainspect.profiler import ProfilerConfig, SystemMetricsReader
from trainspect.profiler.writers import SystemChunkWriter

SECONDS = 8.0


def _cpu_per_wall(start: callable, stop: callable) -> float:  # type: ignore[valid-type]
    start()
    time.sleep(0.3)  # let start-up costs pass
    c0, w0 = time.process_time(), time.perf_counter()
    time.sleep(SECONDS)
    c1, w1 = time.process_time(), time.perf_counter()
    stop()
    return (c1 - c0) / (w1 - w0)


def ours(interval_ms: int, root: Path) -> tuple[float, float]:
    mon = SystemMonitor(root, node="n0", config=ProfilerConfig(system_monitor_interval_millis=interval_ms))
    cost = _cpu_per_wall(mon.start, mon.close)
    arrays = SystemMetricsReader(root).read_arrays()["n0"]
    size = sum(p.stat().st_size for p in (root / "profiler" / "system" / "n0").glob("*.tsys"))
    return cost, size / arrays.values.size


def mlflow_cost(interval_ms: int, root: Path) -> float:
    import mlflow
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    exp = client.create_experiment(f"bench-{interval_ms}")
    run = client.create_run(exp)
    mon = SystemMetricsMonitor(run.info.run_id, sampling_interval=interval_ms / 1000.0, samples_before_logging=1)
    cost = _cpu_per_wall(mon.start, mon.finish)
    client.set_terminated(run.info.run_id)
    return cost


def bulk_read(root: Path) -> tuple[float, float]:
    keys = [f"cpu{i}_utilization_percent" for i in range(64)] + [f"gpu{g}_utilization_percent" for g in range(8)]
    rng = np.random.default_rng(0)
    rows = 36_000  # one hour at 100 ms
    values = rng.uniform(0, 100, (rows, len(keys))).round(1)
    writer = SystemChunkWriter(root / "profiler" / "system" / "n0", "n0", 100)
    t0 = 1.7e9
    for i in range(rows):
        writer.append(t0 + i * 0.1, dict(zip(keys, values[i], strict=True)))
        if i % 10 == 9:
            writer.flush()
    writer.close()
    size = sum(p.stat().st_size for p in (root / "profiler" / "system" / "n0").glob("*.tsys"))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        arrays = SystemMetricsReader(root).read_arrays()["n0"]
        times.append(time.perf_counter() - start)
        assert arrays.values.shape == (rows, 72)
    return min(times), size / values.size


def framework_overhead(root: Path) -> float:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainspect.hooks.framework_metrics import FrameworkRecorder
    from trainspect.hooks.torch_profiling import install_dataloader_timer, uninstall_dataloader_timer
    from trainspect.modes import ModeKeys

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(16 * 128, 784), torch.randint(0, 10, (16 * 128,)))
    loader = DataLoader(data, batch_size=128)

    def run(steps: int, rec: FrameworkRecorder | None) -> float:
        step = 0
        start = time.perf_counter()
        while step < steps:
            for x, y in loader:
                if rec:
                    rec.on_step_start(ModeKeys.TRAIN, step, step)
                    t = time.time()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                if rec:
                    rec.record_span("forward", t, time.time(), step)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if rec:
                    rec.on_step_end(ModeKeys.TRAIN, step, step)
                step += 1
                if step >= steps:
                    break
        return (time.perf_counter() - start) / steps

    run(30, None)
    ratios = []
    for i in range(7):
        pair = {}
        for which in ("plain", "ours") if i % 2 == 0 else ("ours", "plain"):
            if which == "plain":
                pair[which] = run(100, None)
                continue
            rec = FrameworkRecorder(root, f"w{i}", ProfilerConfig(), node="n0")
            rec.start()
            install_dataloader_timer(rec)
            pair[which] = run(100, rec)
            uninstall_dataloader_timer(rec)
            rec.close()
        ratios.append(pair["ours"] / pair["plain"])
    return statistics.median(ratios)


def hot_path_cost(root: Path) -> float:
    """Microseconds of recorder calls per step (step start/end + three spans + one dataloader span)."""
    from trainspect.hooks.framework_metrics import FrameworkRecorder
    from trainspect.modes import ModeKeys

    rec = FrameworkRecorder(root, "hot", ProfilerConfig(), node="n0")
    rec.start()
    n = 20_000
    start = time.perf_counter()
    for i in range(n):
        rec.on_step_start(ModeKeys.TRAIN, i, i)
        for kind in ("dataloader", "forward", "backward", "optimizer"):
            rec.record_span(kind, 1.0, 2.0, i)
        rec.on_step_end(ModeKeys.TRAIN, i, i)
    per = (time.perf_counter() - start) / n * 1e6
    rec.close()
    return per


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    print(f"python {sys.version.split()[0]}; idle process, {SECONDS:.0f} s per measurement")
    for interval, target in ((500, 0.005), (100, 0.02)):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            cost, bps = ours(interval, Path(a))
            theirs = mlflow_cost(interval, Path(b))
        print(
            f"monitor @{interval} ms: trainspect {100 * cost:.3f}% of a core (target <= {100 * target:.1f}%), "
            f"MLflow SystemMetricsMonitor {100 * theirs:.3f}%, ratio ours/theirs {cost / theirs:.3f}; "
            f"{bps:.2f} bytes/metric sample on disk"
        )
    with tempfile.TemporaryDirectory() as d:
        seconds, bps = bulk_read(Path(d))
    print(f"bulk read 1 h x 100 ms x 72 metrics: {seconds:.3f} s (target < 1 s); {bps:.2f} bytes/metric sample")
    with tempfile.TemporaryDirectory() as d:
        ratio = framework_overhead(Path(d))
        hot = hot_path_cost(Path(d))
    print(
        f"framework timers (steps, forward span, dataloader timer; windows off), MLP 784-512-256-10: "
        f"{ratio:.3f}x step time (target <= 1.02x); recorder hot path {hot:.1f} us per step"
    )


if __name__ == "__main__":
    main()
