"""``LiveTags``: what the MLflow run overview shows while a job trains: where values diverged, the live verdicts.

* A value that becomes NaN or Inf is not charted (MLflow charts finite values): where the first did is said in one
  tag, ``trainspect.diverged`` (details in ``trainspect.diverged.detail``), and the earliest such step is logged as
  the metric ``trainspect/first_nonfinite_step``, at once, whether or not that step's metrics are logged (see
  :class:`~trainspect.mlflow_plugin.divergence.Divergence`).
* The live rules' verdicts, read from the run's verdict record when it changed: ``trainspect.issues`` and
  ``trainspect.rule.<Rule>``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

from mlflow.entities import Metric

from trainspect.mlflow_plugin.divergence import Divergence
from trainspect.mlflow_plugin.keys import loss_keys, verdict_tags
from trainspect.rules.verdict import read_verdicts
from trainspect.step import StepRecord
from trainspect.store.layout import RunLayout

__all__ = ["LiveTags"]

log = logging.getLogger(__name__)


class LiveTags:
    """Tags and metrics of divergence and verdicts for one MLflow run.

    Args:
        run_dir: the run directory (its verdict record is watched).
        key_prefix: prefix of the metric keys (``worker_1/`` …).
    """

    def __init__(self, run_dir: str | os.PathLike[str], key_prefix: str = "") -> None:
        self.verdicts_path = RunLayout(Path(run_dir)).verdicts
        self.key_prefix = key_prefix
        self.divergence = Divergence(key_prefix)
        self._seen: tuple[int, int] | None = None
        self._sent: dict[str, str] = {}

    def diverged(self, rec: StepRecord, values: dict[str, float]) -> tuple[dict[str, str], list[Metric], list[str]]:
        """The tags and metrics to send for the values that became NaN/Inf at this step, and their keys.

        All three are empty when none did; the keys carry the key prefix.
        """
        prefix = self.key_prefix
        before = self.divergence.earliest_step
        if all(map(math.isfinite, values.values())):
            return {}, [], []
        losses = {prefix + k for k in loss_keys(rec)}
        new = self.divergence.observe({prefix + k: v for k, v in values.items()}, rec.mode_step, losses)
        if not new:
            return {}, [], []
        metrics = []
        if before is None:  # the first divergence of the run
            ts = int(rec.wall_time * 1000) if rec.wall_time else int(time.time() * 1000)
            metrics = [Metric(k, v, ts, int(rec.mode_step)) for k, v in self.divergence.metric().items()]
        return self.divergence.tags(), metrics, new

    def verdicts(self) -> dict[str, str]:
        """The verdict tags when the record changed since the last call and they differ (else empty)."""
        try:
            st = self.verdicts_path.stat()
            seen = (st.st_mtime_ns, st.st_size)
            if seen == self._seen:
                return {}
            self._seen = seen
            tags = verdict_tags(read_verdicts(self.verdicts_path))
        except (OSError, ValueError) as exc:  # not written yet, or being replaced: next time
            log.debug("trainspect: verdicts not read for MLflow: %s", exc)
            return {}
        if tags == self._sent:
            return {}
        self._sent = tags
        return tags
