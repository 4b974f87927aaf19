"""``MlflowSession``: what a hook runs for MLflow, from attaching to a run to the closing summary.

Start: resolve the run (given, active, ``MLFLOW_RUN_ID``, or a new one when logging is forced), tag it with
trainspect's version and captures, start the :class:`~trainspect.mlflow_plugin.logger.MlflowLogger` thread.
Close: rule verdicts as tags ``trainspect.rule.<Rule>`` and artifact ``trainspect/verdicts.json``, summary metrics
(``trainspect/*``: step time p50/p95, utilisation p95, trigger counts, duration, cost), the report as
``trainspect/report.html``, optionally the run directory.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from trainspect import env
from trainspect.mlflow_plugin.keys import verdict_tags
from trainspect.mlflow_plugin.logger import DEFAULT_EVERY_N_STEPS, DEFAULT_INTERVAL_S, MlflowLogger
from trainspect.mlflow_plugin.sink import MlflowSink, run_id_of
from trainspect.mlflow_plugin.tags import context_tags
from trainspect.step import StepRecord

__all__ = ["MlflowSession", "resolve_run", "verdict_tags", "per_worker_steps"]

log = logging.getLogger(__name__)


def resolve_run(
    mlflow_run: Any, tracking_uri: str | None = None, run_name: str | None = None
) -> tuple[str, bool] | None:
    """Return ``(run id, created)`` for a hook's ``mlflow_run`` argument, or None when there is nothing to log to.

    ``mlflow_run`` may be a Run/ActiveRun, a run id, ``True`` (the active run, else a new one) or ``None`` (the
    active run or ``MLFLOW_RUN_ID``; with ``TRAINSPECT_MLFLOW=1`` a new run when there is none).
    """
    import mlflow

    if mlflow_run is not None and mlflow_run is not True:
        return run_id_of(mlflow_run), False
    active = mlflow.active_run()
    if active is not None:
        return active.info.run_id, False
    if env.MLFLOW_RUN_ID.get():
        return str(env.MLFLOW_RUN_ID.get()), False
    if mlflow_run is True or env.TRAINSPECT_MLFLOW.get() == "1":
        client = mlflow.tracking.MlflowClient(tracking_uri=tracking_uri)
        experiment_id = mlflow.tracking.fluent._get_experiment_id() or "0"
        run = client.create_run(experiment_id, run_name=run_name)
        return run.info.run_id, True
    return None


def per_worker_steps(ctx: Any) -> dict[str, float]:
    """``trainspect/<worker>/step_p50_s`` and ``step_p95_s`` when the job has several workers."""
    import numpy as np

    framework = getattr(getattr(ctx, "profiler", None), "framework", None) or {}
    out: dict[str, float] = {}
    if len(framework) < 2:
        return out
    for worker, tab in sorted(framework.items()):
        steps = tab.steps
        if not len(steps.get("start", ())):
            continue
        d = np.asarray(steps["end"], dtype=np.float64) - np.asarray(steps["start"], dtype=np.float64)
        p50, p95 = np.percentile(d, [50, 95])
        out[f"trainspect/{worker}/step_p50_s"] = float(p50)
        out[f"trainspect/{worker}/step_p95_s"] = float(p95)
    return out


def _chief_run(run_dir: Path, wait_s: float) -> tuple[str, str | None] | None:
    """Return ``(run id, tracking uri)`` the chief recorded, waiting up to ``wait_s`` seconds."""
    from trainspect.mlflow_plugin.logger import sync_file

    deadline = time.monotonic() + wait_s
    while True:
        try:
            doc = json.loads(sync_file(run_dir).read_text(encoding="utf-8"))
            return str(doc["run_id"]), doc.get("tracking_uri")
        except (OSError, ValueError, KeyError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)


class MlflowSession:
    """One hook's MLflow logging.

    Args:
        run_dir: the run directory.
        run_id: the MLflow run.
        tracking_uri: the tracking URI (default: MLflow's current one).
        owns_run: whether the run was created for this job (it is ended at close).
        captures: what the hook captures, for the ``trainspect.captures`` tag.
        interval_s: seconds between batches (default 5).
        log_every_n_steps: log the step metrics of every n-th step of each mode, and the last (default 10).
        price_per_hour: instance price, for the ``trainspect/cost`` metric.
        log_run_dir: also upload the run directory as artifacts at close.
        worker: set for the non-chief workers of a distributed job: they log their step metrics under
            ``<worker>/`` into the chief's run, and leave system metrics, verdicts and the report to the chief.
    """

    def __init__(self, run_dir: str | os.PathLike[str], run_id: str, tracking_uri: str | None = None,
                 owns_run: bool = False, captures: tuple[str, ...] = ("tensors",),
                 interval_s: float = DEFAULT_INTERVAL_S, log_every_n_steps: int = DEFAULT_EVERY_N_STEPS,
                 price_per_hour: float | None = None, log_run_dir: bool = False,
                 worker: str | None = None) -> None:  # fmt: skip
        self.run_dir = Path(run_dir)
        self.sink = MlflowSink(run_id, tracking_uri)
        self.worker = worker
        self.logger = MlflowLogger(
            run_dir, self.sink, interval_s=interval_s, log_every_n_steps=log_every_n_steps,
            owns_run=owns_run and worker is None,
            tail_system=worker is None, key_prefix=f"{worker}/" if worker else "", record_sync=worker is None,
            watch_verdicts=worker is None,
        )  # fmt: skip
        self.captures = captures
        self.price_per_hour = price_per_hour
        self.log_run_dir = log_run_dir

    @classmethod
    def attach(cls, run_dir: str | os.PathLike[str], mlflow_run: Any = None, **kwargs: Any) -> MlflowSession | None:
        """Resolve the run and build a session (None when there is no run to log to).

        With ``worker`` (a non-chief rank), the run is the one the chief recorded in ``<run>/mlflow/run.json``,
        waited for up to ``wait_s`` seconds.
        """
        worker = kwargs.pop("worker", None)
        wait_s = float(kwargs.pop("wait_s", 30.0))
        if worker is not None:
            shared = _chief_run(Path(run_dir), wait_s)
            if shared is None:
                log.warning("trainspect: %s found no MLflow run of the chief in %s; MLflow logging is off for it",
                            worker, run_dir)  # fmt: skip
                return None
            kwargs.setdefault("tracking_uri", shared[1])
            return cls(run_dir, shared[0], worker=worker, **kwargs)
        resolved = resolve_run(mlflow_run, kwargs.get("tracking_uri"), run_name=Path(run_dir).name)
        if resolved is None:
            return None
        run_id, created = resolved
        return cls(run_dir, run_id, owns_run=created, **kwargs)

    @property
    def run_id(self) -> str:
        """The MLflow run id."""
        return self.sink.run_id

    def start(self) -> None:
        """Tag the run and start logging."""
        self.logger.set_tags(context_tags(self.captures))
        self.logger.start()

    def submit(self, record: StepRecord) -> None:
        """Queue a step record (training thread)."""
        self.logger.submit(record)

    def flush(self, timeout: float | None = None) -> bool:
        """Send the queued metrics now (``timeout`` is bounded by the sink's own request timeout)."""
        return self.logger.tick(force=True)

    def close(self, report: Path | None = None, context: Any = None) -> bool:
        """Send the rest, verdicts, summary and report; return whether everything arrived.

        Args:
            report: the report file to upload as ``trainspect/report.html``.
            context: a loaded ``trainspect.report.ReportContext`` (read from the run directory when None).
        """
        if self.worker is not None:
            return self.logger.close()
        from trainspect.report.context import ReportContext
        from trainspect.report.summary import summarize

        ctx = context or ReportContext.load(
            self.run_dir, price_per_hour=self.price_per_hour, evaluate_profiler_rules=False
        )
        if self.price_per_hour is not None:
            ctx.price_per_hour = self.price_per_hour
        metrics = {**summarize(ctx).to_metrics(), **per_worker_steps(ctx)}
        tmp = Path(tempfile.mkdtemp(prefix="trainspect-mlflow-"))
        verdicts_file = tmp / "verdicts.json"
        verdicts_file.write_text(json.dumps({"schema_version": 1, "verdicts": [v.to_dict() for v in ctx.verdicts]},
                                            indent=1), encoding="utf-8")  # fmt: skip
        artifacts = [(str(verdicts_file), "trainspect")]
        if report is not None and report.exists():
            artifacts.append((str(report), "trainspect"))
        ok = self.logger.close(metrics, verdict_tags(ctx.verdicts), artifacts, self.log_run_dir)
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
        if not ok and not self.logger.warned:
            log.warning("trainspect: the MLflow run %s is incomplete; upload later with: trainspect mlflow-sync %s "
                        "--run-id %s", self.run_id, self.run_dir, self.run_id)  # fmt: skip
        return ok
