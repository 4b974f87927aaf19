"""Step-time cost of logging to MLflow, against a local ``mlflow server`` (sqlite, 127.0.0.1, free port).

    .venv/bin/python benchmarks/bench_mlflow.py [--quick]

W1 (MLP 784-512-256-10, batch 128, one thread) with the trainspect hook (losses, profiler at 100 ms, live rules
ExplodingTensor and LossNotDecreasing unless --no-rules), without and with logging to an MLflow run (system metrics,
losses, NaN/Inf marks, live verdict tags, closing summary), rounds alternated. Two figures:

* the MLflow work per second of training: CPU of trainspect's logging thread (per-thread CPU from /proc) plus CPU
  of the server handling its requests. Were all of it to run serialised with the training thread, this is what it
  would add to the step time: an upper bound that the machine's noise does not move. Target: <= 1 %.
* the wall-clock step times side by side (median of the per-round ratios), for reference: on a shared 2-core VM
  single rounds swing by several percent either way, more than the effect.

The closing work (summary, verdicts, report upload) happens once after training and is timed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workloads as wl  # noqa: E402

import trainspect as ts  # noqa: E402


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen(
        [
            str(exe),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp}/db.sqlite",
            "--default-artifact-root",
            str(tmp / "art"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    uri = f"http://127.0.0.1:{port}"
    for _ in range(400):
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                return proc, uri
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not start")


def _thread_cpu(name: str) -> float:
    """CPU seconds of this process's thread called ``name`` (0 when there is none)."""
    ids = {t.native_id for t in threading.enumerate() if t.name == name}
    total = 0.0
    for tid in ids:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its children (the server's workers)."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _wait_quiet(pid: int, timeout: float = 60.0) -> None:
    """Wait until the freshly started server stops using CPU (migrations, worker start-up)."""
    deadline = time.monotonic() + timeout
    last = _tree_cpu(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _tree_cpu(pid)
        if now - last < 0.02:
            return
        last = now


def run_once(kind: str, steps: int, uri: str, tmp: Path, server_pid: int, rules: bool = True) -> dict[str, float]:
    """Train one configuration; return step time, logger and server CPU during training, closing time."""
    from mlflow.tracking import MlflowClient

    model, opt, loss_fn, batches = wl.make("W1")
    wl.train(model, opt, loss_fn, batches, 3)
    mlflow_run: Any = False
    if kind == "mlflow":
        client = MlflowClient(tracking_uri=uri)
        mlflow_run = {"run": client.create_run("0").info.run_id, "tracking_uri": uri}
    out = tmp / f"{kind}-{time.time_ns()}"
    hook = ts.torch.Hook(
        str(out),
        profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
        mlflow_run=mlflow_run,
        rules=[ts.rules.ExplodingTensor(), ts.rules.LossNotDecreasing()] if rules else None,
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    logger0, server0 = _thread_cpu("trainspect-mlflow"), _tree_cpu(server_pid)
    took = wl.train(model, opt, loss_fn, batches, steps)
    logger_cpu = _thread_cpu("trainspect-mlflow") - logger0
    server_cpu = _tree_cpu(server_pid) - server0
    t = time.perf_counter()
    hook.close()
    closing = time.perf_counter() - t
    shutil.rmtree(out, ignore_errors=True)
    return {
        "step_s": took / steps,
        "train_s": took,
        "logger_cpu": logger_cpu,
        "server_cpu": server_cpu,
        "closing_s": closing,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-rules", action="store_true", help="no live rules (no verdict tags to watch)")
    args = parser.parse_args()
    steps, rounds = (1500, 4) if args.quick else (3000, 10)
    tmp = Path(tempfile.mkdtemp(prefix="bench-mlflow-"))
    proc, uri = start_server(tmp)
    try:
        _wait_quiet(proc.pid)
        runs: dict[str, list[dict[str, float]]] = {"hook": [], "mlflow": []}
        for r in range(rounds):
            for kind in ("hook", "mlflow") if r % 2 == 0 else ("mlflow", "hook"):
                runs[kind].append(run_once(kind, steps, uri, tmp, proc.pid, rules=not args.no_rules))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ratios = [m["step_s"] / h["step_s"] for h, m in zip(runs["hook"], runs["mlflow"], strict=True)]
    # what the server does anyway (idle workers) is measured in the rounds without MLflow and subtracted
    idle_server = sum(h["server_cpu"] for h in runs["hook"]) / sum(h["train_s"] for h in runs["hook"])
    train_s = sum(m["train_s"] for m in runs["mlflow"])
    logger_share = sum(m["logger_cpu"] for m in runs["mlflow"]) / train_s
    server_share = max(0.0, sum(m["server_cpu"] for m in runs["mlflow"]) / train_s - idle_server)
    bound = logger_share + server_share
    print(
        json.dumps(
            {
                "workload": f"W1 (MLP 784-512-256-10, batch 128), {steps} steps x {rounds} rounds per side, 1 thread"
                + ("" if args.no_rules else ", live rules ExplodingTensor + LossNotDecreasing"),
                "step_ms_median": {
                    k: round(statistics.median(x["step_s"] for x in v) * 1000, 3) for k, v in runs.items()
                },
                "mlflow_logging_cpu_per_training_second_percent": {
                    "logger_thread": round(100 * logger_share, 3),
                    "server": round(100 * server_share, 3),
                    "total (upper bound of the added step time)": round(100 * bound, 3),
                },
                "wall_ratio_mlflow_over_hook (median of paired rounds)": round(statistics.median(ratios), 4),
                "wall_ratio_per_round": [round(x, 3) for x in ratios],
                "closing_s_median (summary, verdicts, report upload)": round(
                    statistics.median(m["closing_s"] for m in runs["mlflow"]), 2
                ),
                "target": "MLflow logging adds <= 1 % of the step time",
                "ok": bound <= 0.01,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
