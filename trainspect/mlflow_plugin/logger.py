"""``MlflowLogger``: logs a running job to an MLflow run from a background thread.

The training thread only enqueues step records (:meth:`MlflowLogger.submit`). Once per ``interval_s`` the thread
tails the run directory's system metrics (each node's new samples averaged into one point under MLflow's
``system/`` names), turns the queued records into metrics, and sends one batch. If the tracking server is
unreachable the metrics wait in a bounded buffer and are retried with back-off; one warning says so. Metrics pushed
out of the buffer, and those still unsent at close, are kept exactly as they would have been sent in
``<run>/mlflow/unsent*.jsonl``; ``trainspect mlflow-sync DIR`` sends them (and what the run directory holds beyond
them) later, once each.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Metric

from trainspect.mlflow_plugin.evaluations import EVALUATION_MODES, EvaluationMeans
from trainspect.mlflow_plugin.keys import step_values, system_metrics
from trainspect.mlflow_plugin.live_tags import LiveTags
from trainspect.mlflow_plugin.sink import MlflowSink
from trainspect.mlflow_plugin.system_tail import SystemTail
from trainspect.mlflow_plugin.unsent import append_unsent, unsent_file
from trainspect.modes import ModeKeys
from trainspect.step import StepRecord
from trainspect.store.manifest import write_json_atomic

__all__ = ["MlflowLogger", "sync_file", "DEFAULT_INTERVAL_S", "DEFAULT_EVERY_N_STEPS"]

log = logging.getLogger(__name__)


DEFAULT_INTERVAL_S = 5.0
DEFAULT_EVERY_N_STEPS = 10


def _ms(rec: StepRecord) -> int:
    """A record's wall time in ms (now when it has none)."""
    return int(rec.wall_time * 1000) if rec.wall_time else int(time.time() * 1000)


def sync_file(run_dir: str | os.PathLike[str]) -> Path:
    """Where the logger records which MLflow run a run directory belongs to (``<run>/mlflow/run.json``)."""
    return Path(run_dir) / "mlflow" / "run.json"


class MlflowLogger:
    """Logs system metrics and step records of one run directory to one MLflow run.

    Args:
        run_dir: the run directory to tail.
        sink: where to send (an :class:`~trainspect.mlflow_plugin.sink.MlflowSink`).
        interval_s: seconds between batches (one request per interval for all nodes).
        log_every_n_steps: log the step metrics of every n-th step of each mode (and the last step of each mode at
            close); the run directory keeps every step. Each metric row costs the tracking server about as much as
            a step of a small model costs the trainer, so logging every step of a fast loop would load the
            machine (and the server) more than the training: 1 logs every step.
        max_buffer: the most metrics kept in memory while the server is unreachable (older ones are moved to the
            run directory's unsent file).
        max_queue: the most step records waiting for the thread (more are dropped).
        owns_run: end the MLflow run at :meth:`close` (it was created for this job).
        tail_system: log the run directory's system metrics as they arrive.
        key_prefix: prefix of step metric keys (``worker_1/`` for the other workers of a distributed job).
        record_sync: keep ``<run>/mlflow/run.json`` (the chief's logger does; other workers attach through it).
        watch_verdicts: while training, tag the run with the live rules' verdicts as they change
            (``trainspect.issues``, ``trainspect.rule.<Rule>``; the chief's logger does).

    Values that become NaN or Inf are not charted: the step that diverges and each value's last finite point are
    logged whatever ``log_every_n_steps``, and the run is tagged at once (see
    :class:`~trainspect.mlflow_plugin.live_tags.LiveTags`). EVAL/PREDICT steps are logged as one mean per
    evaluation on the training step axis (:mod:`~trainspect.mlflow_plugin.evaluations`).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        sink: MlflowSink,
        interval_s: float = DEFAULT_INTERVAL_S,
        log_every_n_steps: int = DEFAULT_EVERY_N_STEPS,
        max_buffer: int = 100_000,
        max_queue: int = 10_000,
        owns_run: bool = False,
        tail_system: bool = True,
        key_prefix: str = "",
        record_sync: bool = True,
        watch_verdicts: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.sink = sink
        self.interval_s = float(interval_s)
        self.log_every_n_steps = max(1, int(log_every_n_steps))
        self._unlogged_last: dict[Any, tuple[int, list[Metric]]] = {}  # per mode, the newest step not logged yet
        self._last_finite: dict[str, tuple[Metric, bool]] = {}  # per key, its last finite point and if logged
        self._evals = EvaluationMeans(key_prefix)
        self.owns_run = owns_run
        self.tail_system = tail_system
        self.key_prefix = key_prefix
        self.record_sync = record_sync
        self.watch_verdicts = watch_verdicts
        self._live = LiveTags(self.run_dir, key_prefix)
        self._max_queue = max_queue
        self._records: collections.deque[StepRecord] = collections.deque()
        self._pending: collections.deque[Metric] = collections.deque(maxlen=max_buffer)
        self._tags: dict[str, str] = {}
        self._params: dict[str, str] = {}
        self._tail = SystemTail(self.run_dir)
        self._seen_nodes: set[str] = set()
        self._sys_step: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()  # the thread's ticks and flush()/close() from the training thread
        self._retry_at = 0.0
        self._failures = 0
        self.dropped = 0  # metrics moved out of the memory buffer into the unsent file
        self.unsent = 0  # metrics written to the unsent file
        self.lost = 0  # metrics that could not even be written there
        self.requests = 0
        self.warned = False

    # --- training thread ---------------------------------------------------------------------------------------
    def submit(self, record: StepRecord) -> None:
        """Queue a step record (called by the hook on the training thread; constant time)."""
        if len(self._records) < self._max_queue:
            self._records.append(record)
        else:
            self.dropped += 1

    def set_tags(self, tags: dict[str, str]) -> None:
        """Queue run tags."""
        with self._lock:
            self._tags.update(tags)

    def set_params(self, params: dict[str, str]) -> None:
        """Queue run params (those the run holds already are left as they are: MLflow params are immutable)."""
        with self._lock:
            self._params.update(params)

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is not None:
            return
        self._record_sync(complete=False)
        self._thread = threading.Thread(target=self._run, name="trainspect-mlflow", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # never let the thread die silently; the run directory keeps the data
                log.warning("trainspect: MLflow logging stopped after an internal error", exc_info=True)
                return

    def tick(self, force: bool = False) -> bool:
        """Collect new system samples and queued records, then send what is pending; return whether all was sent."""
        with self._tick_lock:
            self._collect()
            return self._flush(force)

    def _collect(self) -> None:
        new: list[Metric] = self._system()
        while self._records:
            new.extend(self._record_metrics(self._records.popleft()))
        if self.watch_verdicts:
            tags = self._live.verdicts()
            if tags:
                self.set_tags(tags)
        overflow = len(self._pending) + len(new) - (self._pending.maxlen or 0)
        if overflow > 0:  # the oldest leave memory for the unsent file
            self.dropped += overflow
            old = min(overflow, len(self._pending))
            self._spill([self._pending.popleft() for _ in range(old)] + new[: overflow - old])
            new = new[overflow - old :]
        self._pending.extend(new)

    def _record_metrics(self, rec: StepRecord) -> list[Metric]:
        """The metrics of one step record: every n-th step, the steps around a divergence, evaluations' means."""
        values = step_values(rec)
        tags, out, diverged = self._live.diverged(rec, values)
        if tags:
            self.set_tags(tags)
        if rec.mode in EVALUATION_MODES:
            self._evals.add({k: v for k, v in values.items()}, _ms(rec))
            return out
        if rec.mode is ModeKeys.TRAIN:
            out.extend(self._evals.train_step(rec.mode_step))
        metrics = self._step_metrics(rec, values)
        if diverged:
            out.extend(self._before_divergence(rec, diverged))
        logged = not rec.mode_step % self.log_every_n_steps or bool(diverged)
        if logged:
            held = self._unlogged_last.pop(rec.mode, None)
            if held is not None and held[0] == rec.mode_step:  # this step's own record, held before it diverged
                out.extend(held[1])
            out.extend(metrics)
        else:
            held = self._unlogged_last.get(rec.mode)
            if held is not None and held[0] == rec.mode_step:  # a save after the step ended joins the step
                metrics = held[1] + metrics
            self._unlogged_last[rec.mode] = (rec.mode_step, metrics)
        for m in metrics:
            self._last_finite[m.key] = (m, logged)
        return out

    def _spill(self, metrics: list[Metric]) -> None:
        """Append metrics to the run directory's unsent file, exactly as they would have been sent."""
        if not metrics:
            return
        try:
            append_unsent(unsent_file(self.run_dir, self.key_prefix), metrics)
            self.unsent += len(metrics)
        except OSError as exc:
            self.lost += len(metrics)
            log.warning(
                "trainspect: %d MLflow metrics lost: could not keep them in the run directory: %s", len(metrics), exc
            )

    def _before_divergence(self, rec: StepRecord, diverged: list[str]) -> list[Metric]:
        """The step before a divergence (when not logged yet) and each diverged value's last finite point."""
        out: list[Metric] = []
        held = self._unlogged_last.get(rec.mode)
        if held is not None and held[0] != rec.mode_step:
            del self._unlogged_last[rec.mode]
            out.extend(held[1])
            for m in held[1]:
                self._last_finite[m.key] = (m, True)
        for key in diverged:  # on the logging interval or not
            last = self._last_finite.get(key)
            if last is not None and not last[1]:
                out.append(last[0])
                self._last_finite[key] = (last[0], True)
        return out

    def _step_metrics(self, rec: StepRecord, values: dict[str, float]) -> list[Metric]:
        ts, prefix = _ms(rec), self.key_prefix
        return [Metric(prefix + k, v, ts, int(rec.mode_step)) for k, v in values.items() if math.isfinite(v)]

    def _system(self) -> list[Metric]:
        out: list[Metric] = []
        if not self.tail_system:
            return out
        new = self._tail.poll()
        self._seen_nodes.update(new)
        multi = len(self._seen_nodes) > 1
        for node, (last, means) in new.items():
            values = system_metrics(means, node if multi else None)
            step = self._sys_step.get(node, 0)
            self._sys_step[node] = step + 1
            out.extend(Metric(k, v, int(last * 1000), step) for k, v in values.items())
        return out

    def _flush(self, force: bool) -> bool:
        if not force and time.monotonic() < self._retry_at:
            return False
        with self._lock:
            tags, self._tags = self._tags, {}
            params, self._params = self._params, {}
        batch = list(self._pending)
        if not batch and not tags and not params:
            return True
        try:
            if params:
                self.sink.log_params(params)
            self.sink.log(batch, tags)
        except Exception as exc:
            with self._lock:
                self._tags = {**tags, **self._tags}
                self._params = {**params, **self._params}
            self._failed(exc)
            return False
        for _ in range(len(batch)):
            self._pending.popleft()
        self.requests += 1
        if self._failures:
            log.info("trainspect: MLflow reachable again; %d buffered metrics sent", len(batch))
        self._failures = 0
        self._retry_at = 0.0
        return True

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        self._retry_at = time.monotonic() + min(30.0, 2.0 ** min(self._failures, 5))
        if not self.warned:
            self.warned = True
            log.warning(
                "trainspect: cannot log to MLflow run %s at %s (%s: %s); training goes on, metrics are buffered "
                "(at most %d) and retried, the run directory keeps everything; upload later with: "
                "trainspect mlflow-sync %s --run-id %s",
                self.sink.run_id,
                self.sink.tracking_uri,
                type(exc).__name__,
                str(exc)[:200],
                self._pending.maxlen,
                self.run_dir,
                self.sink.run_id,
            )

    def close(
        self,
        final_metrics: dict[str, float] | None = None,
        tags: dict[str, str] | None = None,
        artifacts: list[tuple[str, str]] | None = None,
        run_dir_artifacts: bool = False,
    ) -> bool:
        """Stop the thread, send the rest, the summary metrics, tags and artifacts; return whether all arrived.

        Args:
            final_metrics: summary metrics logged at the last step.
            tags: run tags (rule verdicts …).
            artifacts: ``(local file, artifact folder)`` pairs.
            run_dir_artifacts: also upload the whole run directory under ``trainspect/run``.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
            self._thread = None
        if tags:
            self.set_tags(tags)
        with self._tick_lock:
            self._collect()
            last, self._unlogged_last = list(self._unlogged_last.values()), {}
            for _step, metrics in last:  # the last step of each mode, so the curves end where training ended
                self._pending.extend(metrics)
            self._pending.extend(self._evals.finish())  # an evaluation that training did not follow
            if final_metrics:
                now = int(time.time() * 1000)
                self._pending.extend(Metric(k, float(v), now, 0) for k, v in final_metrics.items() if math.isfinite(v))
            ok = self._flush(force=True)
            if not ok:  # kept for mlflow-sync, exactly as they would have been sent
                self._spill(list(self._pending))
                self._pending.clear()
        ok = ok and self.sink.reachable()
        if ok:
            ok = self._upload(artifacts or [], run_dir_artifacts)
        if ok and self.owns_run:
            self.sink.end("FINISHED")
        self._record_sync(complete=ok and self.unsent == 0 and self.lost == 0, ended=time.time())
        return ok

    def _upload(self, artifacts: list[tuple[str, str]], run_dir_artifacts: bool) -> bool:
        try:
            for path, folder in artifacts:
                if Path(path).exists():
                    self.sink.log_artifact(path, folder)
            if run_dir_artifacts:
                self.sink.log_artifacts(self.run_dir, "trainspect/run")
            return True
        except Exception as exc:
            self._failed(exc)
            return False

    def _record_sync(self, complete: bool, ended: float | None = None) -> None:
        if not self.record_sync:
            return
        doc: dict[str, Any] = {
            "run_id": self.sink.run_id,
            "tracking_uri": self.sink.tracking_uri,
            "complete": complete,
            "dropped_metrics": self.dropped,
            "unsent_metrics": self.unsent,
            "lost_metrics": self.lost,
            "updated": time.time(),
        }
        if ended is not None:  # the job closed its hook: the MLflow run's real end
            doc.update(end_time=ended, end_status="FINISHED")
        try:
            write_json_atomic(sync_file(self.run_dir), doc)
        except OSError as exc:
            log.debug("trainspect: could not write %s: %s", sync_file(self.run_dir), exc)

    def status(self) -> dict[str, Any]:
        """Counters for tests and benchmarks: ``requests``, ``pending``, ``dropped``, ``unsent``, ``warned``."""
        return {
            "requests": self.requests,
            "pending": len(self._pending),
            "dropped": self.dropped,
            "unsent": self.unsent,
            "warned": self.warned,
        }
