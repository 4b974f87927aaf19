"""Metric keys: trainspect's system metrics under MLflow's own ``system/`` names, step records as metrics."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from trainspect.profiler.metrics import CATALOGUE
from trainspect.reductions import format_key
from trainspect.step import StepRecord

__all__ = [
    "system_key",
    "system_metrics",
    "step_metrics",
    "step_values",
    "loss_keys",
    "safe_key",
    "issues_tags",
    "verdict_tags",
    "run_tags",
    "MAX_KEY_LENGTH",
    "ISSUES_TAG",
    "COUNTS_TAG",
    "GAPS_TAG",
    "NAN_ORIGIN_TAG",
]

MAX_KEY_LENGTH = 250
ISSUES_TAG = "trainspect.issues"
COUNTS_TAG = "trainspect.rule_counts"
GAPS_TAG = "trainspect.gaps"
NAN_ORIGIN_TAG = "trainspect.nan_origin"
"""The run tag listing the rules whose current verdict is IssuesFound (empty when none)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /:]")


def safe_key(name: str) -> str:
    """An MLflow-valid metric key (allowed characters only, at most 250 characters).

    Example:
        >>> safe_key("train/<img src=x>")
        'train/_img src_x_'
    """
    key = _UNSAFE.sub("_", name).replace("//", "/").strip("/") or "_"
    return key[:MAX_KEY_LENGTH]


def system_key(key: str, node: str | None = None) -> tuple[str, float]:
    """The MLflow key of a trainspect system metric and the factor applied to its value.

    MLflow's own names where the metric catalogue (:mod:`trainspect.profiler.metrics`) declares one
    (``system/cpu_utilization_percentage``, ``system/gpu_0_utilization_percentage`` …), else ours in the same
    namespace; ``node`` adds ``system/<node>/`` as MLflow does for multi-node jobs.

    Example:
        >>> system_key("gpu0_utilization_percent")
        ('system/gpu_0_utilization_percentage', 1.0)
        >>> system_key("cpu3_utilization_percent", "algo-2")
        ('system/algo-2/cpu_3_utilization_percentage', 1.0)
    """
    prefix = f"system/{safe_key(node)}/" if node else "system/"
    metric = CATALOGUE.describe(key)
    if metric.mlflow is None:
        return prefix + safe_key(key), 1.0
    return prefix + metric.mlflow, metric.mlflow_factor


def system_metrics(means: Mapping[str, float], node: str | None = None) -> dict[str, float]:
    """MLflow system metrics from one node's mean sample (``cpu_utilization_percentage`` derived from the cores).

    Example:
        >>> system_metrics({"cpu0_utilization_percent": 10.0, "cpu1_utilization_percent": 30.0})
        {'system/cpu_0_utilization_percentage': 10.0, 'system/cpu_1_utilization_percentage': 30.0, \
'system/cpu_utilization_percentage': 20.0}
    """
    out: dict[str, float] = {}
    cores = []
    for key, value in means.items():
        if value is None or not math.isfinite(value):
            continue
        name, factor = system_key(key, node)
        out[name] = float(value) * factor
        if key.startswith("cpu") and key.endswith("_utilization_percent") and key[3:4].isdigit():
            cores.append(float(value))
    total, _ = system_key("cpu_utilization_percent", node)
    if total not in out and cores:
        out[total] = sum(cores) / len(cores)
    return out


def step_values(record: StepRecord) -> dict[str, float]:
    """Scalar tensors and reductions of a step as ``<mode>/<name>[/<reduction>]`` keys, NaN and Inf included."""
    mode = record.mode.name.lower()
    out: dict[str, float] = {}
    for name, t in record.tensors.items():
        if t.value is not None and t.value.size == 1:
            out[safe_key(f"{mode}/{name}")] = float(t.value.reshape(-1)[0])
        for (red, absolute), v in t.reductions.items():
            if v is not None:
                out[safe_key(f"{mode}/{name}/{format_key(red, absolute)}")] = float(v)
    return out


def step_metrics(record: StepRecord) -> dict[str, float]:
    """The finite values of :func:`step_values` (MLflow charts finite values).

    Example:
        >>> import numpy as np
        >>> from trainspect.modes import ModeKeys
        >>> from trainspect.step import TensorRecord
        >>> rec = StepRecord(ModeKeys.TRAIN, 3, 3, 0.0, "w", {"loss": TensorRecord("loss", np.array(0.5))})
        >>> step_metrics(rec)
        {'train/loss': 0.5}
    """
    return {k: v for k, v in step_values(record).items() if math.isfinite(v)}


def loss_keys(record: StepRecord) -> set[str]:
    """The :func:`step_values` keys of a step's losses (tensors of the ``losses`` collection).

    Example:
        >>> import numpy as np
        >>> from trainspect.modes import ModeKeys
        >>> from trainspect.step import TensorRecord
        >>> t = TensorRecord("loss", np.array(0.5), collections=frozenset({"losses"}))
        >>> loss_keys(StepRecord(ModeKeys.EVAL, 3, 3, 0.0, "w", {"loss": t}))
        {'eval/loss'}
    """
    mode = record.mode.name.lower()
    return {safe_key(f"{mode}/{n}") for n, t in record.tensors.items() if "losses" in (t.collections or ())}


def verdict_tags(verdicts: Iterable[Any]) -> dict[str, str]:
    """Tags of the verdicts: ``trainspect.rule.<Rule>`` = status, ``trainspect.issues``, ``trainspect.rule_counts``.

    ``trainspect.rule_counts`` is the count line every screen shows (:class:`trainspect.rules.counts.RuleCounts`);
    rule names are in full.

    Example:
        >>> from trainspect.rules.verdict import Status, Verdict
        >>> verdict_tags([Verdict("VanishingGradient", Status.ISSUES_FOUND)])  # doctest: +NORMALIZE_WHITESPACE
        {'trainspect.rule.VanishingGradient': 'IssuesFound', 'trainspect.issues': 'VanishingGradient',
         'trainspect.rule_counts': '1 rule: 1 judged, 1 found issues (VanishingGradient)'}
    """
    from trainspect.rules.counts import RuleCounts

    verdicts = list(verdicts)
    tags = {**{f"trainspect.rule.{v.rule}": str(v.status) for v in verdicts}, **issues_tags(verdicts)}
    if verdicts:
        tags[COUNTS_TAG] = RuleCounts.of(verdicts).line()
    return tags


def issues_tags(verdicts: Iterable[Any]) -> dict[str, str]:
    """The summary tag: ``trainspect.issues`` = the rules with issues, sorted and comma-separated ("" when none).

    Example:
        >>> from trainspect.rules.verdict import Status, Verdict
        >>> issues_tags([Verdict("LossNotDecreasing", Status.ISSUES_FOUND), Verdict("DeadRelu", Status.NO_DATA),
        ...              Verdict("ExplodingTensor", Status.ISSUES_FOUND)])
        {'trainspect.issues': 'ExplodingTensor, LossNotDecreasing'}
    """
    names = sorted({str(v.rule) for v in verdicts if getattr(v, "issues_found", False)})
    return {ISSUES_TAG: ", ".join(names)}


def run_tags(run_dir: Any) -> dict[str, str]:
    """What the run directory says beside the verdicts, as tags ({} when there is nothing to say).

    ``trainspect.gaps``: what the writer did not write when it fell behind training (:mod:`trainspect.store.gaps`:
    losses and scalars are always written; raw tensor values may not be). ``trainspect.nan_origin``: where the
    first NaN/Inf came from (:mod:`trainspect.store.nan_origins`).
    """
    from trainspect.store.gaps import gaps_summary, read_gaps
    from trainspect.store.nan_origins import describe, first_origins, read_origins

    tags = {}
    text = gaps_summary(read_gaps(run_dir))
    if text:
        tags[GAPS_TAG] = text
    origins = first_origins(read_origins(run_dir))
    if origins:
        tags[NAN_ORIGIN_TAG] = "; ".join(describe(o) for o in origins)[:5000]
    return tags
