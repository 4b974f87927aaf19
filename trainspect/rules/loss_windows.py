"""Windows of a noisy loss series: the building block of the noise-aware loss rules (private).

Minibatch losses jump from step to step, so judging two single values compares noise. The loss rules
instead group a series into windows of ``size`` consecutive steps of one mode and compare window medians
(a spike or two does not move them), with the standard error estimated from the series' own step-to-step
noise (:func:`noise_sigma`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from trainspect.rules._common import Window, finite_noise_sigma, median_of, noise_sigma

__all__ = ["WindowedSeries"]

LEVEL = 3
"""Windows whose medians make one loss level (see :meth:`WindowedSeries.rose`)."""

MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)
"""The standard error of a median is this much larger than that of a mean (normal noise)."""


@dataclass
class WindowedSeries:
    """Collects ``(mode step, global step, value)`` and hands out a :class:`Window` each time one closes.

    Args:
        size: mode steps per window.
        history: how many recent values the noise estimate uses (default: eight windows' worth).

    Example:
        >>> s = WindowedSeries(2)
        >>> [s.add(i, i, v) for i, v in enumerate([1.0, 1.0, 0.5])][-1].mean
        1.0
    """

    size: int
    history: int = 0
    _values: list[float] = field(default_factory=list)
    _steps: list[int] = field(default_factory=list)
    _bucket: int | None = None
    _recent: deque[float] = field(default_factory=deque)
    first: Window | None = None
    best: Window | None = None
    previous: Window | None = None
    closed: int = 0
    _medians: deque[float] = field(default_factory=lambda: deque(maxlen=8))
    best_level: float = math.inf

    def __post_init__(self) -> None:
        self._recent = deque(self._recent, maxlen=self.history or 8 * self.size)  # the newest values only

    def add(self, mode_step: int, step: int, value: float) -> Window | None:
        """Add a finite value; return the window that this value closed, if any."""
        bucket = mode_step // self.size
        done = self.close() if self._bucket is not None and bucket != self._bucket and self._values else None
        self._bucket = bucket
        self._values.append(value)
        self._steps.append(step)
        self._recent.append(value)
        return done

    def extend_open(self, steps: list[int], values: list[float]) -> None:
        """Add finite values to the open window (the caller knows that none of them starts a new one)."""
        self._values.extend(values)
        self._steps.extend(steps)
        self._recent.extend(values)

    def close(self) -> Window | None:
        """Close the open window (at the end of the data); return it, or None when it is empty."""
        if not self._values:
            return None
        recent = list(self._recent)
        before = recent[: len(recent) - len(self._values)]  # the noise so far: a window that runs away cannot hide
        sigma = finite_noise_sigma(before if len(before) >= 3 else recent) * MEDIAN_EFFICIENCY  # (finite: see add)
        win = Window(median_of(self._values), len(self._values), sigma, self._steps[0], self._steps[-1])
        self._values, self._steps = [], []
        return win

    def remember(self, win: Window) -> None:
        """Record a judged window as the previous one (and the first and best so far)."""
        self.closed += 1
        if self.first is None:
            self.first = win
        if self.best is None or win.mean < self.best.mean:
            self.best = win
        self.previous = win
        self._medians.append(win.mean)
        self.best_level = min(self.best_level, self._level())

    def _level(self, extra: float | None = None) -> float:
        """The loss level: the median of the last ``LEVEL`` window medians (one lucky or unlucky window is ignored)."""
        recent = list(self._medians)[-(LEVEL - (extra is not None)) :] + ([extra] if extra is not None else [])
        return median_of(recent)

    def rose(self, win: Window, percent: float, z: float, floor: float = 0.0) -> bool:
        """Whether ``win`` lies above the best window by more than ``percent`` %, ``z`` standard errors, ``floor``.

        Levels are compared, not single windows: the median of the last three window medians (this one included)
        against the lowest such level so far, so one lucky or unlucky window decides nothing. The standard errors
        are those of the windows and the drift of the recent windows' medians from one window to the next (data
        order and momentum make windows wander more than independent noise would).
        """
        best = self.best
        if best is None or not math.isfinite(self.best_level):
            return False
        gap = self._level(win.mean) - self.best_level
        drift = noise_sigma(list(self._medians)) if len(self._medians) >= 3 else 0.0  # windows wander too
        margin = max(abs(self.best_level) * percent / 100.0, z * (win.se + best.se), z * drift, floor)
        return gap > margin and math.isfinite(gap)
