"""Small synthetic runs for the notebook-view tests (written by tests/synthetic_run.py, no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import synthetic_run as runs

from trainspect.rules.verdict import Status, Verdict

T0 = 1_760_000_000.0
XSS = "<img src=x onerror=alert(1)>"


def system_values(rows: int, cores: int, gpus: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Keys and values (0-100, one decimal) of ``cores`` cores, ``gpus`` GPUs and memory, ``rows`` samples."""
    keys = [f"cpu{i}_utilization_percent" for i in range(cores)] + [f"gpu{g}_utilization_percent" for g in range(gpus)]
    keys.append("cpu_memory_used_percent")
    rng = np.random.default_rng(seed)
    values = np.clip(rng.normal(60, 25, (rows, len(keys))), 0, 100).round(1)
    return keys, values


def write_system(
    run: Path, rows: int = 50, cores: int = 2, gpus: int = 2, node: str = "node-a", t0: float = T0, seed: int = 0
) -> np.ndarray:
    """``rows`` samples, 0.1 s apart from ``t0``; returns the values written (rows x keys, keys as system_values)."""
    keys, values = system_values(rows, cores, gpus, seed)
    runs.write_system(run, node, 100, t0 + np.arange(rows) * 0.1, keys, values, 10)
    return values


def write_steps(
    run: Path,
    durations: np.ndarray,
    worker: str = "worker_0",
    node: str = "node-a",
    t0: float = T0 + 0.2,
    eval_every: int = 0,
) -> None:
    """Steps of the given durations, 0.01 s apart, each with a dataloader wait, forward, backward, optimizer."""
    n = len(durations)
    starts = t0 + np.concatenate([[0.0], np.cumsum(durations[:-1] + 0.01)])
    modes = np.ones(n, np.uint8)
    if eval_every:
        modes[eval_every - 1 :: eval_every] = 2
    steps = {
        "mode": modes,
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": starts,
        "end": starts + durations,
    }
    frac = np.array([0.0, 0.1, 0.5, 0.85, 1.0])
    spans = {
        "kind": np.tile(np.array([4, 1, 2, 3], np.uint8), n),
        "start": (starts[:, None] + durations[:, None] * frac[None, :4]).reshape(-1),
        "end": (starts[:, None] + durations[:, None] * frac[None, 1:]).reshape(-1),
        "global_step": np.repeat(np.arange(n, dtype=np.int64), 4),
        "workers": np.full(4 * n, 2, np.int16),
        "pid": np.ones(4 * n, np.int64),
    }
    runs.write_steps(run, worker, node, (t0 - 0.1, t0 - 0.2), [(steps, spans)], float(starts[-1] + durations[-1] + 0.1))


def verdicts() -> list[Verdict]:
    """Two verdicts, one with markup in its message."""
    return [
        Verdict(
            "LowGPUUtilization",
            Status.ISSUES_FOUND,
            message=f"GPU idle {XSS}",
            kind="profiler",
            triggers=3,
            first_trigger_step=4,
        ),
        Verdict("StepOutlier", Status.NO_ISSUES_FOUND, kind="profiler", datapoints=20),
    ]


def full_run(run: Path) -> Path:
    """A run with two nodes' system metrics, two workers' steps (one worker slower), verdicts."""
    write_system(run, 60, node="node-a")
    write_system(run, 60, node="node-b", seed=1)
    write_steps(run, np.full(20, 0.1) + np.arange(20) * 1e-3, "worker_0")
    write_steps(run, np.r_[np.full(19, 0.1), 0.9], "worker_1", node="node-a")
    runs.end_run(run, verdicts())
    return run
