"""The noise statistics the loss rules share: medians, step-to-step noise, windows and the level a rise is judged by."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainspect.modes import ModeKeys
from trainspect.rules._common import (
    Window,
    finite_noise_sigma,
    fmt,
    median_of,
    mode_name,
    noise_sigma,
    per_unit,
    window_of,
)
from trainspect.rules.loss_windows import MEDIAN_EFFICIENCY, WindowedSeries


def test_noise_is_the_scaled_median_step_over_root_two() -> None:
    values = [1.0, 1.5, 1.0, 2.0, 1.0]  # steps 0.5, 0.5, 1, 1: median 0.75
    expected = 1.4826 * 0.75 / math.sqrt(2.0)
    assert noise_sigma(values) == pytest.approx(expected)
    assert noise_sigma(np.array(values)) == pytest.approx(expected)  # the array path gives the same
    assert noise_sigma([*values, math.nan]) == pytest.approx(expected)  # NaN left out
    assert finite_noise_sigma(values) == pytest.approx(expected)
    assert finite_noise_sigma([1.0, 2.0, 4.0]) == pytest.approx(1.4826 * 1.5 / math.sqrt(2.0))  # an even count
    assert noise_sigma([1.0, 3.0]) == 1.0 and noise_sigma([]) == 0.0  # too short: the plain spread
    assert noise_sigma(np.array([1.0, 3.0])) == 1.0 and noise_sigma(np.zeros(0)) == 0.0
    long = [float(i % 2) for i in range(300)]  # past the short-list path: steps of 1
    assert noise_sigma(long) == pytest.approx(1.4826 / math.sqrt(2.0))


def test_medians_windows_and_formats() -> None:
    assert median_of([3.0, 1.0, 2.0]) == 2.0 and median_of([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median_of([float(i) for i in range(300)]) == 149.5
    w = window_of([1.0, 2.0, 3.0, 4.0], [10, 11, 12, 13])
    assert (w.mean, w.count, w.first_step, w.last_step) == (2.5, 4, 10, 13)
    assert w.sigma == pytest.approx(np.std([1.0, 2.0, 3.0, 4.0], ddof=1)) and w.se == pytest.approx(w.sigma / 2)
    assert w.steps() == "10-13" and window_of([5.0], [7]).steps() == "7" and window_of([5.0], [7]).sigma == 0.0
    assert Window(1.0, 0, 2.0, 0, 0).se == 2.0  # no count: the spread itself
    assert fmt(None) == "n/a" and fmt(float("inf")) == "inf" and fmt(0.000123456) == "0.0001235"
    assert mode_name(ModeKeys.EVAL) == "EVAL" and mode_name("x") == "x"
    assert per_unit(np.float32(3.0)).shape == (1, 1) and per_unit(np.ones(4)).shape == (4, 1)
    assert per_unit(np.ones((2, 3, 4))).shape == (2, 12)


def test_a_window_closes_when_the_next_one_starts() -> None:
    s = WindowedSeries(2)
    assert s.add(0, 100, 1.0) is None and s.add(1, 101, 3.0) is None
    win = s.add(2, 102, 5.0)
    assert (win.mean, win.count, win.first_step, win.last_step) == (2.0, 2, 100, 101)  # the median of 1 and 3
    assert win.sigma == pytest.approx(1.0 * MEDIAN_EFFICIENCY)  # too few values before it: the spread of 1, 3
    s.extend_open([103], [7.0])
    last = s.close()
    assert (last.mean, last.count, last.last_step) == (6.0, 2, 103) and s.close() is None


def test_the_noise_of_a_window_is_that_of_the_values_before_it() -> None:
    values = [50.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    s = WindowedSeries(1)  # remembers 8 values
    for i, v in enumerate(values):
        s.add(i, i, v)
    win = s.add(9, 9, 0.0)  # closes step 8's window; before it: steps 1-7, steps 0, 0, 0, 1, 1, 1 (median 0.5)
    assert MEDIAN_EFFICIENCY == pytest.approx(1.25331, abs=1e-5)  # sqrt(pi / 2): a median's SE over a mean's
    assert win.sigma == pytest.approx(1.4826 * 0.5 / math.sqrt(2.0) * MEDIAN_EFFICIENCY)
    longer = WindowedSeries(1, history=9)  # remembers step 0 too: one step of 50 more (median 1)
    for i, v in enumerate(values):
        longer.add(i, i, v)
    assert longer.add(9, 9, 0.0).sigma == pytest.approx(1.4826 * 1.0 / math.sqrt(2.0) * MEDIAN_EFFICIENCY)


def _remembered(*medians: float) -> WindowedSeries:
    s = WindowedSeries(1)
    for i, m in enumerate(medians):
        s.remember(Window(m, 1, 0.0, i, i))
    return s


def test_a_rise_is_judged_on_the_level_against_the_best_level() -> None:
    s = _remembered(10.0, 10.0, 10.0, 11.0)
    assert s.best.mean == 10.0 and s.first.mean == 10.0 and s.previous.mean == 11.0 and s.closed == 4
    assert s.best_level == 10.0
    new = Window(11.0, 1, 0.0, 4, 4)
    assert not s.rose(new, percent=10.0, z=3.0)  # level median(10, 11, 11) = 11: 1.0 above, not more than 10 %
    assert s.rose(new, percent=9.99, z=3.0)
    assert not s.rose(new, percent=0.0, z=3.0, floor=1.0) and s.rose(new, percent=0.0, z=3.0, floor=0.99)
    one_lucky = _remembered(10.0, 10.0, 10.0)
    assert not one_lucky.rose(Window(20.0, 1, 0.0, 3, 3), percent=0.0, z=0.0)  # median(10, 10, 20): no rise
    assert not WindowedSeries(1).rose(new, percent=0.0, z=0.0)  # nothing remembered yet


def test_the_drift_of_three_window_medians_widens_the_margin() -> None:
    s = _remembered(10.0, 12.0, 10.0)  # levels 10, 11, 10: best level 10; medians step by 2
    new = Window(13.0, 1, 0.0, 3, 3)  # level median(12, 10, 13) = 12: 2 above the best level
    drift = 1.4826 * 2.0 / math.sqrt(2.0)  # 2.097: the wander of the medians
    assert s.best_level == 10.0 and drift > 2.0
    assert not s.rose(new, percent=0.0, z=1.0)  # 2 is within one drift
    assert s.rose(new, percent=0.0, z=0.95)  # 0.95 drifts: 1.99
    two = _remembered(10.0, 12.0)  # two medians: no drift estimate yet
    assert two.rose(Window(14.0, 1, 0.0, 2, 2), percent=0.0, z=100.0)  # level median(12, 14) = 13 > 10


def test_the_drift_is_that_of_the_last_eight_medians() -> None:
    s = _remembered(50.0, 5.0, 5.0, 5.0, 5.0, 5.0, 6.0, 5.0, 6.0)  # the last 8 step by 0, 0, 0, 0, 1, 1, 1
    assert s.best_level == 5.0
    assert s.rose(Window(6.0, 1, 0.0, 9, 9), percent=0.0, z=2.0)  # level 6, drift 0 (the jump from 50 is forgotten)


def test_the_best_window_is_the_first_of_equal_ones() -> None:
    s = _remembered(1.0, 2.0, 1.0)
    assert (s.best.mean, s.best.first_step) == (1.0, 0)
