"""The values the MLflow plugin computes, without a server: keys, unit factors, queue and buffer bounds, what is sent.

The logger sends to a recording fake sink (one that can be told to fail), so every count below is exact: which
steps are logged, how many metrics wait, how many are spilled to the unsent file, what the sync file says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainspect.mlflow_plugin.keys import (
    MAX_KEY_LENGTH,
    issues_tags,
    loss_keys,
    safe_key,
    step_metrics,
    step_values,
    system_key,
    system_metrics,
    verdict_tags,
)
from trainspect.mlflow_plugin.logger import MlflowLogger, sync_file
from trainspect.mlflow_plugin.session import per_worker_steps, summary_metrics
from trainspect.mlflow_plugin.unsent import read_unsent, unsent_file
from trainspect.modes import ModeKeys
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.data import ProfilerData
from trainspect.report.summary import RunSummary
from trainspect.rules.verdict import Status, Verdict
from trainspect.step import StepRecord, TensorRecord


class FakeSink:
    """Records what would be sent; ``fail`` makes every call raise."""

    def __init__(self) -> None:
        self.run_id, self.tracking_uri = "r1", "file:///nowhere"
        self.batches: list[list[Any]] = []
        self.tags: dict[str, str] = {}
        self.params: dict[str, str] = {}
        self.calls = 0
        self.fail = False
        self.ended: str | None = None
        self.artifacts: list[tuple[str, str | None]] = []

    def log(self, metrics: Any = (), tags: Any = None) -> None:
        self.calls += 1
        if self.fail:
            raise ConnectionError("down")
        self.batches.append(list(metrics))
        self.tags.update(tags or {})

    def log_params(self, params: Any) -> dict[str, str]:
        if self.fail:
            raise ConnectionError("down")
        self.params.update(params)
        return dict(params)

    def reachable(self) -> bool:
        return not self.fail

    def end(self, status: str = "FINISHED") -> None:
        self.ended = status

    def log_artifact(self, path: Any, artifact_path: str | None = None) -> None:
        self.artifacts.append((str(path), artifact_path))

    def log_artifacts(self, directory: Any, artifact_path: str | None = None) -> None:
        self.artifacts.append((str(directory), artifact_path))

    def sent(self) -> list[tuple[str, float, int]]:
        return [(m.key, m.value, m.step) for batch in self.batches for m in batch]


def _rec(step: int, loss: float, mode: ModeKeys = ModeKeys.TRAIN, extra: dict[str, float] | None = None) -> StepRecord:
    tensors = {"loss": TensorRecord("loss", np.array(loss), collections=frozenset({"losses"}))}
    for name, v in (extra or {}).items():
        tensors[name] = TensorRecord(name, np.array(v))
    return StepRecord(mode, step, step, 1_700_000_000.0 + step, "worker_0", tensors)


def _logger(tmp_path: Path, sink: FakeSink, **kw: Any) -> MlflowLogger:
    kw.setdefault("tail_system", False)
    kw.setdefault("watch_verdicts", False)
    return MlflowLogger(tmp_path, sink, interval_s=3600.0, **kw)  # type: ignore[arg-type]


# --- keys ----------------------------------------------------------------------------------------------------
def test_safe_keys_are_cut_at_the_mlflow_limit() -> None:
    assert MAX_KEY_LENGTH == 250
    assert safe_key("a" * 250) == "a" * 250 and safe_key("b" * 251) == "b" * 250
    assert safe_key("//train//x<y>//") == "train/x_y_" and safe_key("") == "_"


def test_system_keys_use_mlflow_names_and_unit_factors() -> None:
    assert system_key("cpu_memory_used_bytes") == ("system/system_memory_usage_megabytes", 1e-6)
    assert system_key("gpu1_memory_used_bytes", "algo 2") == ("system/algo 2/gpu_1_memory_usage_megabytes", 1e-6)
    assert system_key("widget_spins_count") == ("system/widget_spins_count", 1.0)
    metrics = system_metrics(
        {
            "cpu0_utilization_percent": 10.0,
            "cpu1_utilization_percent": 40.0,
            "cpu_memory_used_bytes": 3.0e9,
            "gpu0_utilization_percent": float("nan"),
            "cpu_iowait_percent": 2.0,
        }
    )
    assert metrics == {
        "system/cpu_0_utilization_percentage": 10.0,
        "system/cpu_1_utilization_percentage": 40.0,
        "system/system_memory_usage_megabytes": 3000.0,
        "system/cpu_iowait_percentage": 2.0,
        "system/cpu_utilization_percentage": 25.0,  # the mean of the cores
    }
    given = system_metrics({"cpu0_utilization_percent": 10.0, "cpu_utilization_percent": 70.0})
    assert given["system/cpu_utilization_percentage"] == 70.0  # recorded: not derived


def test_step_values_keep_scalars_and_reductions_and_metrics_only_finite_ones() -> None:
    t = TensorRecord(
        "w", np.ones(3), reductions={("mean", False): 1.0, ("max", True): float("inf"), ("min", False): None}
    )
    rec = StepRecord(ModeKeys.EVAL, 4, 9, 0.0, "w0", {"w": t, "loss": TensorRecord("loss", np.array(2.0))})
    values = step_values(rec)
    assert values == {"eval/w/mean": 1.0, "eval/w/abs_max": float("inf"), "eval/loss": 2.0}
    assert step_metrics(rec) == {"eval/w/mean": 1.0, "eval/loss": 2.0}
    assert loss_keys(_rec(3, 1.0)) == {"train/loss"} and loss_keys(rec) == set()


def test_verdict_tags_count_the_rules() -> None:
    vs = [
        Verdict("B", Status.ISSUES_FOUND),
        Verdict("A", Status.ISSUES_FOUND),
        Verdict("C", Status.NO_DATA, message="no GPU: needs GPU utilisation"),
    ]
    tags = verdict_tags(vs)
    assert tags["trainspect.issues"] == "A, B" and tags["trainspect.rule.C"] == "NoData"
    assert tags["trainspect.rule_counts"].startswith("3 rules: 2 judged, 2 found issues (B, A), 1 could not look")
    assert verdict_tags([]) == {"trainspect.issues": ""} and issues_tags([]) == {"trainspect.issues": ""}


# --- the logger's bounds and what it sends ------------------------------------------------------------------
def test_the_record_queue_holds_max_queue_records_and_counts_the_rest(tmp_path: Path) -> None:
    sink = FakeSink()
    logger = _logger(tmp_path, sink, max_queue=3, log_every_n_steps=1)
    for step in range(5):
        logger.submit(_rec(step, 1.0))
    assert logger.status()["dropped"] == 2
    assert logger.tick(force=True) is True
    assert [s for _k, _v, s in sink.sent()] == [0, 1, 2]


def test_every_nth_step_is_logged_and_the_last_at_close(tmp_path: Path) -> None:
    sink = FakeSink()
    logger = _logger(tmp_path, sink, log_every_n_steps=3, owns_run=True)
    for step in range(8):
        logger.submit(_rec(step, 10.0 - step))
    logger.tick(force=True)
    assert sink.sent() == [("train/loss", 10.0, 0), ("train/loss", 7.0, 3), ("train/loss", 4.0, 6)]
    assert logger.close(final_metrics={"trainspect/steps": 8.0, "trainspect/bad": float("nan")}) is True
    assert sink.sent()[3:] == [("train/loss", 3.0, 7), ("trainspect/steps", 8.0, 0)]
    assert sink.ended == "FINISHED" and sink.calls == 2
    doc = json.loads(sync_file(tmp_path).read_text())
    assert doc["complete"] is True and doc["run_id"] == "r1" and doc["end_status"] == "FINISHED"
    assert (doc["dropped_metrics"], doc["unsent_metrics"], doc["lost_metrics"]) == (0, 0, 0)


def test_a_divergence_logs_the_step_before_and_the_last_finite_points(tmp_path: Path) -> None:
    sink = FakeSink()
    logger = _logger(tmp_path, sink, log_every_n_steps=10)
    for step in range(5):
        logger.submit(_rec(step, 1.0 + step, extra={"acc": 0.5}))
    logger.submit(_rec(5, float("nan"), extra={"acc": 0.6}))
    logger.tick(force=True)
    sent = sink.sent()
    assert ("train/loss", 5.0, 4) in sent and ("train/acc", 0.5, 4) in sent  # step 4: before the divergence
    assert ("train/acc", 0.6, 5) in sent and not any(k == "train/loss" and s == 5 for k, _v, s in sent)
    assert [s for k, _v, s in sent if k == "train/loss"] == [0, 4]
    assert any(k.startswith("trainspect/first_nonfinite_step") and v == 5.0 for k, v, _s in sent)


def test_evaluations_are_one_mean_on_the_training_axis(tmp_path: Path) -> None:
    sink = FakeSink()
    logger = _logger(tmp_path, sink, log_every_n_steps=1)
    logger.submit(_rec(0, 1.0))
    logger.submit(_rec(1, 1.0))
    logger.submit(_rec(0, 4.0, ModeKeys.EVAL))
    logger.submit(_rec(1, 6.0, ModeKeys.EVAL))
    logger.submit(_rec(2, 1.0))
    logger.submit(_rec(2, 9.0, ModeKeys.EVAL))  # an evaluation after the last training step: sent at close
    logger.tick(force=True)
    assert [m for m in sink.sent() if m[0] == "eval/loss"] == [("eval/loss", 5.0, 2)]
    logger.close()
    assert [m for m in sink.sent() if m[0] == "eval/loss"] == [("eval/loss", 5.0, 2), ("eval/loss", 9.0, 3)]


def test_an_outage_keeps_max_buffer_metrics_and_spills_the_oldest(tmp_path: Path) -> None:
    sink = FakeSink()
    sink.fail = True
    logger = _logger(tmp_path, sink, log_every_n_steps=1, max_buffer=4)
    for step in range(6):
        logger.submit(_rec(step, float(step)))
    assert logger.tick(force=True) is False and sink.calls == 1 and logger.warned
    status = logger.status()
    assert (status["pending"], status["dropped"], status["unsent"]) == (4, 2, 2)
    assert [(m.key, m.value, m.step) for m in read_unsent(unsent_file(tmp_path))] == [
        ("train/loss", 0.0, 0),
        ("train/loss", 1.0, 1),
    ]
    assert logger.tick() is False and sink.calls == 1  # backing off: no request before the retry time
    logger.submit(_rec(6, 6.0))
    logger.tick(force=True)
    assert logger.status()["pending"] == 4 and logger.status()["dropped"] == 3 and sink.calls == 2
    assert logger.close() is False
    assert [m.step for m in read_unsent(unsent_file(tmp_path))] == [0, 1, 2, 3, 4, 5, 6]
    doc = json.loads(sync_file(tmp_path).read_text())
    assert doc["complete"] is False and (doc["dropped_metrics"], doc["unsent_metrics"]) == (3, 7)


def test_the_buffer_flushes_once_the_server_is_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sink = FakeSink()
    sink.fail = True
    logger = _logger(tmp_path, sink, log_every_n_steps=1, max_buffer=10)
    logger.set_params({"batch_size": "8"})
    logger.submit(_rec(0, 1.0))
    logger.tick(force=True)
    sink.fail = False
    logger.submit(_rec(1, 2.0))
    with caplog.at_level("INFO", logger="trainspect.mlflow_plugin.logger"):
        assert logger.tick(force=True) is True
    assert sink.sent() == [("train/loss", 1.0, 0), ("train/loss", 2.0, 1)] and sink.params == {"batch_size": "8"}
    assert "2 buffered metrics sent" in caplog.text and logger.status()["pending"] == 0
    assert logger.requests == 1


def test_a_worker_logs_under_its_prefix_into_its_own_unsent_file(tmp_path: Path) -> None:
    sink = FakeSink()
    sink.fail = True
    logger = _logger(tmp_path, sink, log_every_n_steps=1, key_prefix="worker_1/", record_sync=False)
    logger.submit(_rec(0, 3.0))
    assert logger.close() is False
    assert [m.key for m in read_unsent(tmp_path / "mlflow" / "unsent-worker_1.jsonl")] == ["worker_1/train/loss"]
    assert not sync_file(tmp_path).exists()


# --- session figures -----------------------------------------------------------------------------------------
def test_summary_metrics_add_per_unit_figures_and_name_the_job_time() -> None:
    s = RunSummary("a", duration_s=30.0, loop_s=20.0, steps=40, workers=2, startup_s=4.0)
    out = summary_metrics(s, {"batch_size": "16", "num_workers": "2"})
    assert out["trainspect/steps_per_s"] == 2.0 and out["trainspect/samples_per_s"] == 64.0  # 2 x 16 x 2 workers
    assert out["trainspect/job_s"] == 30.0 and out["trainspect/startup_s"] == 4.0
    assert "trainspect/duration_s" not in out and out["trainspect/time_per_1k_steps_s"] == 500.0
    assert "trainspect/samples_per_s" not in summary_metrics(s, {"batch_size": "auto"})
    logged = summary_metrics(RunSummary("b", loop_s=10.0, steps=10, batch_size=4), {"batch_size": "99"})
    assert logged["trainspect/samples_per_s"] == 4.0  # the summary's own batch size wins
    unknown = summary_metrics(RunSummary("c", loop_s=20.0, steps=40, workers=0), {"batch_size": "16"})
    assert unknown["trainspect/samples_per_s"] == 32.0  # workers unknown (0): one, not more


def _worker(name: str, durations: list[float]) -> FrameworkTables:
    tab = FrameworkTables(name, "n0")
    start = np.arange(len(durations), dtype=np.float64) * 10
    tab.steps = {
        "mode": np.ones(len(durations), np.uint8),
        "mode_step": np.arange(len(durations), dtype=np.int64),
        "global_step": np.arange(len(durations), dtype=np.int64),
        "start": start,
        "end": start + np.asarray(durations),
    }
    return tab


def test_per_worker_step_percentiles_only_for_several_workers() -> None:
    class Ctx:
        def __init__(self, *tabs: FrameworkTables) -> None:
            self.profiler = ProfilerData(Path("/nonexistent"), framework={t.worker: t for t in tabs})

    durations = [float(d) for d in range(1, 22)]  # 1..21 s: p50 11, p95 20
    out = per_worker_steps(Ctx(_worker("w0", durations), _worker("w1", [2.0]), FrameworkTables("w2")))
    assert out == pytest.approx(
        {
            "trainspect/w0/step_p50_s": 11.0,
            "trainspect/w0/step_p95_s": 20.0,
            "trainspect/w1/step_p50_s": 2.0,
            "trainspect/w1/step_p95_s": 2.0,
        }
    )
    assert per_worker_steps(Ctx(_worker("w0", durations))) == {}


def test_the_run_to_log_to(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainspect.mlflow_plugin.session import resolve_run

    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("TRAINSPECT_MLFLOW", raising=False)
    assert resolve_run("abc123") == ("abc123", False)  # a run id given: that run, not created
    assert resolve_run(None) is None  # no active run, no MLFLOW_RUN_ID: nothing to log to
    monkeypatch.setenv("MLFLOW_RUN_ID", "fromenv")
    assert resolve_run(None) == ("fromenv", False)
    with pytest.raises(ValueError, match="mlflow_run=3"):
        resolve_run(3)


def test_close_stops_the_logging_thread(tmp_path: Path) -> None:
    sink = FakeSink()
    logger = _logger(tmp_path, sink, log_every_n_steps=1)
    logger.start()
    thread = logger._thread
    assert thread is not None and thread.is_alive() and json.loads(sync_file(tmp_path).read_text())["complete"] is False
    logger.submit(_rec(0, 1.0))
    assert logger.close() is True
    assert not thread.is_alive() and sink.sent() == [("train/loss", 1.0, 0)]


def test_retries_back_off_doubling_up_to_thirty_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainspect.mlflow_plugin import logger as logger_mod

    now = [1000.0]
    monkeypatch.setattr(logger_mod.time, "monotonic", lambda: now[0])
    sink = FakeSink()
    sink.fail = True
    logger = _logger(tmp_path, sink, log_every_n_steps=1)
    logger.submit(_rec(0, 1.0))
    assert logger.tick(force=True) is False  # the first failure
    waits = []
    for _ in range(6):
        calls = sink.calls
        for wait in (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 32.0):  # the first wait after which a tick tries again
            now[0] += wait
            logger.tick()
            if sink.calls > calls:
                waits.append(wait)
                break
            now[0] -= wait
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]  # 2 s after one failure, doubling, at most 30 s


def test_a_session_flush_sends_what_is_queued(tmp_path: Path) -> None:
    from trainspect.mlflow_plugin.session import MlflowSession

    session = MlflowSession(tmp_path, "r1", tracking_uri="http://127.0.0.1:9", log_every_n_steps=1)  # never reached
    sink = FakeSink()
    session.logger.sink = sink  # type: ignore[assignment]
    assert session.run_id == "r1"
    session.submit(_rec(0, 1.0))
    assert session.flush() is True and sink.sent() == [("train/loss", 1.0, 0)]
