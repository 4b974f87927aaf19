"""Synthetic runs for the TensorBoard plugin tests (written by tests/synthetic_run.py, no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import synthetic_run as runs

from trainspect.profiler.detailed import write_table
from trainspect.rules.verdict import Series, Status, Verdict
from trainspect.store.layout import RunLayout

T0 = 1_760_000_000.0


def system_keys(cores: int = 64, gpus: int = 8) -> list[str]:
    """Utilisation of ``cores`` cores and ``gpus`` GPUs, then memory, GPU memory, I/O and network."""
    keys = [f"cpu{i}_utilization_percent" for i in range(cores)] + [f"gpu{g}_utilization_percent" for g in range(gpus)]
    keys += ["cpu_memory_used_percent", "cpu_iowait_percent", "disk_read_bytes_per_second"]
    keys += ["disk_write_bytes_per_second", "network_sent_bytes_per_second", "network_received_bytes_per_second"]
    keys += [f"gpu{g}_memory_used_percent" for g in range(gpus)]
    return keys


def write_system(
    run: Path,
    seconds: float,
    interval_ms: int = 100,
    cores: int = 64,
    gpus: int = 8,
    node: str = "node-a",
    t0: float = T0,
    seed: int = 0,
) -> int:
    """Write ``seconds`` of samples for one node with the profiler's chunk writer; returns the row count."""
    keys = system_keys(cores, gpus)
    rows = int(seconds * 1000 / interval_ms)
    rng = np.random.default_rng(seed)
    t = np.arange(rows) * interval_ms / 1000.0
    wave = 50 + 40 * np.sin(t[:, None] / 30.0 + np.arange(len(keys))[None, :])
    values = np.clip(wave + rng.normal(0, 5, (rows, len(keys))), 0, 100).round(1)
    runs.write_system(run, node, interval_ms, t0 + t, keys, values, max(1, 1000 // interval_ms))
    return rows


def write_steps(
    run: Path,
    count: int,
    duration: float = 0.2,
    worker: str = "worker_0",
    node: str = "node-a",
    t0: float = T0 + 2.0,
    close: bool = True,
    eval_every: int = 0,
) -> None:
    """Write ``count`` steps (and forward/backward/optimizer/dataloader spans) with the frame writer."""
    rng = np.random.default_rng(1)
    dur = duration * (1 + 0.1 * rng.random(count))
    dur[count // 2 :: 97] *= 6  # a few outliers
    starts = t0 + np.concatenate([[0.0], np.cumsum(dur[:-1] + 0.01)])
    modes = np.ones(count, np.uint8)
    if eval_every:
        modes[eval_every - 1 :: eval_every] = 2
    steps = {
        "mode": modes,
        "mode_step": np.arange(count, dtype=np.int64),
        "global_step": np.arange(count, dtype=np.int64),
        "start": starts,
        "end": starts + dur,
    }
    kinds = np.tile(np.array([4, 1, 2, 3], np.uint8), count)
    frac = np.array([0.0, 0.1, 0.5, 0.85, 1.0])
    span_start = (starts[:, None] + dur[:, None] * frac[None, :4]).reshape(-1)
    span_end = (starts[:, None] + dur[:, None] * frac[None, 1:]).reshape(-1)
    spans = {
        "kind": kinds,
        "start": span_start,
        "end": span_end,
        "global_step": np.repeat(np.arange(count, dtype=np.int64), 4),
        "workers": np.full(4 * count, 2, np.int16),
    }
    closed = float(starts[-1] + dur[-1] + 1.0) if close else None
    runs.write_steps(run, worker, node, (T0 + 0.5, T0), [(steps, spans)], closed)
    write_table(
        RunLayout(run).detailed_dir(worker),
        "operators",
        worker,
        5,
        6,
        [
            {
                "device": "cpu",
                "name": f"aten::op{i}",
                "calls": 10 + i,
                "self_time_us": 1000.0 / (i + 1),
                "total_time_us": 2000.0 / (i + 1),
            }
            for i in range(30)
        ],
    )


def profiler_verdict(triggered: bool = True) -> Verdict:
    """A LowGPUUtilization-like profiler verdict with a watched series and trigger points."""
    x = tuple(float(T0 + 60 * i) for i in range(30))
    y = tuple(float(50 + 40 * np.sin(i / 3)) for i in range(30))
    trig = tuple(xx for xx, yy in zip(x, y, strict=True) if yy < 20) if triggered else ()
    return Verdict(
        rule="LowGPUUtilization",
        status=Status.ISSUES_FOUND if triggered else Status.NO_ISSUES_FOUND,
        message="p95 GPU utilisation 12% below threshold 70%",
        recommendation="Increase the batch size.",
        kind="profiler",
        datapoints=30,
        triggers=len(trig),
        last_trigger_time=trig[-1] if trig else None,
        parameters={"threshold_p95": 70, "window": 500},
        workers=("worker_0",),
        series=(Series("p95 GPU utilisation", x, y, "s", trig, 70.0),),
    )


def tensor_verdict() -> Verdict:
    """A VanishingGradient verdict that triggered at steps 7 and 9."""
    x = tuple(float(s) for s in range(12))
    y = tuple(1e-3 / (s + 1) ** 3 for s in range(12))
    return Verdict(
        rule="VanishingGradient",
        status=Status.ISSUES_FOUND,
        message="abs_mean 1e-07 below 1e-07",
        recommendation="Use ReLU or batch norm.",
        datapoints=12,
        triggers=2,
        first_trigger_step=7,
        last_trigger_step=9,
        parameters={"threshold": 1e-7},
        series=(Series("min abs_mean of gradients", x, y, "step", (7.0, 9.0), 1e-6),),
    )


def write_manifest(run: Path) -> None:
    """A minimal job manifest."""
    run.mkdir(parents=True, exist_ok=True)
    doc = {
        "format_version": 1,
        "job_id": "ab",
        "created": T0,
        "framework": "pytorch",
        "trainspect_version": "0",
        "config": {},
    }
    (run / "trainspect.json").write_text(json.dumps(doc))


def synthetic_run(run: Path, seconds: float = 300.0, steps: int = 500) -> Path:
    """A complete synthetic run: manifest, system samples, steps, operators and verdicts."""
    write_manifest(run)
    write_system(run, seconds)
    write_steps(run, steps, eval_every=10)
    runs.end_run(run, [profiler_verdict(), tensor_verdict()], end=False)
    RunLayout(run).end_marker.write_text(str(T0 + seconds))
    return run
