"""Synthetic profiled runs for the report tests and benchmarks/bench_report.py (written by tests/synthetic_run.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import synthetic_run

from trainspect.rules.verdict import Series, Status, Verdict

T0 = 1_700_000_000.0


def write_system(
    run: Path,
    node: str,
    seconds: float,
    interval_s: float,
    cores: int,
    gpus: int,
    cpu: float = 30.0,
    gpu: float = 40.0,
    start: float = T0,
    seed: int = 0,
) -> None:
    """System samples of one node: noisy per-core CPU around ``cpu`` %, GPUs around ``gpu`` %."""
    rng = np.random.default_rng(seed)
    n = int(seconds / interval_s)
    keys = [f"cpu{i}_utilization_percent" for i in range(cores)]
    keys += ["cpu_iowait_percent", "cpu_memory_used_percent", "cpu_memory_used_bytes", "network_sent_bytes_per_second"]
    for g in range(gpus):
        keys += [f"gpu{g}_utilization_percent", f"gpu{g}_memory_used_percent"]
    base = np.array([cpu] * cores + [2.0, 35.0, 8e9, 1e6] + [gpu, 50.0] * gpus)
    noise = rng.normal(0, 5, size=(n, len(keys)))
    noise[:, cores + 2 : cores + 4] = 0
    vals = np.clip(base + noise, 0, None)
    pct = np.array([k.endswith("_percent") for k in keys])
    vals[:, pct] = np.minimum(vals[:, pct], 100.0)
    synthetic_run.write_system(run, node, int(interval_s * 1000), start + np.arange(n) * interval_s, keys, vals, 10)


def write_framework(
    run: Path,
    worker: str,
    node: str,
    durations: np.ndarray,
    start: float = T0,
    init_s: float = 5.0,
    gap: float = 0.005,
    dataloader_s: float = 0.002,
) -> None:
    """One worker's step table (steps back to back after ``init_s``), dataloader spans and start/close records."""
    n = len(durations)
    starts = start + init_s + np.concatenate([[0.0], np.cumsum(durations[:-1] + gap)])
    ends = starts + durations
    tables = []
    for lo in range(0, n, 5000):
        sl = slice(lo, min(lo + 5000, n))
        m = sl.stop - sl.start
        steps = {
            "mode": np.ones(m, np.uint8),
            "mode_step": np.arange(sl.start, sl.stop, dtype=np.int64),
            "global_step": np.arange(sl.start, sl.stop, dtype=np.int64),
            "start": starts[sl],
            "end": ends[sl],
        }
        spans = {
            "kind": np.full(m, 4, np.uint8),
            "start": starts[sl] - dataloader_s,
            "end": starts[sl],
            "global_step": np.arange(sl.start, sl.stop, dtype=np.int64),
            "workers": np.full(m, 2, np.int16),
        }
        tables.append((steps, spans))
    synthetic_run.write_steps(run, worker, node, (start, start), tables, float(ends[-1]) + 1.0)


def write_run(
    run: Path,
    seconds: float = 120.0,
    interval_s: float = 0.5,
    cores: int = 4,
    gpus: int = 1,
    nodes: int = 1,
    steps: int = 500,
    step_s: float = 0.2,
    cpu: float = 30.0,
    gpu: float = 40.0,
    verdicts: list[Verdict] | None = None,
    seed: int = 0,
) -> Path:
    """A complete run directory: manifest, system data per node, one worker per node, verdicts, end marker."""
    synthetic_run.start_run(run, f"synthetic-{run.name}", {"framework": "synthetic"})
    rng = np.random.default_rng(seed)
    for k in range(nodes):
        node = f"algo-{k + 1}"
        write_system(run, node, seconds, interval_s, cores, gpus, cpu, gpu, seed=seed + k)
        durations = np.clip(rng.normal(step_s, step_s / 10, steps), step_s / 4, None)
        write_framework(run, f"worker_{k}", node, durations)
    return synthetic_run.end_run(run, verdicts)


def sample_verdicts(tensor: str = "gradient/fc1.weight") -> list[Verdict]:
    """A triggered tensor rule (with a chart series) and a quiet one."""
    return [
        Verdict(
            "VanishingGradient",
            Status.ISSUES_FOUND,
            message=f"mean |gradient| of {tensor} fell below 1e-07",
            recommendation="Use ReLU activations, residual connections or a better initialisation.",
            triggers=3,
            datapoints=50,
            first_trigger_step=10,
            last_trigger_step=30,
            tensors=(tensor,),
            parameters={"threshold": 1e-7},
            series=(
                Series(
                    f"mean |{tensor}|",
                    tuple(range(50)),
                    tuple(1e-6 / (i + 1) for i in range(50)),
                    trigger_x=(10.0, 20.0, 30.0),
                    threshold=1e-7,
                ),
            ),
        ),
        Verdict("ExplodingTensor", Status.NO_ISSUES_FOUND, message="no NaN or Inf", datapoints=50),
    ]
