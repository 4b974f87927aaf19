"""ClassImbalance: the label distribution is skewed, or a class is mostly mispredicted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from trainspect.rules._common import fmt
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule
from trainspect.step import TensorRecord

__all__ = ["ClassImbalance", "class_ids"]


@dataclass
class _State:
    labels: Counter[int] = field(default_factory=Counter)
    wrong: Counter[int] = field(default_factory=Counter)
    paired: Counter[int] = field(default_factory=Counter)

    @property
    def samples(self) -> int:
        return sum(self.labels.values())


def class_ids(rec: TensorRecord | None, argmax: bool, like: np.ndarray | None = None) -> np.ndarray | None:
    """Return a tensor's class ids as a flat int array (argmax over the last axis when asked or implied)."""
    if rec is None or rec.value is None:
        return None
    arr = np.asarray(rec.value)
    if argmax or (like is not None and arr.ndim == like.ndim + 1 and arr.ndim >= 2):
        arr = np.argmax(arr, axis=-1)
    return arr.astype(np.int64, copy=False).reshape(-1)


class ClassImbalance(TensorRule):
    """Trigger once ``samples`` labels were seen if classes are imbalanced or a class is mostly mispredicted.

    Counts accumulate over steps. Triggers when ``count(most frequent class) / count(least frequent)`` is
    above ``threshold_imbalance``, or when the share of mispredicted samples of some class is above
    ``threshold_misprediction``. Heuristic: He and Garcia, "Learning from imbalanced data", IEEE TKDE 2009.
    Labels and predictions are tensors the user saves (``hook.save_tensor``), matched by regex.

    Example:
        >>> ClassImbalance(samples="100").params["samples"]
        100
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("threshold_imbalance", float, 10.0, "largest acceptable ratio of class counts", min=1),
        Param(
            "threshold_misprediction", float, 0.7, "largest acceptable share of mispredictions per class", min=0, max=1
        ),
        Param("samples", int, 500, "labels to accumulate before judging", min=1),
        Param("argmax", bool, False, "take argmax of predictions over the class axis"),
        Param("labels_regex", list, [".*labels"], "regexes of the labels tensor"),
        Param("predictions_regex", list, [".*predictions"], "regexes of the predictions tensor"),
    )
    threshold_imbalance: float
    threshold_misprediction: float
    samples: int
    argmax: bool
    labels_regex: list[str]
    predictions_regex: list[str]
    recommendation: ClassVar[str] = (
        "Classes are imbalanced or some are mostly mispredicted: resample or reweight the classes, "
        "collect more data for rare classes, or use a class-balanced loss."
    )
    series_label: ClassVar[str] = "class count ratio (max/min)"

    def selects(self) -> list[Select]:
        """Labels and predictions tensors."""
        return [
            Select("labels", collections=("labels",), regex=tuple(self.labels_regex or ())),
            Select("predictions", collections=("predictions",), regex=tuple(self.predictions_regex or ())),
        ]

    def chart_threshold(self) -> float:
        """Return ``threshold_imbalance``."""
        return float(self.threshold_imbalance)

    def init_state(self) -> _State:
        """Accumulated counts per class."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Accumulate this step's labels and judge once enough were seen."""
        label_rec = next(iter(data.role("labels")), None)
        labels = class_ids(label_rec, False)
        if labels is None:
            return None
        state.labels.update(labels.tolist())
        pred_rec = next(iter(data.role("predictions")), None)
        preds = class_ids(pred_rec, self.argmax, np.asarray(label_rec.value) if label_rec else None)
        if preds is not None and preds.size == labels.size:
            state.paired.update(labels.tolist())
            state.wrong.update(labels[preds != labels].tolist())
        if state.samples < self.samples:
            return None
        return self._judge(state, tuple(r.name for r in (label_rec, pred_rec) if r is not None))

    def _judge(self, state: _State, names: tuple[str, ...]) -> Check:
        counts = state.labels
        ratio = max(counts.values()) / min(counts.values()) if len(counts) > 1 else 1.0
        findings = []
        if ratio > self.chart_threshold():
            big, small = counts.most_common()[0][0], counts.most_common()[-1][0]
            findings.append(
                f"class {big} has {fmt(ratio)}x the samples of class {small} (threshold {fmt(self.chart_threshold())})"
            )
        limit = self.threshold_misprediction
        for cls, total in sorted(state.paired.items()):
            share = state.wrong[cls] / total
            if share > limit:
                findings.append(f"{fmt(100 * share)}% of class {cls} mispredicted (threshold {fmt(100 * limit)}%)")
                break
        text = (
            "; ".join(findings)
            or f"class count ratio {fmt(ratio)} over {state.samples} labels (threshold {fmt(self.chart_threshold())})"
        )
        return Check(ratio, bool(findings), names if findings else (), text)

    def insufficient(self, state: _State) -> str:
        """Fewer labels than ``samples``."""
        return f"saw {state.samples} labels, needs samples={self.samples}"
