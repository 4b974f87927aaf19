"""LossNotDecreasing: a loss became NaN/Inf, rose above its best, or never went down."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar

import numpy as np

from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys, parse_mode
from trainspect.rules._common import (
    COLLECTION_NAMES,
    LITERAL,
    TENSOR_REGEX,
    Z_PROGRESS,
    Z_RISE,
    Window,
    fmt,
    is_training,
    mode_name,
)
from trainspect.rules.base import Param
from trainspect.rules.columns import Checks, ChecksBuilder, Columns
from trainspect.rules.loss_windows import WindowedSeries
from trainspect.rules.step_data import Check, StepData, as_float
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["LossNotDecreasing"]

MIN_WINDOWS = 5
"""Windows judged before a loss that never went down counts as stalled."""

MAX_TREND_POINTS = 5000
"""Losses kept for the trend test of a loss that has not gone down yet."""

FLOOR_FRACTION = 0.01
"""A rise smaller than this fraction of the first window's loss is ignored (a loss converged near zero)."""

INTERLEAVED_AFTER = 3
"""Returns to a series after other losses were recorded without it, before it counts as alternating (a GAN's)."""

_Result = tuple[float, bool, str, "str | Callable[[], str]"]
"""A judged loss: its value, whether it triggered, the tensor, and the detail (or what makes it when asked)."""


@dataclass
class _Track:
    history: deque[tuple[int, int, float]] = field(default_factory=deque)  # literal: (mode step, step, loss)
    next_eval: int | None = None
    best: float = math.inf
    series: WindowedSeries | None = None
    progressed: bool = False
    seen: list[tuple[int, float]] = field(default_factory=list)  # (step, loss) until the loss went down
    last_step: int | None = None
    returns: int = 0  # values that came after other losses were recorded without this one (see INTERLEAVED_AFTER)
    nonzero: bool = False  # a loss other than exactly 0 was seen (one of exactly 0 throughout is at its floor)


@dataclass(frozen=True)
class _At:
    """A chunk's columns as plain lists (indexing a list is much cheaper than indexing an array)."""

    modes: list[ModeKeys]
    steps: list[int]
    mode_steps: list[int]
    values: list[float]


@dataclass
class _State:
    tracks: dict[tuple[str, int], _Track] = field(default_factory=dict)
    last_loss_step: dict[int, int] = field(default_factory=dict)  # per mode: the last step that recorded a loss


class LossNotDecreasing(TensorRule):
    """Trigger when a loss is NaN/Inf, rises clearly above its best, or has not gone down since training began.

    trainspect's default judges windows of ``num_steps`` steps (per tensor and mode), not single values. It
    triggers when the loss level (the median of the last three window medians) lies above the lowest level so
    far by more than ``increase_threshold_percent`` % and 3 standard errors (of the minibatch noise and of the
    windows' drift); and when, after 5 windows of a training loss, no window has gone below the first by
    ``diff_percent`` % and 2 standard errors, nor does a line through the losses fall by 2 standard errors
    (the loss never decreased; evaluation losses are not judged so, since evaluation usually starts after some
    training). A loss that went down and stays at its floor is converged, not stalled; so is one of exactly 0
    throughout (a solved task, an auxiliary loss switched off: it cannot go down). NaN or infinite losses
    always trigger. A loss series that alternates with others (its steps take turns with another optimizer's, as
    the hook records a GAN's ``loss/Discriminator`` and ``loss/Generator``) is a game's, not a minimisation: its
    rises and stalls are not judged unless ``judge_interleaved=True``.

    With ``literal=True`` the rule is smdebug's: at a step s it compares the loss with the newest saved step
    p <= s - num_steps of the same mode, then waits until s + num_steps before judging again, and triggers
    when ``100 * (loss(p) - loss(s)) / |loss(p)| < diff_percent`` or the loss rose more than
    ``increase_threshold_percent`` % above the lowest loss judged so far (docs/rules.md). Heuristic: a
    plateau test as in early stopping (Prechelt, "Early stopping - but when?", 1998). With ``mode`` unset
    every mode is judged on its own steps. Steps in messages are global steps.

    Example:
        >>> LossNotDecreasing(num_steps="5").params["num_steps"]
        5
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        COLLECTION_NAMES,
        TENSOR_REGEX,
        Param("use_losses_collection", bool, True, "read the losses collection"),
        Param("num_steps", int, 10, "steps per window (literal: distance to the step compared with)", min=1),
        Param("diff_percent", float, 0.1, "smallest relative decrease (%) that counts as decreasing", min=0, max=100),
        Param("increase_threshold_percent", float, 5.0, "largest rise (%) above the best loss tolerated", min=0),
        Param("mode", str, None, "TRAIN, EVAL, PREDICT or GLOBAL (None: every mode separately)"),
        Param(
            "judge_interleaved",
            bool,
            False,
            "also judge rises and stalls of loss series that alternate with "
            "another optimizer's (a GAN's discriminator and generator)",
        ),
        LITERAL,
    )
    collection_names: list[str] | None
    tensor_regex: list[str] | None
    use_losses_collection: bool
    num_steps: int
    diff_percent: float
    increase_threshold_percent: float
    mode: str | None
    judge_interleaved: bool
    literal: bool
    recommendation: ClassVar[str] = (
        "The loss diverged, rose or never went down: lower the learning rate (or add warm-up/a schedule), check "
        "the data, labels and initialisation."
    )
    series_label: ClassVar[str] = "loss decrease over num_steps (%)"

    def validate(self) -> None:
        """Check ``mode`` and that something is selected."""
        if self.mode is not None:
            try:
                self.mode = parse_mode(self.mode).name
            except ValueError as exc:
                raise ConfigError(f"{self.name}: {exc}") from None
        if not (self.use_losses_collection or self.collection_names or self.tensor_regex):
            raise ConfigError(
                f"{self.name}: nothing to read; set use_losses_collection or collection_names/tensor_regex"
            )

    def selects(self) -> list[Select]:
        """Read the losses collection and/or the named collections and regexes."""
        colls = tuple(self.collection_names or ())
        if self.use_losses_collection:
            colls = ("losses", *colls)
        return [Select(collections=colls, regex=tuple(self.tensor_regex or ()))]

    def chart_threshold(self) -> float:
        """Return ``diff_percent``."""
        return float(self.diff_percent)

    def init_state(self) -> _State:
        """Per (tensor, mode): recent losses (windows) and the next step to judge."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Judge every loss due at this step."""
        if self.mode is not None and data.mode is not ModeKeys[self.mode]:
            return None
        if self.literal:
            results = [r for r in (self._literal(state, rec.name, data, as_float(rec)) for rec in data.role()) if r]
        else:
            at = (data.mode, data.step, data.mode_step)
            results = [r for r in (self._windowed(state, rec.name, at, as_float(rec)) for rec in data.role()) if r]
        if results:
            state.last_loss_step[int(data.mode)] = data.step
        return _combine(results)

    def check_columns(self, state: _State, cols: Columns) -> Checks | None:
        """Judge a chunk's losses in one loop over plain numbers (the windowed rule; literal is fed step by step)."""
        col = cols.role()
        if self.literal or col is None:
            return None if self.literal else ChecksBuilder().build()
        wanted = col.present if self.mode is None else col.present & (cols.codes == int(ModeKeys[self.mode]))
        at = _At(cols.modes, cols.steps.tolist(), cols.mode_steps.tolist(), col.values.tolist())
        idx = np.flatnonzero(wanted).tolist()
        points: list[int] = []
        results: list[_Result] = []
        k = 0
        while k < len(idx):
            i = idx[k]
            mode = at.modes[i]
            result = self._windowed(state, col.name, (mode, at.steps[i], at.mode_steps[i]), at.values[i])
            if result is not None:
                state.last_loss_step[int(mode)] = at.steps[i]
                points.append(i)
                results.append(result)
            k = self._add_quiet(state, col.name, at, idx, k + 1)
        return _checks(points, results)

    def _add_quiet(self, state: _State, name: str, at: _At, idx: list[int], k: int) -> int:
        """Add the steps from ``idx[k]`` on that neither close a window nor give a result; return where they end.

        They are the finite losses that follow a finite one of the same mode and window, in a series that does not
        alternate: :meth:`_windowed` would only append them (to the window, the noise history and the trend points).
        """
        last = idx[k - 1]
        mode, value = at.modes[last], at.values[last]
        track = state.tracks.get((name, int(mode)))
        if track is None or track.series is None or not math.isfinite(value) or self._alternates(track):
            return k
        size, bucket = track.series.size, at.mode_steps[last] // track.series.size
        end = k
        while end < len(idx):
            j = idx[end]
            if at.modes[j] is not mode or at.mode_steps[j] // size != bucket or not math.isfinite(at.values[j]):
                break
            end += 1
        if end == k:
            return k
        steps, values = [at.steps[j] for j in idx[k:end]], [at.values[j] for j in idx[k:end]]
        room = MAX_TREND_POINTS - len(track.seen)
        if not track.progressed and room > 0:
            track.seen.extend(zip(steps[:room], values[:room], strict=False))
        if not track.nonzero and any(values):
            track.nonzero = True
        track.series.extend_open(steps, values)
        track.last_step = steps[-1]
        return end

    def finish(self, state: _State, last: StepData | None) -> Check | None:
        """Judge the windows still open when the data ends."""
        if self.literal:
            return None
        results = []
        for (name, mode), track in state.tracks.items():
            if self._alternates(track):
                continue
            win = track.series.close() if track.series is not None else None
            if win is not None and win.count >= max(2, self.num_steps // 2):
                results.append(self._judge_window(track, name, ModeKeys(mode), win))
        return _combine(results)

    # --- trainspect: windows ---------------------------------------------------------------------------
    def _windowed(self, state: _State, name: str, at: tuple[ModeKeys, int, int], loss: float | None) -> _Result | None:
        """One loss of one step (``at``: its mode, global step and mode step)."""
        if loss is None:
            return None
        mode, step, mode_step = at
        if not math.isfinite(loss):
            own = state.tracks.get((name, int(mode)))
            if own is not None:  # the series' own step: going on after it is no return after another loss
                own.last_step = step
            return math.nan, True, name, f"{mode_name(mode)} {name} is {fmt(loss)} at step {step}: not finite"
        track = state.tracks.setdefault((name, int(mode)), _Track())
        last_any = state.last_loss_step.get(int(mode))
        if track.last_step is not None and last_any is not None and last_any > track.last_step:
            track.returns += 1  # other losses were recorded since this one's last value: steps alternate
        track.last_step = step
        if self._alternates(track):
            return (
                0.0,
                False,
                name,
                (
                    f"{mode_name(mode)} {name} alternates with another optimizer's loss series (steps take "
                    "turns, as a GAN's discriminator and generator): its rises and stalls are not judged "
                    "(judge_interleaved=True judges them); NaN/Inf still are"
                ),
            )
        if track.series is None:
            track.series = WindowedSeries(self.num_steps)
        if not track.progressed and len(track.seen) < MAX_TREND_POINTS:
            track.seen.append((step, loss))
        if loss != 0.0:
            track.nonzero = True
        win = track.series.add(mode_step, step, loss)
        return self._judge_window(track, name, mode, win) if win is not None else None

    def _alternates(self, track: _Track) -> bool:
        return track.returns >= INTERLEAVED_AFTER and not self.judge_interleaved

    def _judge_window(self, track: _Track, name: str, mode: ModeKeys, win: Window) -> _Result:
        series = track.series
        assert series is not None
        prev, first = series.previous, series.first
        what = f"{mode_name(mode)} {name}"
        if prev is None or first is None:
            series.remember(win)
            return 0.0, False, name, f"{what}: first window, median {fmt(win.mean)} over steps {win.steps()}"
        decrease = 100.0 * (prev.mean - win.mean) / abs(prev.mean) if prev.mean else 0.0
        diff = self.diff_percent
        if first.mean - win.mean > max(Z_PROGRESS * (first.se + win.se), abs(first.mean) * diff / 100.0):
            track.progressed = True
        elif not track.progressed and _falling(track.seen):
            track.progressed = True
        rise = self.increase_threshold_percent
        best = series.best
        assert best is not None
        why = ""
        if series.rose(win, rise, Z_RISE, FLOOR_FRACTION * abs(first.mean)):
            why = "rose"
        elif not track.progressed and track.nonzero and series.closed + 1 >= MIN_WINDOWS and is_training(mode):
            why = "stalled"
        detail = partial(
            _window_detail, what, (win, prev, best, first), why, (rise, diff, series.closed + 1, self.num_steps)
        )
        series.remember(win)
        return decrease, bool(why), name, detail

    # --- smdebug's literal rule ------------------------------------------------------------------------
    def _literal(self, state: _State, name: str, data: StepData, loss: float | None) -> _Result | None:
        if loss is None:
            return None
        n = self.num_steps
        track = state.tracks.setdefault((name, int(data.mode)), _Track())
        s = data.mode_step
        track.history.append((s, data.step, loss))
        while len(track.history) >= 2 and track.history[1][0] <= s - n:
            track.history.popleft()
        p_mode_step, p_step, p_loss = track.history[0]
        if p_mode_step > s - n or (track.next_eval is not None and s < track.next_eval):
            return None
        track.next_eval = s + n
        return self._compare(track, f"{mode_name(data.mode)} {name}", name, (p_step, p_loss), (data.step, loss))

    def _compare(self, track: _Track, what: str, name: str, prev: tuple[int, float], cur: tuple[int, float]) -> _Result:
        (p, lp), (s, ls) = prev, cur
        if not (math.isfinite(lp) and math.isfinite(ls)):
            return math.nan, True, name, f"{what} is {fmt(ls)} at step {s} (was {fmt(lp)} at step {p}): not finite"
        decrease = 100.0 * (lp - ls) / abs(lp) if lp != 0 else (0.0 if ls == lp else -100.0 * math.copysign(1, ls))
        limit = self.diff_percent
        detail = (
            f"{what} went from {fmt(lp)} (step {p}) to {fmt(ls)} (step {s}): "
            f"decrease {fmt(decrease)}% (threshold {fmt(limit)}%)"
        )
        triggered = decrease < limit
        rise = self.increase_threshold_percent
        rise_limit = track.best * (1 + rise / 100) if track.best > 0 else math.inf
        if math.isfinite(track.best) and ls > rise_limit:
            triggered = True
            detail += f"; {fmt(ls)} is above the best loss {fmt(track.best)} by more than {fmt(rise)}%"
        track.best = min(track.best, ls, lp)
        return decrease, triggered, name, detail

    def insufficient(self, state: _State) -> str:
        """Too few saved losses to compare over ``num_steps``."""
        return f"needs saved losses over at least two windows of num_steps={self.num_steps} steps"


def _window_detail(
    what: str, wins: tuple[Window, Window, Window, Window], why: str, limits: tuple[float, float, int, int]
) -> str:
    """The detail of a judged window (made only when shown: most windows' never are)."""
    win, prev, best, first = wins
    rise, diff, windows, size = limits
    detail = (
        f"{what}: median {fmt(win.mean)} over steps {win.steps()} (previous window {fmt(prev.mean)}, "
        f"best {fmt(best.mean)} at steps {best.steps()}, noise s.e. {fmt(win.se)})"
    )
    if why == "rose":
        detail += f": above the best by more than {fmt(rise)}% and {fmt(Z_RISE)} standard errors"
    elif why == "stalled":
        detail += (
            f": not below the first window ({fmt(first.mean)} at steps {first.steps()}) by {fmt(diff)}% "
            f"and {fmt(Z_PROGRESS)} standard errors after {windows} windows of {size}"
        )
    return detail


def _falling(points: list[tuple[int, float]]) -> bool:
    """Whether a least-squares line through the losses so far falls by more than ``Z_PROGRESS`` standard errors.

    A steady decrease that no two windows show beyond their noise still counts as progress.
    """
    if len(points) < 4:
        return False
    x = np.asarray([p[0] for p in points], dtype=np.float64)
    y = np.asarray([p[1] for p in points], dtype=np.float64)
    x = x - x.mean()
    sxx = float(x @ x)
    if sxx == 0:
        return False
    slope = float(x @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * x
    se = math.sqrt(float(resid @ resid) / (len(points) - 2) / sxx)
    return slope < 0 and (se == 0 or -slope / se > Z_PROGRESS)


def _combine(results: list[_Result]) -> Check | None:
    if not results:
        return None
    worst = min(results, key=lambda r: r[0] if math.isfinite(r[0]) else -math.inf)
    bad = tuple(name for _, trig, name, _ in results if trig)
    return Check(worst[0], bool(bad), bad, _text(next((d for _, t, _, d in results if t), worst[3])))


def _checks(points: list[int], results: list[_Result]) -> Checks:
    """The datapoints of single results (what :func:`_combine` makes of each), their details made when asked for."""
    n = len(points)
    triggered = np.fromiter((r[1] for r in results), dtype=bool, count=n)
    return Checks(
        np.array(points, dtype=np.int64),
        np.fromiter((r[0] for r in results), dtype=np.float64, count=n),
        triggered,
        lambda k: _text(results[k][3]),
        lambda k: (results[k][2],) if results[k][1] else (),
        np.ones(n, dtype=bool),
    )


def _text(detail: str | Callable[[], str]) -> str:
    return detail if isinstance(detail, str) else detail()
