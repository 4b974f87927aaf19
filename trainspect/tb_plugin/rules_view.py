"""Plain-data views of rule verdicts for the Rules tab: one table over every run, and one rule's detail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tensorboard import errors

from trainspect._json_safe import json_safe
from trainspect.modes import ModeKeys
from trainspect.rules.counts import RuleCounts
from trainspect.rules.verdict import Series, Verdict
from trainspect.store.job_events import read_stops, stop_text
from trainspect.store.tb_writer import tb_tag

__all__ = ["verdict_rows", "verdict_detail", "run_summary", "MAX_SERIES_POINTS"]

MAX_TENSORS = 50
"""The most tensors of one verdict listed with TensorBoard links."""

MAX_SERIES_POINTS = 2000
"""The most points of a watched series sent to the chart (trigger points are always kept)."""


def tensor_tag(tensor: str, mode: str | None) -> str:
    """The TensorBoard tag trainspect writes a tensor under (``tb_tag``): its name, ``eval/<name>`` outside TRAIN.

    Example:
        >>> tensor_tag("loss", "TRAIN"), tensor_tag("loss", "EVAL"), tensor_tag("loss", None)
        ('loss', 'eval/loss', 'loss')
    """
    try:
        return tb_tag(tensor, ModeKeys[mode]) if mode else tensor
    except KeyError:
        return tensor


def verdict_rows(run: str, verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """One table row per verdict of ``run`` (no series).

    Returns:
        Rows with ``run, rule, kind, status, triggers, datapoints, first_trigger_step, last_trigger_step,
        last_trigger_time, message, recommendation``
        and where the verdict comes from: ``mode`` (of its trigger steps), ``source`` (live, offline, report) and
        ``evaluated_at``. ``verdicts`` is the record's current set: each rule's latest verdict.
    """
    return [
        json_safe(
            {
                "run": run,
                "rule": v.rule,
                "kind": v.kind,
                "status": v.status.value,
                "triggers": v.triggers,
                "datapoints": v.datapoints,
                "first_trigger_step": v.first_trigger_step,
                "last_trigger_step": v.last_trigger_step,
                "last_trigger_time": v.last_trigger_time,
                "message": v.message,
                "recommendation": v.recommendation,
                "mode": v.mode,
                "source": v.source,
                "evaluated_at": v.evaluated_at,
            }
        )
        for v in verdicts
    ]


def run_summary(run: str, verdicts: list[Verdict], run_dir: Path) -> dict[str, Any]:
    """One run's rule counts and StopTraining stops.

    ``counts`` is :meth:`RuleCounts.to_dict` (its ``line`` is the sentence of the CLI and the report), ``stops``
    the stops of ``rules/stopped.json``, each with its ``text``.
    """
    stops = [
        {**json_safe({k: s.get(k) for k in ("rule", "step", "mode", "worker")}), "text": stop_text(s)}
        for s in read_stops(run_dir)
    ]
    return {"run": run, "counts": RuleCounts.of(verdicts).to_dict(), "stops": stops}


def _series(s: Series, max_points: int) -> dict[str, Any]:
    x = np.asarray(s.x, dtype=np.float64)
    y = np.asarray(s.y, dtype=np.float64)
    n = min(len(x), len(y))
    x, y = x[:n], y[:n]
    lookup = {float(a): float(b) for a, b in zip(x, y, strict=True)}
    trig_x = [float(t) for t in s.trigger_x]
    if n > max_points:
        keep = np.unique(np.linspace(0, n - 1, max_points).round().astype(int))
        x, y = x[keep], y[keep]
    return json_safe(
        {
            "label": s.label,
            "x_unit": s.x_unit,
            "x": x.tolist(),
            "y": y.tolist(),
            "points": n,
            "trigger_x": trig_x,
            "trigger_y": [lookup.get(t) for t in trig_x],
            "threshold": s.threshold,
        }
    )


def verdict_detail(run: str, verdicts: list[Verdict], rule: str | None) -> dict[str, Any]:
    """Everything about one rule's verdict in ``run``: parameters, message, recommendation, watched series.

    Raises:
        InvalidArgumentError: ``rule`` is missing.
        NotFoundError: the run has no verdict of that rule.
    """
    if not rule:
        raise errors.InvalidArgumentError("missing parameter 'rule'")
    match = next((v for v in verdicts if v.rule == rule), None)
    if match is None:
        raise errors.NotFoundError(f"run {run!r} has no verdict of rule {rule!r}")
    row = verdict_rows(run, [match])[0]
    row.update(
        json_safe(
            {
                "recommendation": match.recommendation,
                "parameters": match.parameters,
                "details": match.details,
                "tensors": list(match.tensors),
                "tensor_tags": [{"tensor": t, "tag": tensor_tag(t, match.mode)} for t in match.tensors[:MAX_TENSORS]],
                "workers": list(match.workers),
                "first_trigger_step": match.first_trigger_step,
                "first_trigger_time": match.first_trigger_time,
                "start_step": match.start_step,
                "end_step": match.end_step,
            }
        )
    )
    row["series"] = [_series(s, MAX_SERIES_POINTS) for s in match.series]
    return row
