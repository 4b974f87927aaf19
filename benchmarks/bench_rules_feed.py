"""Cost per step of offline ``trainspect rules`` on long loss-only runs (issue 30): time, peak memory, growth.

    .venv/bin/python benchmarks/bench_rules_feed.py [--steps 1000,10000,100000] [--before TREE] [--cli[-only]]

Synthetic runs (tests/synthetic_run.py, no torch): a loss saved every step for each length, and a reductions run
(four tensors with saved reductions, 10,000 steps). ``ts.rules.evaluate(trial, default set)`` (every applicable
built-in rule) and LossNotDecreasing alone are timed per step, with the peak of tracemalloc. ``--before TREE``
times a tree holding the previous implementation (a copy of ``trainspect/``) the same way, in a subprocess, and
prints the ratio. The exponent is the slope of a log-log fit of time against steps; the cost per step is the slope of
a straight line through the points (what one more step costs), beside the fixed cost of an evaluation (its
intercept). ``--cli`` also times the whole ``trainspect rules --final`` command (a fresh interpreter: start and imports
included) at each length: us/step per length, the slope between the two longest (what one more step costs), peak
RSS and the exponent of the fit, with ``--before`` the previous tree in turn (``--cli-only``: only that). Targets:
<= 20 us per loss-only step, exponent <= 1.1.
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
    parser.add_argument("--cli-only", action="store_true", help="time only the whole command (implies --cli)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the whole command per size (the best counts)")
    args = parser.parse_args()
    lengths = [int(n) for n in args.steps.split(",")]
    if args.cli_only:
        report_cli(lengths, args.before, args.repeat)
        return
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
        report_cli(lengths, args.before, args.repeat)


_PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    with open('/proc/self/status') as fh:\n"
    "        kib = [line.split()[1] for line in fh if line.startswith('VmHWM')]\n"
    "    sys.stderr.write(f'\\nPEAK_RSS_KIB {kib[0]}\\n')\n"
    "atexit.register(peak)\n"
    "sys.argv[0] = 'trainspect'\n"
    "runpy.run_module('trainspect.cli', run_name='__main__')\n"
)
"""Runs the command and reports its peak RSS (VmHWM: this process's own, not the benchmark's it was forked from)."""


def time_cli(run: Path, tree: str | None) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of one ``trainspect rules RUN --final``, in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": tree or str(ROOT)}
    cli = [sys.executable, "-c", _PEAK, "rules", str(run), "--final"]
    start = time.perf_counter()
    done = subprocess.run(cli, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    took = time.perf_counter() - start
    kib = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KIB ")]
    return took, int(kib[-1]) * 1024 if kib else 0


def report_cli(lengths: list[int], before: str | None, repeat: int) -> None:
    """Time the whole command (interpreter start and imports included) on a loss-only run of each length.

    Prints the time per step of each length, the cost of one more step (the slope between the two longest runs),
    the peak RSS and the exponent of a log-log fit; with ``before``, the previous tree is timed in turn with this
    one (the best of ``repeat`` runs each, alternating, so both see the same load).
    """
    trees = {"after ": None, **({"before": before} if before else {})}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {n: write_run(Path(tmp) / f"cli_{n}", n) for n in lengths}
        best: dict[str, dict[int, tuple[float, int]]] = {label: {} for label in trees}
        for n, run in runs.items():
            for _ in range(repeat):
                for label, tree in trees.items():
                    took, rss = time_cli(run, tree)
                    old = best[label].get(n)
                    best[label][n] = (min(took, old[0]), max(rss, old[1])) if old else (took, rss)
    for label in reversed(trees):
        res = best[label]
        sizes = sorted(res)
        for n in sizes:
            took, rss = res[n]
            print(
                f"{label} trainspect rules (whole command): {n:>7} steps in {took:6.2f} s, {took / n * 1e6:7.1f} "
                f"us/step, peak RSS {rss / 2**20:6.1f} MiB"
            )
        if len(sizes) < 2:
            continue
        (n1, (t1, _)), (n2, (t2, _)) = (sizes[-2], res[sizes[-2]]), (sizes[-1], res[sizes[-1]])
        slope = (t2 - t1) / (n2 - n1) * 1e6
        exp = exponent([(n, res[n][0]) for n in sizes])
        verdict = "met" if slope <= 20 else "NOT met"
        print(
            f"{label} whole command: {slope:.1f} us per step between {n1} and {n2} steps (target <= 20: {verdict}),"
            f" fixed {(t1 - slope * n1 / 1e6):.2f} s, peak RSS {max(r for _, r in res.values()) / 2**20:.1f} MiB,"
            f" exponent {exp:.2f}"
        )


def line_fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares line of seconds against steps: (fixed seconds, microseconds per step)."""
    xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    if len(points) < 2:
        return 0.0, float(ys[0] / xs[0] * 1e6)
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope * 1e6)


if __name__ == "__main__":
    main()
