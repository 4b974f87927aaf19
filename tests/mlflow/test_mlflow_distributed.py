"""A torchrun job logs into one MLflow run: rank 0 creates it, the other ranks attach (real mlflow server)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _support.package import PACKAGE_ROOT
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_two_ranks_share_one_mlflow_run(mlflow_server: str, tmp_path: Path) -> None:
    out = tmp_path / "ddp-mlflow"
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "TRAINSPECT_TESTING": "1",
        "MLFLOW_TRACKING_URI": mlflow_server,
        "TRAINSPECT_MLFLOW": "1",
        "PYTHONPATH": str(PACKAGE_ROOT),
    }
    proc = subprocess.run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc_per_node",
            "2",
            "examples/ddp_train.py",
            "--out",
            str(out),
            "--steps",
            "30",
            "--profile",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = json.loads((out / "mlflow" / "run.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=mlflow_server)
    same_name = client.search_runs(["0"], filter_string=f"attributes.run_name = '{out.name}'")
    assert [r.info.run_id for r in same_name] == [run_id]  # one run for the job, not one per rank
    metrics = client.get_run(run_id).data.metrics
    assert "train/CrossEntropyLoss_output_0" in metrics
    assert "worker_1/train/CrossEntropyLoss_output_0" in metrics
    assert any(k.startswith("system/cpu_utilization_percentage") for k in metrics)
    assert {"trainspect/worker_0/step_p50_s", "trainspect/worker_1/step_p95_s"} <= set(metrics)  # per worker
    history = client.get_metric_history(run_id, "worker_1/train/CrossEntropyLoss_output_0")
    assert sorted({m.step for m in history}) == [0, 10, 20, 29]  # every 10th step, and the last
