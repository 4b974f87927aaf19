"""Synthetic profiler timelines for rule and analysis tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.data import ProfilerData

T0 = 1_700_000_000.0


def system(seconds: float, interval: float = 0.5, node: str = "n0", cores: int = 4, **cols: object) -> SystemArrays:
    """Arrays of ``seconds / interval`` rows; ``cols`` maps keys to a constant, an array or a callable of t."""
    t = T0 + np.arange(int(seconds / interval)) * interval
    base: dict[str, object] = {f"cpu{i}_utilization_percent": 20.0 for i in range(cores)}
    base.update({"cpu_iowait_percent": 1.0, "cpu_memory_used_percent": 30.0})
    base.update(cols)
    keys = tuple(base)
    values = np.empty((len(t), len(keys)), dtype=np.float32)
    for j, key in enumerate(keys):
        spec = base[key]
        values[:, j] = spec(t - T0) if callable(spec) else spec  # type: ignore[operator]
    return SystemArrays(node, t, keys, values, int(interval * 1000))


def gpus(n: int, util: object, mem: object = 40.0) -> dict[str, object]:
    """GPU columns for ``n`` GPUs with the same utilisation and memory specs."""
    out: dict[str, object] = {}
    for g in range(n):
        out[f"gpu{g}_utilization_percent"] = util
        out[f"gpu{g}_memory_used_percent"] = mem
    return out


def steps(
    durations: np.ndarray,
    worker: str = "worker_0",
    gap: float = 0.01,
    start: float = T0 + 5,
    node: str = "n0",
    process_start: float | None = T0,
    mode: int = 1,
) -> FrameworkTables:
    """A worker whose steps have the given durations, back to back with ``gap`` seconds between."""
    starts = start + np.concatenate([[0.0], np.cumsum(durations[:-1] + gap)])[: len(durations)]
    tab = FrameworkTables(worker, node, process_start=process_start, recorder_start=process_start)
    n = len(durations)
    tab.steps = {
        "mode": np.full(n, mode, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": starts,
        "end": starts + durations,
    }
    return tab


def data(
    system_arrays: list[SystemArrays] = (), framework: list[FrameworkTables] = (), ended: bool = True
) -> ProfilerData:  # type: ignore[assignment]
    """A ProfilerData from in-memory parts."""
    return ProfilerData(
        Path("/nonexistent"),
        system={a.node: a for a in system_arrays},
        framework={f.worker: f for f in framework},
        job_ended=ended,
    )
