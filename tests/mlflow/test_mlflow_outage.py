"""MLflow unreachable: training finishes with one warning, the run directory keeps everything, mlflow-sync uploads."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from mlflow_helpers import free_port, train

from trainspect.cli import main


def test_unreachable_server_then_mlflow_sync(
    tmp_path: Path, local_store: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    out = tmp_path / "run"
    fake_id = "0" * 32
    with caplog.at_level(logging.WARNING):
        train(out, mlflow_run={"run": fake_id, "tracking_uri": dead, "interval_s": 0.2})
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "mlflow" in r.getMessage().lower()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "trainspect mlflow-sync" in warnings[0].getMessage()
    assert (out / "report.html").exists() and (out / "training_job_end.ts").exists()
    recorded = json.loads((out / "mlflow" / "run.json").read_text())
    assert recorded == {**recorded, "run_id": fake_id, "tracking_uri": dead, "complete": False}

    client = MlflowClient(tracking_uri=local_store)
    run_id = client.create_run(client.get_experiment_by_name(f"exp-{tmp_path.name}").experiment_id).info.run_id
    assert main(["mlflow-sync", str(out), "--run-id", run_id, "--tracking-uri", local_store]) == 0
    data = client.get_run(run_id).data
    assert "system/cpu_utilization_percentage" in data.metrics and "trainspect/step_p50_s" in data.metrics
    assert data.tags["trainspect.rule.VanishingGradient"]
    loss = client.get_metric_history(run_id, "train/CrossEntropyLoss_output_0")
    assert sorted(m.step for m in loss) == list(range(32))
    assert sorted(a.path for a in client.list_artifacts(run_id, "trainspect")) == [
        "trainspect/report.html",
        "trainspect/verdicts.json",
    ]
    assert json.loads((out / "mlflow" / "run.json").read_text())["complete"] is True
    assert main(["mlflow-sync", str(tmp_path / "nope"), "--run-id", run_id]) == 2


def test_server_going_away_mid_run(tmp_path: Path, mlflow_server: str, caplog: pytest.LogCaptureFixture) -> None:
    import threading

    from mlflow_helpers import Relay

    server = Relay(mlflow_server)  # the tracking server as the job sees it: it goes away, then comes back
    uri = server.uri
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run("0").info.run_id
    out = tmp_path / "run"
    killer = threading.Timer(1.0, server.stop)
    killer.start()  # the server goes away while the job trains (about 2 s per epoch)
    try:
        with caplog.at_level(logging.WARNING):
            train(out, mlflow_run={"run": run_id, "tracking_uri": uri, "interval_s": 0.2}, epochs=2)
    finally:
        killer.join()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "mlflow" in r.getMessage().lower()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert json.loads((out / "mlflow" / "run.json").read_text())["complete"] is False
    assert (out / "training_job_end.ts").exists()  # training finished; the run directory has everything

    server.start()
    try:
        assert main(["mlflow-sync", str(out), "--run-id", run_id, "--tracking-uri", uri]) == 0
        loss = client.get_metric_history(run_id, "train/CrossEntropyLoss_output_0")
        assert sorted({m.step for m in loss}) == list(range(32))
        assert client.get_run(run_id).data.tags["trainspect.rule.VanishingGradient"]
    finally:
        server.stop()
