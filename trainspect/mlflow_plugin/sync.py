"""``trainspect mlflow-sync``: upload a run directory to an MLflow run after the fact (e.g. after an outage)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.entities import Metric

from trainspect.mlflow_plugin.keys import safe_key, system_metrics
from trainspect.mlflow_plugin.logger import MlflowLogger, sync_file
from trainspect.mlflow_plugin.session import MlflowSession
from trainspect.modes import ModeKeys
from trainspect.profiler.arrays import SystemArrays

__all__ = ["sync_run", "system_history", "loss_history"]

log = logging.getLogger(__name__)


def system_history(arrays: dict[str, SystemArrays], interval_s: float = 1.0) -> list[Metric]:
    """Every node's samples as MLflow system metrics, one point per ``interval_s`` (bucket means)."""
    out: list[Metric] = []
    multi = len(arrays) > 1
    for node, arr in arrays.items():
        if not len(arr):
            continue
        bucket = ((arr.timestamps - arr.timestamps[0]) // interval_s).astype(np.int64)
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        vals = arr.values.astype(np.float64)
        ok = np.isfinite(vals)
        sums = np.add.reduceat(np.where(ok, vals, 0.0), starts, axis=0)
        counts = np.add.reduceat(ok.astype(np.int64), starts, axis=0)
        with np.errstate(all="ignore"):
            means = sums / counts
        ends = np.r_[starts[1:], len(arr)] - 1
        for step, (row, last) in enumerate(zip(means, ends, strict=True)):
            ts = int(arr.timestamps[last] * 1000)
            values = system_metrics(dict(zip(arr.keys, (float(v) for v in row), strict=True)), node if multi else None)
            out.extend(Metric(k, v, ts, step) for k, v in values.items())
    return out


def loss_history(trial: Any) -> list[Metric]:
    """The losses of a Trial as ``<mode>/<name>`` metrics with the mode step."""
    out: list[Metric] = []
    for name in trial.tensor_names(collection="losses"):
        tensor = trial.tensor(name)
        for mode in trial.modes():
            if mode is ModeKeys.GLOBAL:
                continue
            key = safe_key(f"{mode.name.lower()}/{name}")
            for step in tensor.steps(mode):
                value = float(np.asarray(tensor.value(step, mode)).reshape(-1)[0])
                if np.isfinite(value):
                    wall = trial.step_wall_time(trial.global_step(mode, step)) or 0.0
                    out.append(Metric(key, value, int(wall * 1000), int(step)))
    return out


def sync_run(
    run_dir: str | os.PathLike[str],
    run_id: str | None = None,
    tracking_uri: str | None = None,
    price_per_hour: float | None = None,
    artifacts: bool = False,
) -> str:
    """Upload a run directory's system metrics, losses, verdicts, summary and report to an MLflow run.

    Args:
        run_dir: the run directory.
        run_id: the MLflow run (default: the one recorded in ``<run>/mlflow/run.json``).
        tracking_uri: the tracking URI (default: the recorded one, else MLflow's current one).
        price_per_hour: instance price, for the cost metric.
        artifacts: also upload the whole run directory.

    Returns:
        The run id.

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
        ValueError: no run id was given or recorded, or the upload failed.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{run_dir!s} is not a run directory")
    recorded: dict[str, Any] = {}
    if sync_file(path).exists():
        recorded = json.loads(sync_file(path).read_text(encoding="utf-8"))
    run_id = run_id or recorded.get("run_id")
    if not run_id:
        raise ValueError(f"no --run-id given and none recorded in {sync_file(path)}")
    from trainspect.report.context import ReportContext
    from trainspect.report.render import render_report

    ctx = ReportContext.load(path, price_per_hour=price_per_hour)
    session = MlflowSession(path, run_id, tracking_uri or recorded.get("tracking_uri"), price_per_hour=price_per_hour,
                            log_run_dir=artifacts)  # fmt: skip
    session.logger = MlflowLogger(path, session.sink, max_buffer=10_000_000, tail_system=False)
    session.logger.add_metrics(system_history(ctx.profiler.system))
    if ctx.trial is not None:
        session.logger.add_metrics(loss_history(ctx.trial))
    report = path / "report.html"
    report.write_text(render_report(ctx), encoding="utf-8")
    if not session.close(report=report, context=ctx):
        raise ValueError(f"could not upload to MLflow run {run_id} at {session.sink.tracking_uri}")
    return str(run_id)
