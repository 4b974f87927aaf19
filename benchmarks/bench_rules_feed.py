"""Cost per step of offline ``trainspect rules`` on long loss-only runs (issue 30): time, peak memory, growth.

    .venv/bin/python benchmarks/bench_rules_feed.py [--steps 1000,10000,100000] [--before TREE]

Synthetic runs (tests/synthetic_run.py, no torch): a loss saved every step for each length, and a reductions run
(four tensors with saved reductions, 10,000 steps). ``ts.rules.evaluate(trial, default set)`` (every applicable
built-in rule) and LossNotDecreasing alone are timed per step, with the peak of tracemalloc. ``--before TREE``
times a tree holding the previous implementation (a copy of ``trainspect/``) the same way, in a subprocess, and
prints the ratio. The exponent is the slope of a log-log fit of time against steps; the cost per step is the slope of
a straight line through the points (what one more step costs), beside the fixed cost of an evaluation (its
intercept). ``--cli`` also times the whole ``trainspect rules`` command on the longest run. Targets: <= 20 us per
loss-only step, exponent <= 1.1.
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
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def write_run(path: Path, steps: int, reductions: bool = False) -> Path:
    """A loss-only run of ``steps`` steps (or four tensors with saved reductions)."""
    import synthetic_run

    from trainspect.modes import ModeKeys
    from trainspect.reductions import Reduction
    from trainspect.step import StepRecord, TensorRecord

    rng = np.random.default_rng(0)
    loss = 2.0 * np.exp(-np.arange(steps) / (steps / 3)) + 0.05 * rng.standard_normal(steps)
    records = []
    for i in range(steps):
        tensors = {"loss": TensorRecord("loss", np.float32(loss[i]), {}, frozenset({"losses"}))}
        if reductions:
            for name, coll in (("gradient/fc.weight", "gradients"), ("fc.weight", "weights")):
                reds = {Reduction("mean", True): float(rng.random()), Reduction("variance", False): 1.0}
                tensors[name] = TensorRecord(name, None, reds, frozenset({coll}), (64, 64))
        records.append(StepRecord(ModeKeys.TRAIN, i, i, 1000.0 + i * 0.01, "worker_0", tensors))
    synthetic_run.start_run(path, "bench", {"framework": "pytorch"})
    synthetic_run.write_tensors(path, records)
    return path


def measure(run: str) -> dict[str, float]:
    """Seconds and peak bytes of evaluating the default set, and LossNotDecreasing alone, over ``run``."""
    import trainspect as ts
    from trainspect.rules import LossNotDecreasing
    from trainspect.rules.applicable import applicable_rules
    from trainspect.rules.registry import default_registry

    trial = ts.create_trial(run)
    steps = len(trial.steps())
    rules = [r for r in applicable_rules(trial, {}, default_registry())[0] if r.kind != "profiler"]
    out: dict[str, float] = {"steps": steps, "rules": len(rules)}
    for label, chosen in (("default", rules), ("lnd", [LossNotDecreasing()])):
        start = time.perf_counter()
        ts.rules.evaluate(trial, chosen, write=False, actions=False, final=True)
        out[f"{label}_s"] = time.perf_counter() - start
    tracemalloc.start()
    ts.rules.evaluate(trial, rules, write=False, actions=False, final=True)
    out["peak_bytes"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out


def measure_in(tree: str | None, run: Path) -> dict[str, float]:
    """:func:`measure` in a fresh interpreter, importing trainspect from ``tree`` (None: this checkout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree or str(ROOT), str(ROOT / "tests")])}
    code = f"import sys, json; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_rules_feed as b; "
    code += f"print(json.dumps(b.measure({str(run)!r})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def exponent(points: list[tuple[float, float]]) -> float:
    """The slope of log(time) against log(steps)."""
    xs, ys = np.log([p[0] for p in points]), np.log([max(p[1], 1e-9) for p in points])
    return float(np.polyfit(xs, ys, 1)[0]) if len(points) > 1 else math.nan


def report(label: str, results: dict[str, dict[str, float]], before: dict[str, dict[str, float]]) -> None:
    for name, res in results.items():
        per = {k: res[f"{k}_s"] / res["steps"] * 1e6 for k in ("default", "lnd")}
        line = f"{label} {name:>12}: {int(res['steps']):>7} steps, {int(res['rules'])} rules, default {per['default']:7.1f} us/step"
        line += f", LossNotDecreasing {per['lnd']:6.1f} us/step, peak {res['peak_bytes'] / 2**20:7.1f} MiB"
        old = before.get(name)
        if old:
            line += f"; before {old['default_s'] / old['steps'] * 1e6:7.1f} us/step, {old['lnd_s'] / old['steps'] * 1e6:6.1f}"
            line += f", peak {old['peak_bytes'] / 2**20:7.1f} MiB; ratio {old['default_s'] / res['default_s']:.1f}x"
            line += f" / {old['lnd_s'] / res['lnd_s']:.1f}x"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="1000,10000,100000")
    parser.add_argument("--before", default=None, help="a tree holding the previous trainspect/ to compare with")
    parser.add_argument("--cli", action="store_true", help="also time the whole `trainspect rules` command")
    args = parser.parse_args()
    lengths = [int(n) for n in args.steps.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {f"loss_{n}": write_run(Path(tmp) / f"loss_{n}", n) for n in lengths}
        runs["reductions"] = write_run(Path(tmp) / "reductions", 10_000, reductions=True)
        after = {name: measure_in(None, run) for name, run in runs.items()}
        before = {name: measure_in(args.before, run) for name, run in runs.items()} if args.before else {}
    if before:
        report("before", before, {})
    report("after ", after, before)
    loss = [after[f"loss_{n}"] for n in lengths]
    for key in ("default", "lnd"):
        exp = exponent([(r["steps"], r[f"{key}_s"]) for r in loss])
        print(f"exponent ({key}): {exp:.2f}   target <= 1.1: {'met' if exp <= 1.1 else 'NOT met'}")
    for key, label in (("lnd", "LossNotDecreasing alone"), ("default", "default set")):
        fixed, per = line_fit([(r["steps"], r[f"{key}_s"]) for r in loss])
        verdict = "met" if per <= 20 else "NOT met"
        print(f"{label}: {per:.1f} us per step + {fixed * 1e3:.0f} ms fixed   target <= 20 us/step: {verdict}")
    if args.cli:
        with tempfile.TemporaryDirectory() as tmp:
            n = max(lengths)
            run = write_run(Path(tmp) / "cli", n)
            cli = [sys.executable, "-m", "trainspect.cli", "rules", str(run), "--final"]
            start = time.perf_counter()
            subprocess.run(cli, capture_output=True, check=False)
            took = time.perf_counter() - start
            print(f"trainspect rules (whole command, interpreter start and imports included): {n} steps in {took:.2f} s,"
                  f" {took / n * 1e6:.1f} us/step")


def line_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares line of seconds against steps: (fixed seconds, microseconds per step)."""
    xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    if len(points) < 2:
        return 0.0, float(ys[0] / xs[0] * 1e6)
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope * 1e6)

if __name__ == "__main__":
    main()
