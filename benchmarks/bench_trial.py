"""Reading speed of the Trial (issue 2 targets), side by side with smdebug 1.0.34's trial and plain np.load.

    .venv/bin/python benchmarks/bench_trial.py [--quick] [--no-smdebug]

1. Every value of a W1 ``save_all`` run (400 steps; --quick 40): trainspect's Trial vs smdebug's trial on the run
   smdebug wrote itself from the same training (bytes/s), and vs ``np.load`` of the same arrays as .npy files.
2. One (tensor, step) from a run of 1,000 steps x 20 tensors: fresh trial, then random single reads.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workloads as wl  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.modes import ModeKeys  # noqa: E402
from trainspect.step import StepRecord, TensorRecord  # noqa: E402
from trainspect.store.layout import RunLayout  # noqa: E402
from trainspect.store.run_writer import RunWriter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMD_PY = ROOT / "bench-env" / "smdebug" / "bin" / "python"
SIDE = Path(__file__).with_name("_smdebug_side.py")


def _drop_caches_warm(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def write_trainspect(out: Path, steps: int) -> None:
    model, opt, loss_fn, batches = wl.make("W1")
    hook = ts.torch.Hook(out, save_all=True, save_config=ts.SaveConfig(save_interval=1), export_tensorboard=False)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    wl.train(model, opt, loss_fn, batches, steps)
    hook.close()


def read_all_trainspect(out: Path) -> tuple[float, int, int, list[np.ndarray]]:
    start = time.perf_counter()
    trial = ts.create_trial(out)
    total, count = 0, 0
    for name in trial.tensor_names():
        for value in trial.tensor(name).values().values():
            total += value.nbytes
            count += 1
    return time.perf_counter() - start, total, count, []


def npy_baseline(out: Path, npy_dir: Path) -> tuple[float, int]:
    trial = ts.create_trial(out)
    i = 0
    for name in trial.tensor_names():
        for value in trial.tensor(name).values().values():
            np.save(npy_dir / f"{i}.npy", value)
            i += 1
    _drop_caches_warm(npy_dir)
    start = time.perf_counter()
    total = sum(np.load(npy_dir / f"{j}.npy").nbytes for j in range(i))
    return time.perf_counter() - start, total


def smdebug_read(steps: int, base: Path) -> dict | None:
    if not SMD_PY.exists():
        return None
    out = base / "smd_run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [str(SMD_PY), str(SIDE), "write", "W1", str(steps), str(out)], check=True, capture_output=True, env=env
    )
    _drop_caches_warm(out)
    proc = subprocess.run([str(SMD_PY), str(SIDE), "read", str(out)], capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(lines[-1]) if lines else None


def random_access(base: Path, steps: int = 1000, tensors: int = 20) -> tuple[float, float, float]:
    out = base / "ra_run"
    writer = RunWriter(RunLayout(out), "worker_0", tensorboard=False)
    writer.start()
    rng = np.random.default_rng(0)
    vals = [rng.standard_normal(1000).astype(np.float32) for _ in range(tensors)]
    for s in range(steps):
        recs = {f"t{i}": TensorRecord(f"t{i}", vals[i] + s) for i in range(tensors)}
        writer.submit(StepRecord(ModeKeys.TRAIN, s, s, time.time(), "worker_0", recs))
    writer.close()
    start = time.perf_counter()
    trial = ts.create_trial(out)
    opened = time.perf_counter() - start
    value = trial.tensor("t7").value(512)
    first = time.perf_counter() - start
    assert float(value[0]) == float(vals[7][0] + 512)
    times = []
    for _ in range(200):
        name, step = f"t{random.randrange(tensors)}", random.randrange(steps)
        t0 = time.perf_counter()
        trial.tensor(name).value(step)
        times.append(time.perf_counter() - t0)
    return opened, first, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-smdebug", action="store_true")
    args = parser.parse_args()
    steps = 40 if args.quick else 400
    base = Path(tempfile.mkdtemp(prefix="ts_bench_trial_"))
    missed = []
    try:
        out = base / "ts_run"
        write_trainspect(out, steps)
        _drop_caches_warm(out)
        secs, nbytes, count, _ = read_all_trainspect(out)
        ts_rate = nbytes / secs
        npy_dir = base / "npy"
        npy_dir.mkdir()
        np_secs, np_bytes = npy_baseline(out, npy_dir)
        np_rate = np_bytes / np_secs
        shutil.rmtree(npy_dir)
        print(f"W1 save_all, {steps} steps: {count} tensor-steps, {nbytes / 1e6:.0f} MB (page cache warm)")
        print(f"  trainspect Trial, every value   {secs:7.2f} s  {ts_rate / 1e6:8.0f} MB/s")
        print(f"  np.load of the same arrays      {np_secs:7.2f} s  {np_rate / 1e6:8.0f} MB/s")
        ok = ts_rate >= 0.5 * np_rate
        print(
            f"  trainspect / np.load            {ts_rate / np_rate:7.2f}x   target >= 0.50x: {'ok' if ok else 'MISSED'}"
        )
        if not ok:
            missed.append("vs np.load")
        if not args.no_smdebug:
            smd = smdebug_read(steps, base)
            if smd:
                smd_rate = smd["bytes"] / smd["seconds"]
                ratio = ts_rate / smd_rate
                print(
                    f"  smdebug trial, every value      {smd['seconds']:7.2f} s  {smd_rate / 1e6:8.0f} MB/s "
                    f"({smd['values']} tensor-steps of its own run)"
                )
                print(
                    f"  trainspect / smdebug            {ratio:7.2f}x   target >= 5x: {'ok' if ratio >= 5 else 'MISSED'}"
                )
                if ratio < 5:
                    missed.append("vs smdebug")
        opened, first, median = random_access(base)
        print("1,000 steps x 20 tensors (1,000 float32 each):")
        print(f"  create_trial                    {opened * 1e3:7.2f} ms")
        print(f"  create_trial + first value      {first * 1e3:7.2f} ms")
        ok = median < 0.005
        print(f"  one (tensor, step), median      {median * 1e3:7.3f} ms   target < 5 ms: {'ok' if ok else 'MISSED'}")
        if not ok:
            missed.append("random access")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("all targets met" if not missed else f"missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
