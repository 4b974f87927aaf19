"""Evaluations as MLflow points: one point per evaluation, on the training step axis.

An evaluation is the run of EVAL (or PREDICT) steps between two training steps. MLflow gets, for each of its values
(``eval/<loss>``, ``eval/scalar/<name>`` …), the mean over its steps, at step = the number of training steps done
when it ran (the training step whose loss is computed with the weights it evaluated), so ``eval/loss`` and
``train/loss`` share one x axis. Single batches on EVAL step numbers would be neither.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence

from mlflow.entities import Metric

from trainspect.modes import ModeKeys

__all__ = ["EVALUATION_MODES", "EvaluationMeans", "evaluation_metrics", "train_steps_before"]

EVALUATION_MODES = frozenset({ModeKeys.EVAL, ModeKeys.PREDICT})


class EvaluationMeans:
    """Accumulates the evaluation being run and hands out its means once training resumes (or at close).

    Example:
        >>> ev = EvaluationMeans()
        >>> ev.train_step(9)
        []
        >>> ev.add({"eval/loss": 1.0}, 1000); ev.add({"eval/loss": 3.0}, 2000)
        >>> [(m.key, m.value, m.step) for m in ev.train_step(10)]
        [('eval/loss', 2.0, 10)]
    """

    def __init__(self, key_prefix: str = "") -> None:
        self.key_prefix = key_prefix
        self.train_steps = 0  # training steps done: the x of the evaluation being run
        self._sums: dict[str, list[float]] = {}  # key -> [sum, count]
        self._last_ms = 0

    def add(self, values: Mapping[str, float], wall_ms: int) -> None:
        """One evaluation step's values (``<mode>/<name>`` keys)."""
        for key, value in values.items():
            acc = self._sums.setdefault(key, [0.0, 0.0])
            acc[0] += value
            acc[1] += 1.0
        self._last_ms = max(self._last_ms, wall_ms)

    def train_step(self, mode_step: int) -> list[Metric]:
        """A training step arrived: the evaluation before it (if any) ends; return its points."""
        out = self.finish()
        self.train_steps = max(self.train_steps, int(mode_step) + 1)
        return out

    def finish(self) -> list[Metric]:
        """The means of the evaluation being run (empty when none); non-finite means are left out."""
        sums, self._sums = self._sums, {}
        step, prefix = self.train_steps, self.key_prefix
        means = ((k, s / n) for k, (s, n) in sums.items() if n)
        return [Metric(prefix + k, float(v), self._last_ms, step) for k, v in means if math.isfinite(v)]


def train_steps_before(train_globals: Sequence[int], train_mode_steps: Sequence[int], global_step: int) -> int:
    """The training steps done before ``global_step``: the last earlier training step's mode step + 1.

    Example:
        >>> train_steps_before([0, 1, 2, 5, 6], [0, 1, 2, 3, 4], 3)
        3
    """
    i = bisect.bisect_left(train_globals, global_step)
    return int(train_mode_steps[i - 1]) + 1 if i else 0


def evaluation_metrics(
    points: Iterable[tuple[str, int, float, int]], train_globals: Sequence[int], train_mode_steps: Sequence[int]
) -> list[Metric]:
    """Evaluation points ``(key, global step, value, wall ms)`` as one mean per key and evaluation.

    ``train_globals`` (sorted) and ``train_mode_steps``: the global and mode steps of the training steps.

    Example:
        >>> pts = [("eval/loss", 3, 1.0, 30), ("eval/loss", 4, 2.0, 40), ("eval/loss", 7, 5.0, 70)]
        >>> [(m.step, m.value, m.timestamp) for m in evaluation_metrics(pts, [0, 1, 2, 5, 6], [0, 1, 2, 3, 4])]
        [(3, 1.5, 40), (5, 5.0, 70)]
    """
    groups: dict[tuple[str, int], list[float]] = {}
    for key, global_step, value, wall_ms in points:
        x = train_steps_before(train_globals, train_mode_steps, global_step)
        acc = groups.setdefault((key, x), [0.0, 0.0, 0.0])
        acc[0] += value
        acc[1] += 1.0
        acc[2] = max(acc[2], float(wall_ms))
    out = [Metric(k, s / n, int(ts), x) for (k, x), (s, n, ts) in sorted(groups.items())]
    return [m for m in out if math.isfinite(m.value)]
