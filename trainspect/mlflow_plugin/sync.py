"""``trainspect mlflow-sync``: send an MLflow run what it misses of a run directory (e.g. after an outage).

Exactly what is missing: the metrics the hook's logger kept unsent, the loss steps it did not log, the system
metrics after its last point, and each ``(key, step)`` once, whatever the run already holds.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.entities import Metric

from trainspect.mlflow_plugin.divergence import DIVERGED_TAG, Divergence
from trainspect.mlflow_plugin.evaluations import EVALUATION_MODES, evaluation_metrics
from trainspect.mlflow_plugin.keys import safe_key, system_metrics, verdict_tags
from trainspect.mlflow_plugin.logger import sync_file
from trainspect.mlflow_plugin.params import hook_params, loader_params
from trainspect.mlflow_plugin.session import per_worker_steps, summary_metrics
from trainspect.mlflow_plugin.sink import MlflowSink
from trainspect.mlflow_plugin.unsent import read_unsent, unsent_files
from trainspect.modes import ModeKeys
from trainspect.profiler.arrays import SystemArrays, aggregate_buckets
from trainspect.profiler.metrics import CATALOGUE
from trainspect.report.summary import summarize
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import write_json_atomic

__all__ = ["sync_run", "plan_upload", "system_history", "loss_history"]

log = logging.getLogger(__name__)


def system_history(arrays: dict[str, SystemArrays], interval_s: float = 1.0) -> list[Metric]:
    """Every node's samples as MLflow system metrics, one point per ``interval_s``.

    Each bucket holds the mean of a metric's samples, or what the metric catalogue declares as its aggregation.
    """
    out: list[Metric] = []
    multi = len(arrays) > 1
    for node, arr in arrays.items():
        if not len(arr):
            continue
        bucket = ((arr.timestamps - arr.timestamps[0]) // interval_s).astype(np.int64)
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        means = aggregate_buckets(arr.values, starts, [CATALOGUE.describe(k).aggregate for k in arr.keys])
        ends = np.r_[starts[1:], len(arr)] - 1
        for step, (row, last) in enumerate(zip(means, ends, strict=True)):
            ts = int(arr.timestamps[last] * 1000)
            values = system_metrics(dict(zip(arr.keys, (float(v) for v in row), strict=True)), node if multi else None)
            out.extend(Metric(k, v, ts, step) for k, v in values.items())
    return out


def _train_axis(trial: Any) -> tuple[list[int], list[int]]:
    """The global steps (sorted) and mode steps of a Trial's saved TRAIN steps."""
    steps = sorted(trial.steps(mode=ModeKeys.TRAIN))
    return [trial.global_step(ModeKeys.TRAIN, s) for s in steps], steps


def loss_history(trial: Any, divergence: Divergence | None = None) -> list[Metric]:
    """The losses and scalars of a Trial as MLflow points (NaN/Inf noted in ``divergence``).

    TRAIN (and GLOBAL) steps as ``<mode>/<name>`` with the mode step; each evaluation (EVAL/PREDICT steps between
    training steps) as one mean on the training step axis (:mod:`~trainspect.mlflow_plugin.evaluations`).
    """
    out: list[Metric] = []
    evaluations: list[tuple[str, int, float, int]] = []
    losses = set(trial.tensor_names(collection="losses"))
    for name in sorted(losses | set(trial.tensor_names(collection="scalars"))):
        tensor = trial.tensor(name)
        for mode in trial.modes():
            if mode is ModeKeys.GLOBAL:
                continue
            key = safe_key(f"{mode.name.lower()}/{name}")
            for step in tensor.steps(mode):
                value = float(np.asarray(tensor.value(step, mode)).reshape(-1)[0])
                if divergence is not None:
                    divergence.observe({key: value}, step, (key,) if name in losses else ())
                gs = trial.global_step(mode, step)
                wall = int((trial.step_wall_time(gs) or 0.0) * 1000)
                if mode in EVALUATION_MODES:
                    evaluations.append((key, gs, value, wall))
                elif np.isfinite(value):
                    out.append(Metric(key, value, wall, int(step)))
    return out + evaluation_metrics(evaluations, *_train_axis(trial))


def plan_upload(
    present: Mapping[str, Mapping[int, int]],
    exact: Iterable[Metric] = (),
    by_step: Iterable[Metric] = (),
    series: Iterable[Metric] = (),
) -> list[Metric]:
    """The metrics still missing from a run, each ``(key, step)`` once.

    Args:
        present: what the run holds: ``{key: {step: timestamp}}``.
        exact: points kept exactly as they were to be sent (the unsent files); sent unless their step is there.
        by_step: points known by their step (losses, summary metrics); sent unless their step is there.
        series: time series rebuilt from the run directory (system metrics): only their points newer than the
            newest point of the key are sent, numbered on from its last step, so that a series logged live is
            continued, never sampled twice.

    Example:
        >>> [(m.step, m.value) for m in plan_upload({"a": {0: 10}}, [Metric("a", 1.0, 10, 0), Metric("a", 2.0, 20, 1)])]
        [(1, 2.0)]
    """
    seen = {k: dict(v) for k, v in present.items()}
    out: list[Metric] = []
    for m in itertools.chain(exact, by_step):
        steps = seen.setdefault(m.key, {})
        if m.step not in steps:
            steps[m.step] = m.timestamp
            out.append(m)
    for m in sorted(series, key=lambda m: (m.key, m.timestamp)):
        steps = seen.setdefault(m.key, {})
        if steps and m.timestamp <= max(steps.values()):
            continue
        step = max(steps) + 1 if steps else 0
        steps[step] = m.timestamp
        out.append(Metric(m.key, m.value, m.timestamp, step))
    return out


def _present(client: Any, run_id: str, keys: set[str]) -> dict[str, dict[int, int]]:
    """``{key: {step: timestamp}}`` of the run's metrics among ``keys``."""
    logged = set(client.get_run(run_id).data.metrics) & keys
    return {k: {m.step: m.timestamp for m in client.get_metric_history(run_id, k)} for k in sorted(logged)}


def _job_end(path: Path, recorded: Mapping[str, Any], trial: Any) -> tuple[str, int]:
    """The MLflow status and end time (ms) of the job: as the logger recorded it at close, else from the run."""
    if recorded.get("end_status") and recorded.get("end_time"):
        return str(recorded["end_status"]), int(float(recorded["end_time"]) * 1000)
    marker = RunLayout(path).end_marker
    if marker.exists():  # the hook closed, its MLflow logger did not record it: FINISHED at the end marker's time
        try:
            return "FINISHED", int(float(marker.read_text(encoding="utf-8").strip()) * 1000)
        except (OSError, ValueError):
            return "FINISHED", int(marker.stat().st_mtime * 1000)
    steps = trial.steps() if trial is not None else []
    last = trial.step_wall_time(steps[-1]) if steps else None
    return "KILLED", int((last or path.stat().st_mtime) * 1000)  # the job never closed its hook


def _recorded(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(sync_file(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{sync_file(path)} cannot be read: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{sync_file(path)}: expected a JSON object")
    return doc


def sync_run(
    run_dir: str | os.PathLike[str],
    run_id: str | None = None,
    tracking_uri: str | None = None,
    price_per_hour: float | None = None,
    artifacts: bool = False,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Send an MLflow run what it misses of a run directory, then end the run as the job ended.

    The metrics the hook's logger could not send (``<run>/mlflow/unsent*.jsonl``) go as they were, every loss
    step the run lacks is added, system metrics continue the logged series, and each ``(key, step)`` is sent
    once, so running it again sends nothing new. Then tags, verdicts, summary and report; a run still
    ``RUNNING`` ends with the job's status (``FINISHED``, or ``KILLED`` when the job never closed its hook) and
    end time.

    Args:
        run_dir: the run directory.
        run_id: the MLflow run (default: the one recorded in ``<run>/mlflow/run.json``).
        tracking_uri: the tracking URI (default: the recorded one, else MLflow's current one).
        price_per_hour: instance price, for the cost metric.
        artifacts: also upload the whole run directory.
        progress: called with the name of each stage (for a progress line).

    Returns:
        The run id.

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
        ValueError: no run id was given or recorded, or the tracking server does not answer.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{run_dir!s} is not a run directory")
    recorded = _recorded(path)
    run_id = run_id or recorded.get("run_id")
    if not run_id:
        raise ValueError(f"no --run-id given and none recorded in {sync_file(path)}")
    from trainspect.report.context import ReportContext

    stage = progress or (lambda _: None)
    sink = MlflowSink(str(run_id), tracking_uri or recorded.get("tracking_uri"))
    stage("checking the tracking server")
    try:
        sink.check_answers()  # seconds, before MLflow's client retries a dead server for minutes
    except ConnectionError as exc:
        raise ValueError(f"{exc}; start it (or pass --tracking-uri) and run mlflow-sync again") from None
    stage("reading the run")
    ctx = ReportContext.load(path, price_per_hour=price_per_hour)
    kept_files = unsent_files(path)
    same_run = run_id == recorded.get("run_id")  # the kept metrics continue the recorded run's series only
    status, end_ms = _job_end(path, recorded, ctx.trial)
    loader = loader_params(ctx.profiler)
    summary = {**summary_metrics(summarize(ctx), loader), **per_worker_steps(ctx)}
    exact = [m for f in kept_files for m in read_unsent(f)] if same_run else []
    divergence = Divergence()
    by_step = (loss_history(ctx.trial, divergence) if ctx.trial is not None else []) + [
        Metric(k, float(v), end_ms, 0) for k, v in summary.items() if np.isfinite(v)
    ]
    by_step += [Metric(k, v, end_ms, int(v)) for k, v in divergence.metric().items()]
    series = system_history(ctx.profiler.system)
    keys = {m.key for m in itertools.chain(exact, by_step, series)}
    stage("reading what MLflow holds")
    missing = plan_upload(_present(sink.client, str(run_id), keys), exact, by_step, series)
    stage(f"sending {len(missing)} metrics")
    held = sink.client.get_run(str(run_id)).data.tags
    tags = {**verdict_tags(ctx.verdicts), **({} if DIVERGED_TAG in held else divergence.tags())}  # live tags know more
    sink.log_params({**hook_params(path, profiler_known=False), **loader})
    sink.log(missing, tags)
    stage("uploading the report")
    _upload_files(sink, path, ctx, artifacts)
    for f in kept_files:  # the run now holds them (or, for another run, everything rebuilt): run.json names it
        f.unlink()
    info = sink.client.get_run(str(run_id)).info
    if info.status == "RUNNING":
        sink.client.set_terminated(str(run_id), status, end_time=end_ms)
    write_json_atomic(
        sync_file(path),
        {
            **recorded,
            "run_id": str(run_id),
            "tracking_uri": sink.tracking_uri,
            "complete": True,
            "unsent_metrics": 0,
            "synced": time.time(),
        },
    )
    log.info("trainspect: sent %d missing metrics to MLflow run %s", len(missing), run_id)
    return str(run_id)


def _upload_files(sink: MlflowSink, path: Path, ctx: Any, artifacts: bool) -> None:
    """The verdicts and the report (rewritten with what the run holds now), and the run directory if asked."""
    from trainspect.report.render import write_report

    try:
        report = write_report(path, context=ctx)
    except OSError as exc:  # a full disk: upload the report the hook wrote, if any
        log.warning("trainspect: could not rewrite the report of %s: %s", path, exc)
        report = RunLayout(path).report
    with tempfile.TemporaryDirectory(prefix="trainspect-mlflow-") as tmp:
        verdicts = Path(tmp) / "verdicts.json"
        verdicts.write_text(
            json.dumps({"schema_version": 1, "verdicts": [v.to_dict() for v in ctx.verdicts]}, indent=1),
            encoding="utf-8",
        )
        sink.log_artifact(verdicts, "trainspect")
    if report.exists():
        sink.log_artifact(report, "trainspect")
    if artifacts:
        sink.log_artifacts(path, "trainspect/run")
