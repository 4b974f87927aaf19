"""MLflow logging into the embedded local store: tags, metrics, artifacts, the context provider and autolog."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from mlflow_helpers import train

from trainspect.mlflow_plugin import MlflowLogger, MlflowSink, step_metrics, system_metrics
from trainspect.mlflow_plugin.context import TrainspectRunContextProvider
from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord


def ts_losses(run_dir: Path) -> tuple[list[int], list[float]]:
    """The loss of every step, as the run directory recorded it."""
    import trainspect as ts

    tensor = ts.create_trial(str(run_dir)).tensor("CrossEntropyLoss_output_0")
    steps = tensor.steps()
    return steps, [float(tensor.value(s)) for s in steps]


def _artifacts(client: MlflowClient, run_id: str) -> list[str]:
    return sorted(a.path for a in client.list_artifacts(run_id, "trainspect"))


def test_hook_logs_into_the_active_run(local_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    with mlflow.start_run() as run:
        train(tmp_path / "run")
    assert not list(system_tmp.glob("trainspect-mlflow-*"))  # the verdicts' staging folder is removed after upload
    client = MlflowClient()
    data = client.get_run(run.info.run_id).data
    assert data.tags["trainspect.version"] and data.tags["trainspect.captures"] == "tensors,rules,system,framework"
    assert data.tags["trainspect.rule.VanishingGradient"] in ("NoIssuesFound", "IssuesFound")
    assert "trainspect.rule.LossNotDecreasing" in data.tags
    assert "trainspect.rule.StepOutlier" in data.tags  # profiler rules evaluated for the report are logged too
    for key in (
        "system/cpu_utilization_percentage",
        "system/system_memory_usage_megabytes",
        "system/system_memory_usage_percentage",
        "system/cpu_0_utilization_percentage",
        "trainspect/step_p50_s",
        "trainspect/step_p95_s",
        "trainspect/cpu_p95",
        "trainspect/job_s",
        "trainspect/triggers/VanishingGradient",
    ):
        assert key in data.metrics, key
    assert data.metrics["trainspect/steps"] == 32 and "trainspect/duration_s" not in data.metrics  # MLflow's own
    assert data.params["batch_size"] == "16" and data.params["trainspect.rules"].startswith("VanishingGradient(")
    loss = client.get_metric_history(run.info.run_id, "train/CrossEntropyLoss_output_0")
    assert sorted(m.step for m in loss) == [0, 10, 20, 30, 31]  # every 10th step by default, and the last
    recorded = {s: float(v) for s, v in zip(*ts_losses(tmp_path / "run"), strict=True)}
    assert all(m.value == pytest.approx(recorded[m.step], rel=1e-6) for m in loss)
    assert _artifacts(client, run.info.run_id) == ["trainspect/report.html", "trainspect/verdicts.json"]
    local = client.download_artifacts(run.info.run_id, "trainspect/verdicts.json", str(tmp_path))
    rules = {v["rule"] for v in json.loads(Path(local).read_text())["verdicts"]}
    assert {"VanishingGradient", "LossNotDecreasing", "StepOutlier", "CPUBottleneck"} <= rules
    assert json.loads((tmp_path / "run" / "mlflow" / "run.json").read_text())["complete"] is True


def test_no_active_run_means_no_logging_and_false_means_never(local_store: str, tmp_path: Path) -> None:
    train(tmp_path / "a", rules=False, epochs=1)
    assert not (tmp_path / "a" / "mlflow" / "run.json").exists()
    assert json.loads((tmp_path / "a" / "mlflow" / "no_run.json").read_text()) == {"run_id": None}
    with mlflow.start_run():
        train(tmp_path / "b", mlflow_run=False, rules=False, epochs=1)
    assert not (tmp_path / "b" / "mlflow").exists()


def test_other_ranks_do_not_wait_for_a_chief_that_logs_to_no_run(
    local_store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trainspect.mlflow_plugin.session import MlflowSession

    assert MlflowSession.attach(tmp_path) is None  # the chief: mlflow imported, no active run
    with caplog.at_level(logging.WARNING):
        assert MlflowSession.attach(tmp_path, worker="worker_1", wait_s=600) is None  # returns, without a warning
    assert "found no MLflow run" not in caplog.text


def test_forced_logging_creates_and_ends_a_run(
    local_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINSPECT_MLFLOW", "1")
    train(tmp_path / "forced", rules=False, epochs=1)
    run_id = json.loads((tmp_path / "forced" / "mlflow" / "run.json").read_text())["run_id"]
    run = MlflowClient().get_run(run_id)
    assert run.info.status == "FINISHED" and "train/CrossEntropyLoss_output_0" in run.data.metrics


def test_run_context_provider_tags_runs_started_under_trainspect(
    local_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert TrainspectRunContextProvider().in_context() is False
    monkeypatch.setenv("TRAINSPECT_RUN_ACTIVE", "1")
    monkeypatch.setenv("TRAINSPECT_PROFILE", "100")
    with mlflow.start_run() as run:  # the entry point registered in pyproject.toml
        pass
    tags = MlflowClient().get_run(run.info.run_id).data.tags
    assert tags["trainspect.captures"] == "tensors,system,framework" and "trainspect.version" in tags


def test_autolog_beside_mlflow_autolog(local_store: str, tmp_path: Path) -> None:
    import torch

    from trainspect.mlflow_plugin import autolog

    autolog(out_dir=str(tmp_path / "auto"))
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with mlflow.start_run() as run:
            for _ in range(5):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 0, 1])).backward()
                opt.step()
        # mlflow.end_run (leaving the with-block) closed trainspect first: everything is in the run
        data = MlflowClient().get_run(run.info.run_id).data
        assert sorted(
            m.step for m in MlflowClient().get_metric_history(run.info.run_id, "train/CrossEntropyLoss_output_0")
        ) == [0, 4]
        assert data.tags["trainspect.captures"] == "tensors"
        assert data.metrics["trainspect/steps"] == 5  # tensors only: counted from the saved steps (0 and the last)
    finally:
        autolog(disable=True)
    from mlflow.utils.autologging_utils import autologging_is_disabled

    assert autologging_is_disabled("trainspect")


class _RecordingClient:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail = fail

    def log_batch(self, run_id: str, metrics: Any = (), tags: Any = (), synchronous: Any = None) -> None:
        if self.fail:
            raise ConnectionError("server gone")
        self.calls.append((len(metrics), len(tags)))


def test_batches_respect_log_batch_limits(local_store: str) -> None:
    sink = MlflowSink("r" * 32, local_store)
    sink.client = _RecordingClient()  # type: ignore[assignment]
    from mlflow.entities import Metric

    sink.log([Metric(f"m{i}", 1.0, 0, 0) for i in range(2500)], {f"t{i}": "v" for i in range(150)})
    assert all(m <= 1000 and t <= 100 and m + t <= 1000 for m, t in sink.client.calls)
    assert sum(m for m, _ in sink.client.calls) == 2500 and sum(t for _, t in sink.client.calls) == 150


def test_unreachable_sink_buffers_bounded_and_warns_once(
    local_store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = MlflowSink("r" * 32, local_store)
    sink.client = _RecordingClient(fail=True)  # type: ignore[assignment]
    logger = MlflowLogger(tmp_path, sink, max_buffer=50)
    rec = StepRecord(ModeKeys.TRAIN, 0, 0, 1.0, "w", {f"l{i}": TensorRecord(f"l{i}", np.array(1.0)) for i in range(40)})
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        for _ in range(5):
            logger.submit(rec)
            logger.tick(force=True)
    assert logger.status()["pending"] == 50 and logger.dropped == 150 and logger.warned
    assert len([r for r in caplog.records if "cannot log to MLflow" in r.getMessage()]) == 1
    sink.client = _RecordingClient()  # type: ignore[assignment]
    assert logger.tick(force=True) and logger.status()["pending"] == 0


def test_metric_keys_follow_mlflow_names() -> None:
    out = system_metrics(
        {
            "cpu0_utilization_percent": 10.0,
            "cpu1_utilization_percent": 30.0,
            "gpu0_utilization_percent": 50.0,
            "gpu0_memory_used_bytes": 2e9,
            "cpu_memory_used_bytes": 5e8,
            "disk_read_bytes_per_second": 7.0,
        },
        node="algo-2",
    )
    assert out == {
        "system/algo-2/cpu_0_utilization_percentage": 10.0,
        "system/algo-2/cpu_1_utilization_percentage": 30.0,
        "system/algo-2/gpu_0_utilization_percentage": 50.0,
        "system/algo-2/gpu_0_memory_usage_megabytes": 2000.0,
        "system/algo-2/system_memory_usage_megabytes": 500.0,
        "system/algo-2/disk_read_bytes_per_second": 7.0,
        "system/algo-2/cpu_utilization_percentage": 20.0,
    }
    rec = StepRecord(
        ModeKeys.EVAL,
        2,
        9,
        0.0,
        "w",
        {
            "<b>loss</b>": TensorRecord("<b>loss</b>", np.array([0.5])),
            "w": TensorRecord("w", None, {("l2", False): 3.0, ("mean", True): 1.0}),
            "big": TensorRecord("big", np.ones(3)),
        },
    )
    assert step_metrics(rec) == {"eval/_b_loss_/b_": 0.5, "eval/w/l2": 3.0, "eval/w/abs_mean": 1.0}


def test_system_metrics_keep_mlflow_key_names() -> None:
    # the keys of MLflow's own system metrics monitor (mlflow/system_metrics/metrics/{cpu,gpu}_monitor.py)
    out = system_metrics(
        {
            "cpu_utilization_percent": 12.0,
            "cpu_memory_used_percent": 40.0,
            "cpu_memory_used_bytes": 3e9,
            "gpu1_utilization_percent": 70.0,
            "gpu1_memory_used_percent": 25.0,
            "gpu1_memory_used_bytes": 4e9,
            "gpu1_power_watts": 250.0,
            "gpu1_temperature_celsius": 60.0,
        }
    )
    assert out == {
        "system/cpu_utilization_percentage": 12.0,
        "system/system_memory_usage_percentage": 40.0,
        "system/system_memory_usage_megabytes": 3000.0,
        "system/gpu_1_utilization_percentage": 70.0,
        "system/gpu_1_memory_usage_percentage": 25.0,
        "system/gpu_1_memory_usage_megabytes": 4000.0,
        "system/gpu_1_power_usage_watts": 250.0,
        "system/gpu_1_temperature_celsius": 60.0,
    }


def test_json_config_mlflow_key_reaches_the_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainspect.hook_config import hook_kwargs_from_json
    from trainspect.hooks.hook_extras import HookExtras

    cfg = tmp_path / "cfg.json"
    cfg.write_text(
        json.dumps(
            {
                "LocalPath": str(tmp_path / "r"),
                "MLflow": {"RunId": "a" * 32, "TrackingUri": "sqlite:///x.db", "PricePerHour": "2"},
            }
        )
    )
    extras = HookExtras(mlflow_run=hook_kwargs_from_json(cfg)["mlflow_run"])
    assert extras._mlflow_options() == ("a" * 32, {"tracking_uri": "sqlite:///x.db", "price_per_hour": 2.0})
    assert extras._mlflow_wanted()
    assert HookExtras(mlflow_run="false")._mlflow_options() == (False, {})
    assert not HookExtras(mlflow_run={"Enabled": False})._mlflow_wanted()
    monkeypatch.setenv("TRAINSPECT_MLFLOW", "0")
    assert not HookExtras(mlflow_run="a" * 32)._mlflow_wanted()


def test_sink_sends_mlflow_credentials_on_its_keep_alive_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "user")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "secret")
    sink = MlflowSink("r" * 32, "http://127.0.0.1:9")
    session = sink._direct_session()
    assert session is not None and session.headers["Authorization"] == "Basic dXNlcjpzZWNyZXQ="
    assert session.headers["User-Agent"].startswith("mlflow") and session.verify  # a CA bundle or True
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok")
    assert MlflowSink("r" * 32, "http://127.0.0.1:9")._direct_session().headers["Authorization"] == "Bearer tok"
    monkeypatch.setenv("MLFLOW_TRACKING_AWS_SIGV4", "true")  # needs MLflow's own request path
    assert MlflowSink("r" * 32, "http://127.0.0.1:9")._direct_session() is None


def test_a_run_trainspect_creates_goes_into_the_named_experiment(
    local_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An experiment of that name is used as it is; a new name is created, marked as a training experiment."""
    from trainspect.mlflow_plugin.session import EXPERIMENT_KIND_TAG, experiment_for_new_run

    client = MlflowClient(tracking_uri=local_store)
    mine = client.create_experiment("mine")
    assert experiment_for_new_run(client, "mine") == mine
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(mine).tags  # the user's, left as it is
    fresh = experiment_for_new_run(client, "fresh")
    assert fresh != mine and client.get_experiment(fresh).name == "fresh"
    assert client.get_experiment(fresh).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "mine")  # MLflow's own variable, when no name is given
    assert experiment_for_new_run(client) == mine


def test_flush_returns_once_the_steps_have_reached_mlflow(local_store: str, tmp_path: Path) -> None:
    """``hook.flush()`` waits for the MLflow logger too (within its timeout), and says whether all arrived."""
    import torch

    import trainspect as ts

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with mlflow.start_run() as run:
        hook = ts.torch.Hook(tmp_path / "run", mlflow_run={"log_every_n_steps": 1})
        hook.register_module(model)
        for _ in range(3):
            model(torch.ones(2, 3)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        assert hook.flush(timeout=60)
        logged = [m.step for m in MlflowClient().get_metric_history(run.info.run_id, "train/loss")]
        hook.close()
    assert sorted(logged) == [0, 1, 2]
