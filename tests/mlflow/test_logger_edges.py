"""Edges of ``MlflowLogger`` seen in MLflow's embedded store: whose run it ends, and the steps of system metrics.

A logger attached to a run the user started leaves that run open at close (only a run created for the job is
ended), and the system metrics of a node are numbered from step 0, one step per poll that found new samples.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from trainspect.mlflow_plugin import MlflowLogger, MlflowSink
from trainspect.modes import ModeKeys
from trainspect.profiler.writers import SystemChunkWriter
from trainspect.step import StepRecord, TensorRecord
from trainspect.store.layout import RunLayout

T0 = 1_700_000_000.0


def _loss(step: int, value: float) -> StepRecord:
    tensor = TensorRecord("loss", np.array(value), collections=frozenset({"losses"}))
    return StepRecord(ModeKeys.TRAIN, step, step, T0 + step, "worker_0", {"loss": tensor})


def test_a_logger_on_the_users_run_leaves_it_running_at_close(local_store: str, tmp_path: Path) -> None:
    client = MlflowClient()
    with mlflow.start_run() as run:
        run_id = run.info.run_id
        logger = MlflowLogger(tmp_path / "run", MlflowSink(run_id, local_store), tail_system=False)
        logger.submit(_loss(0, 2.5))
        assert logger.close()
        assert client.get_run(run_id).info.status == "RUNNING"  # the user goes on logging to it
    assert client.get_run(run_id).info.status == "FINISHED"  # ended by the user's ``with``
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train/loss")] == [(0, 2.5)]
    owned = client.create_run(run.info.experiment_id).info.run_id
    logger = MlflowLogger(tmp_path / "owned", MlflowSink(owned, local_store), tail_system=False, owns_run=True)
    assert logger.close()
    assert client.get_run(owned).info.status == "FINISHED"  # a run created for the job ends with it


def test_system_metrics_count_steps_from_zero_one_per_poll_with_new_samples(local_store: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    writer = SystemChunkWriter(RunLayout(run_dir).system_dir("algo-1"), "algo-1", 500)
    with mlflow.start_run() as run:
        logger = MlflowLogger(run_dir, MlflowSink(run.info.run_id, local_store), watch_verdicts=False)
        for i, (cpu0, cpu1) in enumerate([(10.0, 30.0), (50.0, 70.0), (90.0, 90.0)]):
            for k in range(2):  # two samples per poll: the poll logs their mean
                writer.append(T0 + i + 0.5 * k, {"cpu0_utilization_percent": cpu0, "cpu1_utilization_percent": cpu1})
            writer.flush()
            assert logger.tick(force=True)
        assert logger.tick(force=True)  # nothing new: no step
        writer.close()
        assert logger.close()
    client = MlflowClient()
    history = client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")
    assert sorted((m.step, m.value) for m in history) == [(0, 20.0), (1, 60.0), (2, 90.0)]
    cpu0 = client.get_metric_history(run.info.run_id, "system/cpu_0_utilization_percentage")
    ms = int(T0 * 1000)
    assert sorted((m.step, m.timestamp) for m in cpu0) == [(0, ms + 500), (1, ms + 1500), (2, ms + 2500)]  # newest


def test_mlflow_run_true_creates_a_run_when_none_is_active(
    local_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainspect.mlflow_plugin.session import resolve_run

    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("TRAINSPECT_MLFLOW", raising=False)
    assert mlflow.active_run() is None
    resolved = resolve_run(True, local_store, run_name="made-for-the-job")
    assert resolved is not None
    run_id, created = resolved
    assert created is True  # the job owns it (ends it at close)
    made = MlflowClient(local_store).get_run(run_id).info
    assert made.run_name == "made-for-the-job"
    chosen = mlflow.get_experiment_by_name(f"exp-{tmp_path.name}")  # the one mlflow.set_experiment() made current
    assert chosen is not None and made.experiment_id == chosen.experiment_id
    with mlflow.start_run() as active:
        assert resolve_run(True, local_store) == (active.info.run_id, False)  # the active run: not created


def test_the_chiefs_session_records_the_run_for_the_other_ranks_and_theirs_does_not(
    local_store: str, tmp_path: Path
) -> None:
    from trainspect.mlflow_plugin.session import MlflowSession

    client = MlflowClient()
    run_id = client.create_run(client.get_experiment_by_name("Default").experiment_id).info.run_id
    worker = MlflowSession(tmp_path / "w", run_id, local_store, worker="worker_1")
    worker.start()
    assert worker.close()  # a non-chief rank's session closes its logger alone, and says whether all arrived
    assert not (tmp_path / "w" / "mlflow" / "run.json").exists()  # a non-chief rank attaches through the chief's
    chief = MlflowSession(tmp_path / "c", run_id, local_store)
    chief.start()
    assert json.loads((tmp_path / "c" / "mlflow" / "run.json").read_text())["run_id"] == run_id
    assert chief.logger.close()
    # the chief alone tails the node's system metrics and tags the run with the live rules' verdicts
    assert (chief.logger.watch_verdicts, worker.logger.watch_verdicts) == (True, False)
    assert (chief.logger.tail_system, worker.logger.tail_system) == (True, False)


def test_a_late_record_that_diverges_logs_its_steps_held_values_too(local_store: str, tmp_path: Path) -> None:
    """Step 3 is not on the logging interval, so its loss is held; a tensor saved after the step ended joins step 3
    and is NaN: the step is logged for its divergence, with the loss held from its first record."""
    with mlflow.start_run() as run:
        run_id = run.info.run_id
        logger = MlflowLogger(
            tmp_path / "run",
            MlflowSink(run_id, local_store),
            log_every_n_steps=10,
            tail_system=False,
            watch_verdicts=False,
        )
        logger.submit(_loss(0, 3.0))
        logger.submit(_loss(3, 1.0))
        late = TensorRecord("grad_norm", np.array(np.nan), collections=frozenset({"scalars"}))
        logger.submit(StepRecord(ModeKeys.TRAIN, 3, 3, T0 + 3, "worker_0", {"grad_norm": late}))
        assert logger.close()
    history = MlflowClient().get_metric_history(run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 3.0), (3, 1.0)]


def test_an_internal_error_ends_the_logging_thread_with_one_warning(
    local_store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in a tick must not kill the thread silently: one warning, and the thread ends (training goes on)."""
    import logging

    with mlflow.start_run() as run:
        logger = MlflowLogger(
            tmp_path / "run", MlflowSink(run.info.run_id, local_store), interval_s=0.01, tail_system=False
        )

        def broken(force: bool = False) -> bool:
            raise RuntimeError("a bug")

        logger.tick = broken  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="trainspect.mlflow_plugin.logger"):
            logger.start()
            assert logger._thread is not None
            logger._thread.join(30)
        assert not logger._thread.is_alive()
        warnings = [r for r in caplog.records if "MLflow logging stopped after an internal error" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].exc_info is not None
        del logger.tick  # the class's own: close sends what is left
        assert logger.close()
