"""``Divergence``: where a run's values first became NaN or Inf, as one readable run tag (and one JSON detail tag).

MLflow charts finite values only, so a loss that becomes NaN just stops. The logger logs the last finite value of
each such series (whatever the logging interval) and the diverging step's finite values; this class says in words
where it happened:

* ``trainspect.diverged`` = ``"loss NaN from step 52 (first non-finite: loss, CrossEntropyLoss_output_0)"``;
* ``trainspect.diverged.detail`` = JSON (at most 5,000 characters): mode, step, the last finite step, and the
  first non-finite step of each value (the earliest 50);
* the metric ``trainspect/first_nonfinite_step`` = the earliest such step, logged at that step.

Two tags whatever the number of values: tag keys stay short (MLflow truncates keys at 250 characters).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping

__all__ = ["Divergence", "DIVERGED_TAG", "DETAIL_TAG", "FIRST_NONFINITE_METRIC", "MAX_DETAIL_CHARS"]

DIVERGED_TAG = "trainspect.diverged"
"""The run tag saying in words which value became NaN/Inf first, and at which step."""
DETAIL_TAG = "trainspect.diverged.detail"
"""The run tag with the details as JSON (the first non-finite step of each value)."""
FIRST_NONFINITE_METRIC = "trainspect/first_nonfinite_step"
"""The metric = the earliest step where a logged value became NaN/Inf (logged at that step)."""
MAX_DETAIL_CHARS = 5000
_NAMES_IN_TAG = 3
_VALUES_IN_DETAIL = 50


def _kind(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Inf" if value > 0 else "-Inf"


class Divergence:
    """The first non-finite step of each logged value (``<mode>/<name>`` keys), and the tags that say it.

    Args:
        key_prefix: prefix of the keys (``worker_1/`` for the other workers of a distributed job).

    Example:
        >>> d = Divergence()
        >>> d.observe({"train/loss": float("nan"), "train/acc": 0.5}, 7, losses={"train/loss"})
        ['train/loss']
        >>> d.observe({"train/loss": float("inf")}, 8)
        []
        >>> d.tags()["trainspect.diverged"]
        'loss NaN from step 7 (first non-finite: loss)'
    """

    def __init__(self, key_prefix: str = "") -> None:
        self.key_prefix = key_prefix
        self.first: dict[str, tuple[int, str]] = {}  # key -> (step, "NaN"/"Inf"/"-Inf")
        self.losses: set[str] = set()

    def observe(self, values: Mapping[str, float], step: int, losses: Iterable[str] = ()) -> list[str]:
        """Note one step's values; return the keys that became non-finite for the first time.

        ``losses``: which of the keys are losses (named first in the tag).
        """
        new = [k for k, v in values.items() if k not in self.first and not math.isfinite(v)]
        for key in new:
            self.first[key] = (int(step), _kind(values[key]))
        if new:
            self.losses.update(k for k in losses if k in values)
        return new

    @property
    def earliest_step(self) -> int | None:
        """The earliest step where a value became non-finite (None when all stayed finite)."""
        return min((s for s, _ in self.first.values()), default=None)

    def _order(self) -> list[str]:
        return sorted(self.first, key=lambda k: (self.first[k][0], k not in self.losses, k))

    def _short(self, key: str) -> str:
        name = key[len(self.key_prefix) :] if key.startswith(self.key_prefix) else key
        return name.split("/", 1)[1] if "/" in name else name

    def summary(self) -> str:
        """The readable sentence of ``trainspect.diverged`` ("" when every value stayed finite)."""
        if not self.first:
            return ""
        order = self._order()
        losses = [k for k in order if k in self.losses]
        lead_key = losses[0] if losses else order[0]
        step, kind = self.first[lead_key]
        mode = (lead_key[len(self.key_prefix) :] if lead_key.startswith(self.key_prefix) else lead_key).split("/")[0]
        what = "loss" if losses else self._short(lead_key)
        where = f"step {step}" if mode == "train" else f"{mode} step {step}"
        lead = f"{self.key_prefix}{'' if mode == 'train' else mode + ' '}{what}"
        earliest = self.first[order[0]][0]
        first = [k for k in order if self.first[k][0] == earliest]
        names = ", ".join(self._short(k) for k in first[:_NAMES_IN_TAG])
        more = f" +{len(first) - _NAMES_IN_TAG} more" if len(first) > _NAMES_IN_TAG else ""
        at = "" if earliest == step else f" at step {earliest}"
        return f"{lead} {kind} from {where} (first non-finite{at}: {names}{more})"

    def detail(self) -> str:
        """The JSON of ``trainspect.diverged.detail`` (at most :data:`MAX_DETAIL_CHARS` characters)."""
        order = self._order()
        step = self.first[order[0]][0]
        doc = {
            "step": step,
            "last_finite_step": step - 1,
            "values": len(order),
            "first_nonfinite": {
                k: {"step": self.first[k][0], "value": self.first[k][1]} for k in order[:_VALUES_IN_DETAIL]
            },
        }
        text = json.dumps(doc, separators=(",", ":"))
        while len(text) > MAX_DETAIL_CHARS and doc["first_nonfinite"]:
            first = doc["first_nonfinite"]
            assert isinstance(first, dict)
            first.pop(next(reversed(first)))
            text = json.dumps(doc, separators=(",", ":"))
        return text

    def tags(self) -> dict[str, str]:
        """The two run tags (empty when every value stayed finite)."""
        if not self.first:
            return {}
        return {DIVERGED_TAG: self.summary()[:5000], DETAIL_TAG: self.detail()}

    def metric(self) -> dict[str, float]:
        """``trainspect/first_nonfinite_step`` = the earliest non-finite step (empty when none)."""
        step = self.earliest_step
        return {} if step is None else {self.key_prefix + FIRST_NONFINITE_METRIC: float(step)}
