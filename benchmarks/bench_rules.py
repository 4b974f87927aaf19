"""Speed of the rules (issue 3 targets): offline evaluation vs smdebug's runtime, and the cost of live rules.

    .venv/bin/python benchmarks/bench_rules.py [--quick] [--no-smdebug] [--smdebug-steps N] [--no-live] [--no-offline]

1. Offline. One training (a 9-layer MLP, 52 tensors saved every step: weights, biases, gradients, the loss, ReLU
   inputs and outputs, the Tanh input) is recorded for 2,000 steps (--quick 200) by trainspect's hook and by
   smdebug 1.0.34's hook. ``trainspect.rules.evaluate(trial, rules)`` runs every built-in tensor rule that applies
   to that data; smdebug runs straightforward per-step re-implementations of the same rules (smdebug ships no rule
   code) through ``invoke_rule`` (benchmarks/_smdebug_rules_side.py, bench-env/smdebug). Target: >= 10x.
   smdebug's per-step cost is constant (each rule keeps what it needs between steps), so by default its side is
   timed over the first --smdebug-steps steps of its own run and scaled to the full length, which keeps the
   benchmark within a few minutes; --smdebug-steps 0 times the full length.
2. Live. A PyTorch loop paced to ~100 steps/s (a 10 ms step: a small MLP plus a fixed sleep, measured once, that
   stands in for device work) with ``ts.torch.Hook(out, rules="default")`` vs ``ts.torch.Hook(out)`` vs the plain
   loop, --rounds rounds (default 8) with the order rotated; the median of the per-round ratios rules/hook of the
   time per step (the hook's close is reported apart). Targets: live rules add <= 3% to step time and lag training
   by <= 2 steps (``LiveRuleRunner.lag``, sampled after every step).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _smdebug_rules_side as side  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.collections import Collection  # noqa: E402
from trainspect.rules import (  # noqa: E402
    AllZero,
    DeadRelu,
    ExplodingTensor,
    LossNotDecreasing,
    PoorWeightInitialization,
    SaturatedActivation,
    TensorVariance,
    UnchangedTensor,
    VanishingGradient,
    WeightUpdateRatio,
)
from trainspect.rules.tensor_rule import TensorRule  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMD_PY = ROOT / "bench-env" / "smdebug" / "bin" / "python"
SIDE = Path(__file__).with_name("_smdebug_rules_side.py")


def rules() -> list[TensorRule]:
    """Every built-in tensor rule that applies to the recorded data, with the smdebug side's parameters."""
    return [
        VanishingGradient(),
        ExplodingTensor(),
        PoorWeightInitialization(),
        SaturatedActivation(),
        DeadRelu(),
        WeightUpdateRatio(),
        AllZero(collection_names="weights", tensor_regex=".*relu_output"),
        LossNotDecreasing(),
        TensorVariance(collection_names="weights,gradients", max_threshold=10, min_threshold=1e-5),
        UnchangedTensor(collection_names="weights"),
    ]


def _collections() -> list[Any]:
    # trainspect's include_regex selects parameters and saved tensors, not module inputs/outputs (smdebug's does),
    # so the ReLU/Tanh inputs and outputs are asked for by module type; the names are the same as smdebug's.
    return [
        *side.COLLECTIONS,
        Collection("relu_input", module_types={"ReLU"}, module_inputs=True),
        Collection("relu_output", module_types={"ReLU"}, module_outputs=True),
        Collection("tanh_input", module_types={"Tanh"}, module_inputs=True),
    ]


def write_trainspect(out: Path, steps: int) -> float:
    model, opt, loss_fn, batches = side.make()
    hook = ts.torch.Hook(
        out, save_config=ts.SaveConfig(save_interval=1), include_collections=_collections(), export_tensorboard=False
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    start = time.perf_counter()
    side.train(model, opt, loss_fn, batches, steps)
    hook.close()
    return time.perf_counter() - start


def time_trainspect(out: Path, repeats: int) -> tuple[float, dict[str, float], list[Any]]:
    """Median seconds of evaluating all rules together (fresh trial each time), per-rule seconds, the verdicts."""
    together, verdicts = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        verdicts = ts.rules.evaluate(ts.create_trial(out), rules(), write=False, actions=False)
        together.append(time.perf_counter() - start)
    alone = {}
    for rule in rules():  # once each: the per-rule split is informative, the target is on the total
        start = time.perf_counter()
        ts.rules.evaluate(ts.create_trial(out), [rule], write=False, actions=False)
        alone[rule.name] = time.perf_counter() - start
    return statistics.median(together), alone, verdicts


def _smd(*args: str) -> dict[str, Any] | None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SMDEBUG_TRAINING_END_DELAY_REFRESH": "0"}
    proc = subprocess.run([str(SMD_PY), str(SIDE), *args], capture_output=True, text=True, env=env)
    if proc.returncode:
        print(f"  smdebug side failed: {proc.stderr[-800:]}")
        return None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def _agreement(out: Path, smd: dict[str, Any], end: int) -> dict[str, str]:
    """Triggers/datapoints of trainspect over the steps the smdebug side judged, per rule: 'same' or both counts."""
    verdicts = ts.rules.evaluate(ts.create_trial(out), rules(), end_step=end, write=False, actions=False)
    out_: dict[str, str] = {}
    for v in verdicts:
        if v.rule in smd:
            mine, theirs = (v.triggers, v.datapoints), (smd[v.rule]["triggers"], smd[v.rule]["datapoints"])
            out_[v.rule] = "same" if mine == theirs else f"{mine[0]}/{mine[1]} vs {theirs[0]}/{theirs[1]}"
    return out_


def offline(base: Path, steps: int, smd_steps: int, use_smdebug: bool, repeats: int) -> list[str]:
    missed: list[str] = []
    out = base / "ts_run"
    write_s = write_trainspect(out, steps)
    names = ts.create_trial(out).tensor_names()
    print(
        f"Offline: {steps} steps x {len(names)} tensors, every step (trainspect's hook wrote it in {write_s:.1f} s)",
        flush=True,
    )
    total, alone, verdicts = time_trainspect(out, repeats)
    smd: dict[str, Any] = {}
    if use_smdebug and SMD_PY.exists():
        smd_out = base / "smd_run"
        start = time.perf_counter()
        if _smd("write", str(smd_steps), str(smd_out)) is not None:
            print(
                f"  smdebug's hook wrote its run of {smd_steps} steps in {time.perf_counter() - start:.1f} s",
                flush=True,
            )
            smd = (_smd("rules", str(smd_out), str(smd_steps)) or {}).get("rules", {})
    scale = steps / smd_steps
    if smd and scale != 1:
        print(
            f"  smdebug: invoke_rule timed over steps 0-{smd_steps - 1} of its run and scaled x{scale:g} to {steps} "
            "steps (opening the trial counted once)"
        )
    agree = _agreement(out, smd, smd_steps) if smd else {}
    print(f"  {'rule':26s} {'trainspect':>11s} {'smdebug':>10s} {'ratio':>8s}   verdict; triggers/datapoints")
    smd_total = 0.0
    for verdict in verdicts:
        name = verdict.rule
        line = f"  {name:26s} {alone[name]:9.3f} s"
        if name in smd:
            secs = smd[name]["open_seconds"] + smd[name]["loop_seconds"] * scale
            smd_total += secs
            line += f" {secs:8.2f} s {secs / alone[name]:7.1f}x"
        line += f"   {verdict.status.value}; {verdict.triggers}/{verdict.datapoints}"
        if name in agree:
            line += f" (steps 0-{smd_steps - 1} vs smdebug: {agree[name]})"
        print(line)
    print(f"  {'all rules, one evaluate()':26s} {total:9.3f} s (sum of the per-rule runs: {sum(alone.values()):.3f} s)")
    if smd:
        ratio = smd_total / total
        ok = ratio >= 10
        print(
            f"  {'all rules':26s} {total:9.3f} s {smd_total:8.2f} s {ratio:7.1f}x   target >= 10x: "
            f"{'ok' if ok else 'MISSED'}",
            flush=True,
        )
        if not ok:
            missed.append("offline vs smdebug")
        alone_total = sum(alone.values())
        print(
            f"  {'each rule on its own, sum':26s} {alone_total:9.3f} s {smd_total:8.2f} s "
            f"{smd_total / alone_total:7.1f}x   (one evaluate() per rule, like smdebug's job per rule)"
        )
    return missed


# --- live -------------------------------------------------------------------------------------------------------
_STEP_S = 0.010  # 100 steps/s


def _live_model() -> tuple[Any, Any, Any, Any, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(), x, y


def _calibrate_pad() -> float:
    """Seconds of sleep (a stand-in for waiting on the device) that pad one plain step to 10 ms; fixed afterwards."""
    model, opt, loss_fn, x, y = _live_model()
    times = []
    for _ in range(60):
        start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return max(0.0, _STEP_S - statistics.median(times[10:]))


def _live_run(kind: str, out: Path, steps: int, pad: float) -> tuple[float, float, float, list[int]]:
    """Seconds and CPU seconds per step, seconds of the hook's close, and the live rules' lag after every step."""
    model, opt, loss_fn, x, y = _live_model()
    hook = None
    if kind != "plain":
        hook = ts.torch.Hook(out, rules="default") if kind == "rules" else ts.torch.Hook(out)
        hook.register_module(model)
        hook.register_loss(loss_fn)
    live = getattr(getattr(hook, "_extras", None), "_live", None)  # the hook's LiveRuleRunner, for its lag
    if kind == "rules" and live is None:
        raise RuntimeError("bench_rules: the hook's LiveRuleRunner was not found (hook._extras._live)")
    lags: list[int] = []
    for i in range(steps + 10):
        if i == 10:  # the first steps (allocator, first-call costs) are not timed
            start, cpu = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        time.sleep(pad)
        if live is not None:
            lags.append(live.lag)
    step_s, cpu_s = (time.perf_counter() - start) / steps, (time.process_time() - cpu) / steps
    start = time.perf_counter()
    if hook is not None:
        hook.close()
    return step_s, cpu_s, time.perf_counter() - start, lags


def live(base: Path, steps: int, rounds: int) -> list[str]:
    pad = _calibrate_pad()
    print(
        f"Live: {steps} steps per run at ~{1 / _STEP_S:.0f} steps/s (MLP 256-256-256-10, batch 64, padded with a "
        f"{pad * 1e3:.1f} ms sleep), median of {rounds} rounds, order rotated"
    )
    kinds = ("plain", "hook", "rules")
    per: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    close: dict[str, list[float]] = {k: [] for k in kinds}
    ratios: list[float] = []
    lags: list[int] = []
    for i in range(rounds):
        order = kinds[i % 3 :] + kinds[: i % 3]
        times = {}
        for kind in order if i % 2 == 0 else tuple(reversed(order)):
            out = base / f"live_{kind}_{i}"
            times[kind], cpu_s, close_s, lag = _live_run(kind, out, steps, pad)
            shutil.rmtree(out, ignore_errors=True)
            per[kind].append(times[kind])
            cpu[kind].append(cpu_s)
            close[kind].append(close_s)
            lags += lag
        ratios.append(times["rules"] / times["hook"])
    med = {k: statistics.median(v) for k, v in per.items()}
    for kind, label in (("plain", "plain loop"), ("hook", "Hook(out)"), ("rules", 'Hook(out, rules="default")')):
        cpu_ms, close_ms = statistics.median(cpu[kind]) * 1e3, statistics.median(close[kind]) * 1e3
        print(
            f"  {label:28s} {med[kind] * 1e3:7.3f} ms/step  ({1 / med[kind]:5.1f} steps/s), "
            f"CPU {cpu_ms:6.3f} ms/step, close {close_ms:5.1f} ms"
        )
    ratio = statistics.median(ratios)
    missed = []
    ok = ratio <= 1.03
    print(
        f"  rules / hook step time       {ratio:7.3f}x  (rounds {', '.join(f'{r:.3f}' for r in ratios)})  "
        f"target <= 1.03x: {'ok' if ok else 'MISSED'}"
    )
    if not ok:
        missed.append("live step time")
    lags.sort()
    p95 = lags[int(0.95 * (len(lags) - 1))] if lags else 0
    worst = lags[-1] if lags else 0
    ok = worst <= 2
    print(
        f"  lag of live rules (steps)    max {worst}, p95 {p95}, over {len(lags)} samples  "
        f"target max <= 2: {'ok' if ok else 'MISSED'}"
    )
    if not ok:
        missed.append("live lag")
    return missed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="200 steps offline, shorter live runs")
    parser.add_argument("--no-smdebug", action="store_true")
    parser.add_argument("--no-live", action="store_true")
    parser.add_argument("--no-offline", action="store_true")
    parser.add_argument("--smdebug-steps", type=int, default=None, help="steps the smdebug side is timed over (0: all)")
    parser.add_argument("--rounds", type=int, default=None, help="live rounds (default 8, --quick 4)")
    args = parser.parse_args()
    steps = 200 if args.quick else 2000
    smd_steps = args.smdebug_steps if args.smdebug_steps is not None else (100 if args.quick else 400)
    smd_steps = steps if smd_steps <= 0 else min(smd_steps, steps)
    base = Path(tempfile.mkdtemp(prefix="ts_bench_rules_"))
    missed = []
    try:
        if not args.no_offline:
            missed += offline(base, steps, smd_steps, not args.no_smdebug, 1 if args.quick else 3)
        if not args.no_live:
            missed += live(base, 100 if args.quick else 200, args.rounds or (4 if args.quick else 8))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("all targets met" if not missed else f"missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
