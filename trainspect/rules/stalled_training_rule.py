"""StalledTrainingRule: no new step arrived for ``threshold`` seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from trainspect.rules._common import fmt
from trainspect.rules.base import Param, Requirement
from trainspect.rules.columns import Checks, ChecksBuilder, Columns
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["StalledTrainingRule"]


@dataclass
class _State:
    last_time: float | None = None
    reported_for: float | None = None


class StalledTrainingRule(TensorRule):
    """Trigger when no new step arrives for ``threshold`` seconds.

    Measured between two saved steps, and (live, or while the run has not ended) since the last one.

    Heuristic: a job that stops producing steps is hung (deadlock, stuck data loader, lost worker); the
    watchdog idea of smdebug's rule. ``stop_training_on_fire`` adds a ``StopTraining`` action. Something
    must be saved more often than once per ``threshold`` (losses every step is plenty).

    Example:
        >>> StalledTrainingRule(threshold="60").params["threshold"]
        60.0
    """

    needs_tensors = False
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("threshold", float, 1800.0, "largest acceptable gap between saved steps (seconds)", min=0),
        Param("stop_training_on_fire", bool, False, "stop the training when the rule fires"),
        Param("training_job_name_prefix", str, None, "accepted for smdebug compatibility (unused locally)"),
    )
    threshold: float
    stop_training_on_fire: bool
    training_job_name_prefix: str | None
    recommendation: ClassVar[str] = (
        "Training stalled: look for a hung data loader, a deadlock between workers, or a lost node."
    )
    series_label: ClassVar[str] = "seconds since the previous saved step"

    def __init__(self, actions: Any = None, **params: Any) -> None:
        super().__init__(actions, **params)
        if self.stop_training_on_fire and not any(a.name == "StopTraining" for a in self.actions):
            from trainspect.rules.actions import StopTraining

            self.actions.append(StopTraining())

    def selects(self) -> list[Select]:
        """Every step counts, whatever it holds."""
        return [Select(all_tensors=True)]

    def requirements(self) -> list[Requirement]:
        """Something saved often: the losses."""
        return [Requirement("losses")]

    def chart_threshold(self) -> float:
        """Return ``threshold``."""
        return float(self.threshold)

    def init_state(self) -> _State:
        """The wall time of the last step."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Measure the gap since the previous step."""
        prev, state.last_time = state.last_time, data.wall_time
        if prev is None or not math.isfinite(data.wall_time) or not math.isfinite(prev):
            return None
        return self._judge(data.wall_time - prev, f"between steps (at step {data.step})")

    def check_columns(self, state: _State, cols: Columns) -> Checks | None:
        """Measure every gap of a chunk at once."""
        walls = cols.walls
        if not walls.size:
            return ChecksBuilder().build()
        prev = np.empty_like(walls)
        prev[0] = math.nan if state.last_time is None else state.last_time
        prev[1:] = walls[:-1]
        state.last_time = float(walls[-1])
        idx = np.flatnonzero(np.isfinite(prev) & np.isfinite(walls))
        gaps = walls[idx] - prev[idx]
        limit = self.chart_threshold()
        steps = cols.steps

        def detail(k: int) -> str:
            return self._judge(float(gaps[k]), f"between steps (at step {int(steps[idx[k]])})").detail

        return Checks(idx, gaps, gaps > limit, detail, lambda _k: ())

    def idle(self, state: _State, now: float, last: StepData | None) -> Check | None:
        """Measure the time since the last step; report each stall once."""
        if state.last_time is None or state.reported_for == state.last_time:
            return None
        gap = now - state.last_time
        if gap <= self.chart_threshold():
            return None
        state.reported_for = state.last_time
        return self._judge(gap, f"since the last step {last.step if last else '?'}")

    def _judge(self, gap: float, where: str) -> Check:
        limit = self.chart_threshold()
        return Check(gap, gap > limit, (), f"{fmt(gap)} s {where} (threshold {fmt(limit)} s)")

    def insufficient(self, state: Any) -> str:
        """Needs two steps with wall times."""
        return "needs two saved steps with wall times"
