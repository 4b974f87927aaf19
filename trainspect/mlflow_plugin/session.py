"""``MlflowSession``: what a hook runs for MLflow, from attaching to a run to the closing summary.

Start: resolve the run (given, active, ``MLFLOW_RUN_ID``, or a new one when logging is forced, in an experiment
trainspect marks as a training experiment when it creates it), tag it with trainspect's version and captures, log
the hook's configuration as params, start the :class:`~trainspect.mlflow_plugin.logger.MlflowLogger` thread.
Close: the training loader's ``batch_size``/``num_workers`` as params, rule verdicts as tags
``trainspect.rule.<Rule>`` and artifact ``trainspect/verdicts.json``, summary metrics (``trainspect/*``: per unit of
work, step time p50/p95, utilisation p95, trigger counts, job time as ``job_s``, cost), the report as
``trainspect/report.html``, optionally the run directory.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainspect import env
from trainspect.mlflow_plugin.keys import run_tags, verdict_tags
from trainspect.mlflow_plugin.logger import DEFAULT_EVERY_N_STEPS, DEFAULT_INTERVAL_S, MlflowLogger
from trainspect.mlflow_plugin.params import hook_params, loader_params
from trainspect.mlflow_plugin.sink import MlflowSink, run_id_of
from trainspect.mlflow_plugin.tags import context_tags
from trainspect.step import StepRecord
from trainspect.store.manifest import write_json_atomic

__all__ = [
    "MlflowSession",
    "resolve_run",
    "experiment_for_new_run",
    "verdict_tags",
    "per_worker_steps",
    "summary_metrics",
    "EXPERIMENT_KIND_TAG",
    "EXPERIMENT_KIND_TRAINING",
]

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""MLflow 3's experiment type tag: the UI opens an experiment in its GenAI or its classic (model training) view by it
(MLflow's Python package has no constant for it; the UI's ``ExperimentKind`` enum names the values)."""
EXPERIMENT_KIND_TRAINING = "custom_model_development"
"""The experiment type of model training (the UI's "Machine learning" view)."""
_PER_UNIT = ("steps_per_s", "time_per_1k_steps_s", "samples_per_s", "startup_s")

log = logging.getLogger(__name__)

_UNKNOWN: Any = object()


def resolve_run(
    mlflow_run: Any, tracking_uri: str | None = None, run_name: str | None = None, experiment: str | None = None
) -> tuple[str, bool] | None:
    """Return ``(run id, created)`` for a hook's ``mlflow_run`` argument, or None when there is nothing to log to.

    ``mlflow_run`` may be a Run/ActiveRun, a run id, ``True`` (the active run, else a new one) or ``None`` (the
    active run or ``MLFLOW_RUN_ID``; with ``TRAINSPECT_MLFLOW=1`` a new run when there is none). A new run goes to
    ``experiment`` (a name), else MLflow's current experiment (``mlflow.set_experiment``,
    ``MLFLOW_EXPERIMENT_NAME``/``_ID``, the default).
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
        run = client.create_run(experiment_for_new_run(client, experiment), run_name=run_name)
        return run.info.run_id, True
    return None


def experiment_for_new_run(client: Any, name: str | None = None) -> str:
    """The experiment id of a run trainspect creates.

    An experiment trainspect creates for it (a name that does not exist yet) is marked as a training experiment
    (:data:`EXPERIMENT_KIND_TAG`); one the user created is left as it is.
    """
    import mlflow
    from mlflow.environment_variables import MLFLOW_EXPERIMENT_ID, MLFLOW_EXPERIMENT_NAME

    active = getattr(mlflow.tracking.fluent, "_active_experiment_id", None)  # mlflow.set_experiment's
    if name is None and active:
        return str(active)
    name = name or MLFLOW_EXPERIMENT_NAME.get()
    if name:
        found = client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        return str(client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND_TRAINING}))
    if MLFLOW_EXPERIMENT_ID.get():
        return str(MLFLOW_EXPERIMENT_ID.get())
    return str(mlflow.tracking.fluent._get_experiment_id() or "0")


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


def summary_metrics(summary: Any, loader: Mapping[str, str] | None = None) -> dict[str, float]:
    """The closing summary metrics, per unit of work, with the job's duration named ``trainspect/job_s``.

    :meth:`RunSummary.to_metrics`, plus the per-unit figures where it has not logged them (``steps_per_s``,
    ``time_per_1k_steps_s``, ``samples_per_s`` from the loader's ``batch_size``, ``startup_s``), so that MLflow's
    compare view ranks runs of different lengths per unit of work. MLflow shows its own run duration (the run's
    start to end, which the user's run may span more or less of than the job), so no ``trainspect/duration_s``
    stands beside it.
    """
    out = dict(summary.to_metrics())
    for key in _PER_UNIT:
        value = getattr(summary, key, None)
        if f"trainspect/{key}" not in out and value is not None:
            out[f"trainspect/{key}"] = float(value)
    batch = str((loader or {}).get("batch_size", ""))
    rate = out.get("trainspect/steps_per_s")
    if "trainspect/samples_per_s" not in out and batch.isdigit() and rate:
        out["trainspect/samples_per_s"] = rate * int(batch) * max(int(getattr(summary, "workers", 1) or 1), 1)
    duration = out.pop("trainspect/duration_s", None)
    if duration is not None:
        out.setdefault("trainspect/job_s", duration)
    return out


def _no_run_file(run_dir: Path) -> Path:
    """Where the chief says it logs to no MLflow run, so that the other ranks stop waiting for one."""
    return run_dir / "mlflow" / "no_run.json"


def _chief_run(run_dir: Path, wait_s: float) -> tuple[str, str | None] | None:
    """Return ``(run id, tracking uri)`` the chief recorded, waiting up to ``wait_s`` seconds.

    None at once when the chief has said it logs to no run (``mlflow/no_run.json``).
    """
    from trainspect.mlflow_plugin.logger import sync_file

    deadline = time.monotonic() + wait_s
    while True:
        try:
            doc = json.loads(sync_file(run_dir).read_text(encoding="utf-8"))
            return str(doc["run_id"]), doc.get("tracking_uri")
        except (OSError, ValueError, KeyError):
            if time.monotonic() >= deadline or _no_run_file(run_dir).exists():
                return None
            time.sleep(0.2)


def _say_no_run(run_dir: Path) -> None:
    try:
        write_json_atomic(_no_run_file(run_dir), {"run_id": None})
    except OSError as exc:  # the other ranks then wait their wait_s, as before
        log.debug("trainspect: could not write %s: %s", _no_run_file(run_dir), exc)


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
        profiler_config: the hook's ``ProfilerConfig`` (or None), for the ``trainspect.profiler`` param; not given:
            that param is not logged.
        experiment: the experiment (a name) of a run created for this job (see :func:`resolve_run`).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        run_id: str,
        tracking_uri: str | None = None,
        owns_run: bool = False,
        captures: tuple[str, ...] = ("tensors",),
        interval_s: float = DEFAULT_INTERVAL_S,
        log_every_n_steps: int = DEFAULT_EVERY_N_STEPS,
        price_per_hour: float | None = None,
        log_run_dir: bool = False,
        worker: str | None = None,
        profiler_config: Any = _UNKNOWN,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.sink = MlflowSink(run_id, tracking_uri)
        self.worker = worker
        self.logger = MlflowLogger(
            run_dir,
            self.sink,
            interval_s=interval_s,
            log_every_n_steps=log_every_n_steps,
            owns_run=owns_run and worker is None,
            tail_system=worker is None,
            key_prefix=f"{worker}/" if worker else "",
            record_sync=worker is None,
            watch_verdicts=worker is None,
        )
        self.captures = captures
        self.profiler_config = profiler_config
        self.price_per_hour = price_per_hour
        self.log_run_dir = log_run_dir

    @classmethod
    def attach(cls, run_dir: str | os.PathLike[str], mlflow_run: Any = None, **kwargs: Any) -> MlflowSession | None:
        """Resolve the run and build a session (None when there is no run to log to).

        With ``worker`` (a non-chief rank), the run is the one the chief recorded in ``<run>/mlflow/run.json``,
        waited for up to ``wait_s`` seconds.
        """
        worker = kwargs.pop("worker", None)
        experiment = kwargs.pop("experiment", None)
        wait_s = float(kwargs.pop("wait_s", 30.0))
        if worker is not None:
            shared = _chief_run(Path(run_dir), wait_s)
            if shared is None:
                if _no_run_file(Path(run_dir)).exists():  # the chief logs to no run: neither does this rank
                    return None
                log.warning(
                    "trainspect: %s found no MLflow run of the chief in %s; MLflow logging is off for it",
                    worker,
                    run_dir,
                )
                return None
            kwargs.setdefault("tracking_uri", shared[1])
            return cls(run_dir, shared[0], worker=worker, **kwargs)
        resolved = resolve_run(
            mlflow_run,
            kwargs.get("tracking_uri"),
            run_name=Path(run_dir).name,
            experiment=None if experiment is None else str(experiment),
        )
        if resolved is None:
            _say_no_run(Path(run_dir))
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
        if self.worker is None:
            known = self.profiler_config is not _UNKNOWN
            self.logger.set_params(
                hook_params(
                    self.run_dir,
                    self.profiler_config if known else None,
                    self.logger.log_every_n_steps,
                    profiler_known=known,
                )
            )
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
        loader = loader_params(ctx.profiler)
        self.logger.set_params(loader)
        metrics = {**summary_metrics(summarize(ctx), loader), **per_worker_steps(ctx)}
        tmp = Path(tempfile.mkdtemp(prefix="trainspect-mlflow-"))
        verdicts_file = tmp / "verdicts.json"
        verdicts_file.write_text(
            json.dumps({"schema_version": 1, "verdicts": [v.to_dict() for v in ctx.verdicts]}, indent=1),
            encoding="utf-8",
        )
        artifacts = [(str(verdicts_file), "trainspect")]
        if report is not None and report.exists():
            artifacts.append((str(report), "trainspect"))
        ok = self.logger.close(
            metrics, {**verdict_tags(ctx.verdicts), **run_tags(self.run_dir)}, artifacts, self.log_run_dir
        )
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
        if not ok and not self.logger.warned:
            log.warning(
                "trainspect: the MLflow run %s is incomplete; upload later with: trainspect mlflow-sync %s --run-id %s",
                self.run_id,
                self.run_dir,
                self.run_id,
            )
        return ok
