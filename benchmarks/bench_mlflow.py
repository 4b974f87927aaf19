"""Step-time cost of logging to MLflow, against a local ``mlflow server`` (sqlite, 127.0.0.1, free port).

    .venv/bin/python benchmarks/bench_mlflow.py [--quick]

Side by side, order alternated, median of the pairs: the plain loop, the trainspect hook (losses, profiler at
100 ms) without MLflow, and the same hook logging to the MLflow run (system metrics under ``system/``, losses,
closing summary). Target: MLflow logging adds <= 1 % to step time. The closing work (report, artifacts) is timed
apart, since it happens once after training.
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
    proc = subprocess.Popen([str(exe), "server", "--backend-store-uri", f"sqlite:///{tmp}/db.sqlite",
                             "--default-artifact-root", str(tmp / "art"), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    for _ in range(400):
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                return proc, uri
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not start")


def run_once(kind: str, steps: int, uri: str, tmp: Path) -> tuple[float, float]:
    """Return (training seconds, closing seconds) of one configuration."""
    from mlflow.tracking import MlflowClient

    model, opt, loss_fn, batches = wl.make("W1")
    wl.train(model, opt, loss_fn, batches, 3)
    if kind == "plain":
        return wl.train(model, opt, loss_fn, batches, steps), 0.0
    mlflow_run: Any = False
    if kind == "mlflow":
        client = MlflowClient(tracking_uri=uri)
        mlflow_run = {"run": client.create_run("0").info.run_id, "tracking_uri": uri}
    out = tmp / f"{kind}-{time.time_ns()}"
    hook = ts.torch.Hook(str(out), profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
                         mlflow_run=mlflow_run)  # fmt: skip
    hook.register_module(model)
    hook.register_loss(loss_fn)
    took = wl.train(model, opt, loss_fn, batches, steps)
    t = time.perf_counter()
    hook.close()
    closing = time.perf_counter() - t
    shutil.rmtree(out, ignore_errors=True)
    return took, closing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    steps, rounds = (600, 4) if args.quick else (1500, 8)
    tmp = Path(tempfile.mkdtemp(prefix="bench-mlflow-"))
    proc, uri = start_server(tmp)
    try:
        times: dict[str, list[float]] = {"plain": [], "hook": [], "mlflow": []}
        cpu: dict[str, list[float]] = {"hook": [], "mlflow": []}
        ratios, closing = [], []
        for r in range(rounds):
            per: dict[str, float] = {}
            for kind in ("plain", "hook", "mlflow") if r % 2 == 0 else ("mlflow", "hook", "plain"):
                c0 = time.process_time()
                took, close_s = run_once(kind, steps, uri, tmp)
                if kind != "plain":
                    cpu[kind].append((time.process_time() - c0 - close_s) / steps)
                per[kind] = took / steps
                times[kind].append(per[kind])
                if kind == "mlflow":
                    closing.append(close_s)
            ratios.append((per["mlflow"] - per["hook"]) / per["plain"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    med = {k: statistics.median(v) for k, v in times.items()}
    added = statistics.median(ratios)
    cpu_added = (statistics.median(cpu["mlflow"]) - statistics.median(cpu["hook"])) / med["plain"]
    print(json.dumps({
        "workload": f"W1 (MLP 784-512-256-10, batch 128), {steps} steps x {rounds} rounds, 1 thread",
        "step_ms_median": {k: round(v * 1000, 3) for k, v in med.items()},
        "hook_vs_plain": round(med["hook"] / med["plain"], 4),
        "mlflow_added_percent_of_plain_step (median of paired rounds)": round(100 * added, 2),
        "mlflow_added_percent_per_round": [round(100 * x, 1) for x in ratios],
        "mlflow_added_process_cpu_percent_of_plain_step": round(100 * cpu_added, 2),
        "closing_s_median (summary, verdicts, report upload)": round(statistics.median(closing), 2),
        "target": "mlflow logging adds <= 1 % of the plain step time",
        "ok": added <= 0.01,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
