"""Confusion: the confusion matrix of a step is far from diagonal."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from trainspect.rules._common import fmt
from trainspect.rules.base import Param
from trainspect.rules.class_imbalance import class_ids
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["Confusion"]


class Confusion(TensorRule):
    """Trigger when a step's confusion matrix is far from diagonal.

    A column's diagonal share below ``min_diag`` or an off-diagonal share above ``max_off_diag`` triggers.

    ``M[label][prediction]`` counts the pairs of one step; column i (prediction i) is judged when it is not
    empty, as ``M[i][i] / Σ_j M[j][i]`` and ``M[j][i] / Σ_j M[j][i]`` (the column-sum form that smdebug's tests
    imply, i.e. per-class precision). Heuristic: Stehman, "Selecting and interpreting measures of thematic
    classification accuracy", 1997. Labels and predictions are chosen by name or collection.

    Example:
        >>> Confusion(min_diag="0.8").params["min_diag"]
        0.8
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("category_no", int, None, "number of classes (None: from the data)", min=1),
        Param("labels", str, "labels", "name of the labels tensor"),
        Param("predictions", str, "predictions", "name of the predictions tensor"),
        Param("labels_collection", str, "labels", "collection of the labels tensor"),
        Param("predictions_collection", str, "predictions", "collection of the predictions tensor"),
        Param("min_diag", float, 0.9, "smallest acceptable diagonal share of a column", min=0, max=1),
        Param("max_off_diag", float, 0.1, "largest acceptable off-diagonal share", min=0, max=1),
    )
    category_no: int | None
    labels: str
    predictions: str
    labels_collection: str
    predictions_collection: str
    min_diag: float
    max_off_diag: float
    recommendation: ClassVar[str] = (
        "Some classes are confused with others: inspect those classes' data and labels, rebalance them, "
        "or give the model more capacity or training."
    )
    series_label: ClassVar[str] = "min diagonal share"

    def selects(self) -> list[Select]:
        """Labels and predictions, by exact name or collection."""
        return [
            Select("labels", collections=(self.labels_collection,), regex=(_exact(self.labels),)),
            Select(
                "predictions",
                collections=(self.predictions_collection,),
                regex=(_exact(self.predictions),),
            ),
        ]

    def chart_threshold(self) -> float:
        """Return ``min_diag``."""
        return float(self.min_diag)

    def check(self, state: Any, data: StepData) -> Check | None:
        """Build this step's confusion matrix and judge its columns."""
        label_rec = next(iter(data.role("labels")), None)
        pred_rec = next(iter(data.role("predictions")), None)
        labels = class_ids(label_rec, False)
        like = np.asarray(label_rec.value) if label_rec is not None and label_rec.value is not None else None
        preds = class_ids(pred_rec, False, like)
        if labels is None or preds is None or labels.size != preds.size or labels.size == 0:
            return None
        k = self.category_no or int(max(labels.max(), preds.max())) + 1
        matrix = np.zeros((k, k), dtype=np.int64)
        np.add.at(matrix, (labels.clip(0, k - 1), preds.clip(0, k - 1)), 1)
        return self._judge(matrix, (label_rec.name, pred_rec.name))  # type: ignore[union-attr]

    def _judge(self, matrix: np.ndarray, names: tuple[str, ...]) -> Check:
        cols = matrix.sum(axis=0)
        used = np.flatnonzero(cols)
        share = matrix[:, used] / cols[used]
        diag = share[used, np.arange(used.size)]
        off = share.copy()
        off[used, np.arange(used.size)] = 0
        worst = int(np.argmin(diag))
        min_diag, max_off = float(diag[worst]), float(off.max()) if off.size else 0.0
        triggered = min_diag < self.min_diag or max_off > self.max_off_diag
        detail = (
            f"lowest diagonal share {fmt(min_diag)} (prediction {int(used[worst])}; "
            f"threshold {fmt(self.min_diag)}), "
            f"highest off-diagonal share {fmt(max_off)} (threshold {fmt(self.max_off_diag)})"
        )
        return Check(min_diag, triggered, names if triggered else (), detail)


def _exact(name: str) -> str:
    import re

    return f"(.*/)?{re.escape(name)}$"
