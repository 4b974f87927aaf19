"""Reading speed of the Trial (issue 2 targets), side by side with smdebug 1.0.34's trial and plain np.load.

    .venv/bin/python benchmarks/bench_trial.py [--quick] [--no-smdebug]

1. Every value of a W1 ``save_all`` run (400 steps; --quick 40): trainspect's Trial vs smdebug's trial on the run
   smdebug wrote itself from the same training (bytes/s), and vs ``np.load`` of the same arrays as .npy files.
2. One (tensor, step) from a run of 1,000 steps x 20 tensors: fresh trial, then random single reads.
3. DataFrames (issue 31; ``--frames`` runs only these, without torch): ``trial.dataframe()`` of every loss of a
   100k-step run and of one tensor's reductions over 10k steps, vs the same frame built by hand with ``value()`` /
   ``reduction_value()`` per step (target >= 5x); a one-hour ``window()`` of 6, 12 and 24-hour system runs (1 s
   samples; target < 1 s, and flat in the run's length).
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
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import _workloads as wl  # noqa: E402
from synthetic_run import write_system  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.modes import ModeKeys  # noqa: E402
from trainspect.profiler import SystemMetricsReader, window  # noqa: E402
from trainspect.reductions import Reduction  # noqa: E402
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


def _best(fn, repeat: int = 3) -> tuple[float, object]:
    """The fastest of ``repeat`` calls (seconds) and its result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _write_records(out: Path, steps: int, tensors) -> None:
    writer = RunWriter(RunLayout(out), "worker_0", tensorboard=False)
    writer.start()
    for s in range(steps):
        mode, ms = (ModeKeys.TRAIN, s) if s % 10 else (ModeKeys.EVAL, s // 10)
        writer.submit(StepRecord(mode, ms, s, 1e9 + s, "worker_0", tensors(s)))
    writer.close(end_job=True)


def _by_hand(trial: ts.Trial, names: list[str], reductions: list[str] | None) -> pd.DataFrame:
    """The long frame built from the Trial API, one call per step (what a user writes without dataframe())."""
    rows = []
    for name in names:
        tensor = trial.tensor(name)
        for step in tensor.steps():
            key = [step, trial.mode(step).name, trial.mode_step(step), tensor.workers(step)[0], name]
            if reductions is None:
                rows.append([*key, tensor.value(step).item()])
            else:
                rows.append([*key, *(tensor.reduction_value(step, r) for r in reductions)])
    return pd.DataFrame(rows, columns=["step", "mode", "mode_step", "worker", "name", *(reductions or ["value"])])


def frame_vs_loop(base: Path, steps: int, reductions: list[str] | None) -> tuple[float, float]:
    """Seconds of trial.dataframe() and of the same frame by hand (values checked equal)."""
    out = base / f"frames_{steps}_{'red' if reductions else 'loss'}"
    losses = frozenset({"losses"})
    if reductions is None:
        _write_records(
            out,
            steps,
            lambda s: {
                "loss": TensorRecord("loss", np.array(1.0 / (s + 1), np.float32), collections=losses),
                "aux_loss": TensorRecord("aux_loss", np.array(s % 7, np.float32), collections=losses),
            },
        )
    else:
        reds = {Reduction.parse(r): float(np.sin(i + 1)) for i, r in enumerate(reductions)}
        _write_records(out, steps, lambda s: {"gradient/w": TensorRecord("gradient/w", None, reds, shape=(256,))})
    trial = ts.create_trial(out)
    names = trial.tensor_names(regex="loss$") if reductions is None else ["gradient/w"]
    trial.dataframe(names=names[0])  # imports pandas' lazy parts
    frame_s, frame = _best(lambda: trial.dataframe(names=names, reductions=reductions))
    loop_s, loop = _best(lambda: _by_hand(trial, names, reductions), repeat=1)
    cols = reductions or ["value"]
    assert frame[cols].to_numpy().tolist() == loop[cols].to_numpy().tolist()
    assert frame["step"].tolist() == loop["step"].tolist()
    shutil.rmtree(out, ignore_errors=True)
    return frame_s, loop_s


SYSTEM_KEYS = [f"cpu{i}_utilization_percent" for i in range(8)] + [
    "gpu0_utilization_percent",
    "gpu0_memory_used_percent",
    "cpu_memory_used_percent",
    "cpu_iowait_percent",
    "disk_read_bytes",
    "disk_write_bytes",
    "net_rx_bytes",
    "net_tx_bytes",
]


def system_window(base: Path, hours: int, every_s: float = 1.0) -> tuple[float, int, int, float]:
    """(seconds of a fresh one-hour window() in the middle of an ``hours`` run, files read, files, full read s)."""
    run = base / f"sys_{hours}h"
    t0 = 1.7e9
    times = t0 + np.arange(int(hours * 3600 / every_s)) * every_s
    values = np.random.default_rng(0).uniform(0, 100, (len(times), len(SYSTEM_KEYS)))
    write_system(run, "algo-1", int(every_s * 1000), times, SYSTEM_KEYS, values, flush_every=60)
    mid = t0 + hours * 1800.0
    start = time.perf_counter()
    win = window(run, mid, mid + 3600)
    seconds = time.perf_counter() - start
    assert len(win.system) == int(3600 / every_s) * len(SYSTEM_KEYS)
    reader = SystemMetricsReader(run)
    reader.dataframe(mid, mid + 3600)
    files_read = len(reader._window.files_read)
    files = len(list(run.glob("profiler/system/*/*.tsys")))
    full_s, _ = _best(lambda: SystemMetricsReader(run).read_arrays(), repeat=1)
    shutil.rmtree(run, ignore_errors=True)
    return seconds, files_read, files, full_s


def _print_ratio(title: str, by_hand: str, frame_s: float, loop_s: float) -> bool:
    """Print a frame's time beside building it by hand; return whether the 5x target is met."""
    ok = loop_s / frame_s >= 5
    print(title)
    print(f"  dataframe()                     {frame_s * 1e3:7.1f} ms")
    print(f"  by hand ({by_hand}){' ' * max(1, 22 - len(by_hand))}{loop_s * 1e3:7.1f} ms")
    print(f"  ratio                           {loop_s / frame_s:7.1f}x   target >= 5x: {'ok' if ok else 'MISSED'}")
    return ok


def frames_benchmarks(base: Path, quick: bool) -> list[str]:
    """Part 3 (issue 31); returns the targets missed."""
    missed = []
    steps = 10_000 if quick else 100_000
    if not _print_ratio(
        f"trial.dataframe(), every loss of a {steps:,}-step run (2 losses):",
        "value() per step",
        *frame_vs_loop(base, steps, None),
    ):
        missed.append("dataframe of losses")
    reds = ["mean", "std", "min", "max", "l2", "abs_mean"]
    steps = 2_000 if quick else 10_000
    if not _print_ratio(
        f"trial.dataframe(reductions=...), one tensor, {len(reds)} reductions x {steps:,} steps:",
        "reduction_value()",
        *frame_vs_loop(base, steps, reds),
    ):
        missed.append("dataframe of reductions")
    print(f"window(run, t, t + 1 h) of a system run ({len(SYSTEM_KEYS)} metrics, 1 s samples), fresh readers:")
    for hours in (2, 4, 6) if quick else (6, 12, 24):
        seconds, read, files, full_s = system_window(base, hours)
        ok = seconds < 1.0
        print(
            f"  {hours:2d} h run: {seconds * 1e3:7.1f} ms, {read} of {files} files read "
            f"(whole run read: {full_s * 1e3:7.1f} ms)   target < 1 s: {'ok' if ok else 'MISSED'}"
        )
        if not ok:
            missed.append(f"window of {hours} h")
    return missed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-smdebug", action="store_true")
    parser.add_argument("--frames", action="store_true", help="only the DataFrame benchmarks (no torch)")
    args = parser.parse_args()
    steps = 40 if args.quick else 400
    base = Path(tempfile.mkdtemp(prefix="ts_bench_trial_"))
    missed: list[str] = []
    if args.frames:
        try:
            missed = frames_benchmarks(base, args.quick)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print("all targets met" if not missed else f"missed: {', '.join(missed)}")
        return
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
        missed += frames_benchmarks(base, args.quick)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("all targets met" if not missed else f"missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
