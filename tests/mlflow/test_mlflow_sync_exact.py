"""MLflow down at close: what was not sent stays in the run directory; mlflow-sync sends exactly that, once."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from mlflow_helpers import Relay, train

import trainspect as ts
from trainspect.cli import main
from trainspect.mlflow_plugin.sync import plan_upload
from trainspect.mlflow_plugin.unsent import read_unsent, unsent_files

LOSS = "train/CrossEntropyLoss_output_0"


def _history(client: MlflowClient, run_id: str) -> dict[str, list[tuple[int, int, float]]]:
    keys = sorted(client.get_run(run_id).data.metrics)
    return {k: sorted((m.step, m.timestamp, m.value) for m in client.get_metric_history(run_id, k)) for k in keys}


def test_sync_after_an_outage_sends_each_point_once_and_ends_the_run(
    tmp_path: Path, mlflow_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = Relay(mlflow_server)  # the tracking server as the job sees it: it goes away, then comes back
    uri = server.uri
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run("0").info.run_id
    out = tmp_path / "run"
    killer = threading.Timer(1.0, server.stop)
    killer.start()  # the server goes away while the job trains: part of the run arrives, the rest cannot
    try:
        with caplog.at_level(logging.WARNING):
            train(out, mlflow_run={"run": run_id, "tracking_uri": uri, "interval_s": 0.2}, epochs=2)
    finally:
        killer.join()
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "mlflow" in r.getMessage().lower()
    ]
    assert len(warnings) == 1 and "trainspect mlflow-sync" in warnings[0], warnings
    recorded = json.loads((out / "mlflow" / "run.json").read_text())
    assert recorded["complete"] is False and recorded["end_status"] == "FINISHED"
    kept = [m for f in unsent_files(out) for m in read_unsent(f)]
    assert recorded["unsent_metrics"] == len(kept) > 0
    assert {m.key for m in kept} >= {LOSS, "trainspect/steps", "system/cpu_utilization_percentage"}

    server.start()
    try:
        before = _history(client, run_id)
        assert client.get_run(run_id).info.status == "RUNNING"
        assert main(["mlflow-sync", str(out)]) == 0  # run id and server as recorded
        after = _history(client, run_id)
        for key, points in after.items():
            steps = [s for s, _, _ in points]
            assert len(steps) == len(set(steps)), f"{key}: a step sent twice"
            assert set(before.get(key, [])) <= set(points), f"{key}: a point logged live changed"
        for m in kept:  # every kept point arrived as it was
            assert (m.step, m.timestamp, m.value) in set(after[m.key]) or m.step in {s for s, _, _ in before[m.key]}
        for key in (k for k in after if k.startswith("system/")):  # one series: 0..n-1, times increasing
            steps, stamps = [s for s, _, _ in after[key]], [t for _, t, _ in after[key]]
            assert steps == list(range(len(steps))) and stamps == sorted(stamps), key
        tensor = ts.create_trial(out).tensor("CrossEntropyLoss_output_0")
        assert [s for s, _, _ in after[LOSS]] == tensor.steps() == list(range(32))
        np.testing.assert_allclose(
            [v for _, _, v in after[LOSS]], [float(tensor.value(s)) for s in range(32)], rtol=1e-6
        )
        info = client.get_run(run_id).info
        assert info.status == "FINISHED" and info.end_time == int(recorded["end_time"] * 1000)
        assert client.get_run(run_id).data.tags["trainspect.rule.VanishingGradient"]
        assert unsent_files(out) == []
        assert json.loads((out / "mlflow" / "run.json").read_text())["complete"] is True

        assert main(["mlflow-sync", str(out)]) == 0  # nothing is missing any more: nothing is sent
        assert _history(client, run_id) == after
        assert client.get_run(run_id).info.end_time == info.end_time
    finally:
        server.stop()


def test_plan_upload_continues_series_and_skips_known_steps() -> None:
    present = {"loss": {0: 100, 10: 200}, "system/cpu": {0: 1000, 1: 2000}}
    exact = [Metric("loss", 1.0, 200, 10), Metric("loss", 2.0, 300, 20), Metric("system/cpu", 5.0, 3000, 2)]
    by_step = [Metric("loss", 9.0, 150, s) for s in range(0, 21, 5)]
    series = [Metric("system/cpu", float(i), 500 * i, i) for i in range(10)]  # rebuilt at another resolution
    got = plan_upload(present, exact, by_step, series)
    assert [(m.key, m.step, m.timestamp, m.value) for m in got] == [
        ("loss", 20, 300, 2.0),  # kept exactly
        ("system/cpu", 2, 3000, 5.0),
        ("loss", 5, 150, 9.0),  # filled in
        ("loss", 15, 150, 9.0),
        ("system/cpu", 3, 3500, 7.0),  # only what is newer than the series' last point, numbered on
        ("system/cpu", 4, 4000, 8.0),
        ("system/cpu", 5, 4500, 9.0),
    ]
    merged = {k: dict(v) for k, v in present.items()}
    for m in got:
        merged[m.key][m.step] = m.timestamp
    assert plan_upload(merged, exact, by_step, series) == []  # once sent, nothing is missing
