"""LossNotDecreasing: a loss did not go down by ``diff_percent`` over ``num_steps`` steps."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys, parse_mode
from trainspect.rules._common import COLLECTION_NAMES, TENSOR_REGEX, fmt
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData, as_float
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["LossNotDecreasing"]


@dataclass
class _Track:
    history: deque[tuple[int, float]] = field(default_factory=deque)
    next_eval: int | None = None
    best: float = math.inf


@dataclass
class _State:
    tracks: dict[tuple[str, int], _Track] = field(default_factory=dict)
    max_seen: int = 0


class LossNotDecreasing(TensorRule):
    """Trigger when a loss is not lower than ``num_steps`` steps earlier by at least ``diff_percent`` %.

    At a step s where the loss was saved, the rule compares it with the newest saved step
    p <= s - num_steps of the same mode, then waits until s + num_steps before judging again (smdebug's
    schedule). It triggers when ``100 * (loss(p) - loss(s)) / |loss(p)| < diff_percent``, when the loss
    rose more than ``increase_threshold_percent`` % above the lowest loss judged so far, and always when
    either loss is NaN or infinite. This follows the documented intent of the rule (the spec's decision;
    smdebug's 2019 tests used another reading). Heuristic: a plateau test as in early stopping (Prechelt,
    "Early stopping - but when?", 1998). With ``mode`` unset every mode is judged on its own steps.

    Example:
        >>> LossNotDecreasing(num_steps="5").params["num_steps"]
        5
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        COLLECTION_NAMES,
        TENSOR_REGEX,
        Param("use_losses_collection", bool, True, "read the losses collection"),
        Param("num_steps", int, 10, "minimum distance to the step compared with", min=1),
        Param("diff_percent", float, 0.1, "smallest relative decrease (%) that counts as decreasing", min=0, max=100),
        Param("increase_threshold_percent", float, 5.0, "largest rise (%) above the best loss tolerated", min=0),
        Param("mode", str, None, "TRAIN, EVAL, PREDICT or GLOBAL (None: every mode separately)"),
    )
    recommendation: ClassVar[str] = (
        "The loss stalled or rose: tune the learning rate (often lower it, or add a schedule), check that "
        "labels match inputs, or stop training if it has converged."
    )
    series_label: ClassVar[str] = "loss decrease over num_steps (%)"

    def validate(self) -> None:
        """Check ``mode`` and that something is selected."""
        if self.params["mode"] is not None:
            try:
                self.params["mode"] = parse_mode(self.params["mode"]).name
            except ValueError as exc:
                raise ConfigError(f"{self.name}: {exc}") from None
        if not (self.params["use_losses_collection"] or self.params["collection_names"] or self.params["tensor_regex"]):
            raise ConfigError(
                f"{self.name}: nothing to read; set use_losses_collection or collection_names/tensor_regex"
            )

    def selects(self) -> list[Select]:
        """Read the losses collection and/or the named collections and regexes."""
        colls = tuple(self.params["collection_names"] or ())
        if self.params["use_losses_collection"]:
            colls = ("losses", *colls)
        return [Select(collections=colls, regex=tuple(self.params["tensor_regex"] or ()))]

    def threshold(self) -> float:
        """Return ``diff_percent``."""
        return float(self.params["diff_percent"])

    def init_state(self) -> _State:
        """Per (tensor, mode): recent losses and the next step to judge."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Judge every loss due at this step."""
        if self.params["mode"] is not None and data.mode is not ModeKeys[self.params["mode"]]:
            return None
        results = [r for r in (self._judge(state, rec.name, data, as_float(rec)) for rec in data.role()) if r]
        if not results:
            return None
        worst = min(results, key=lambda r: r[0] if math.isfinite(r[0]) else -math.inf)
        bad = tuple(name for _, trig, name, _ in results if trig)
        return Check(worst[0], bool(bad), bad, next((d for _, t, _, d in results if t), worst[3]))

    def _judge(
        self, state: _State, name: str, data: StepData, loss: float | None
    ) -> tuple[float, bool, str, str] | None:
        if loss is None:
            return None
        n = self.params["num_steps"]
        track = state.tracks.setdefault((name, int(data.mode)), _Track())
        s = data.mode_step
        track.history.append((s, loss))
        state.max_seen = max(state.max_seen, len(track.history))
        while len(track.history) >= 2 and track.history[1][0] <= s - n:
            track.history.popleft()
        p_step, p_loss = track.history[0]
        if p_step > s - n or (track.next_eval is not None and s < track.next_eval):
            return None
        track.next_eval = s + n
        return self._compare(track, name, (p_step, p_loss), (s, loss))

    def _compare(
        self, track: _Track, name: str, prev: tuple[int, float], cur: tuple[int, float]
    ) -> tuple[float, bool, str, str]:
        (p, lp), (s, ls) = prev, cur
        if not (math.isfinite(lp) and math.isfinite(ls)):
            return math.nan, True, name, f"{name} is {fmt(ls)} at step {s} (was {fmt(lp)} at step {p}): not finite"
        decrease = 100.0 * (lp - ls) / abs(lp) if lp != 0 else (0.0 if ls == lp else -100.0 * math.copysign(1, ls))
        limit = self.params["diff_percent"]
        detail = (
            f"{name} went from {fmt(lp)} (step {p}) to {fmt(ls)} (step {s}): "
            f"decrease {fmt(decrease)}% (threshold {fmt(limit)}%)"
        )
        triggered = decrease < limit
        rise = self.params["increase_threshold_percent"]
        rise_limit = track.best * (1 + rise / 100) if track.best > 0 else math.inf
        if math.isfinite(track.best) and ls > rise_limit:
            triggered = True
            detail += f"; {fmt(ls)} is above the best loss {fmt(track.best)} by more than {fmt(rise)}%"
        track.best = min(track.best, ls, lp)
        return decrease, triggered, name, detail

    def insufficient(self, state: _State) -> str:
        """Too few saved losses to compare over ``num_steps``."""
        return (
            f"needs two saved losses at least num_steps={self.params['num_steps']} steps apart (save losses more often)"
        )
