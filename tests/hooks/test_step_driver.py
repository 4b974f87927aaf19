"""The step driver's transitions, pinned one by one: which call ends which step, in which mode (issue 33).

A real collector (recording into a temporary run directory) and a framework adapter that only notes the calls the
driver makes; the PyTorch and Keras hooks are these parts plus the framework's work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainspect.exceptions import TrainingStopped
from trainspect.hook_settings import check_settings
from trainspect.hooks.collector import Collector
from trainspect.hooks.step_driver import StepDriver
from trainspect.hooks.step_state import StepPhase, StepState
from trainspect.modes import ModeKeys


def _outside() -> bool:
    return False


class Parts:
    idle = False

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.accumulates: Callable[[], bool] = lambda: True  # what the driver asks (set by the tests)
        self.nested: Callable[[], bool] = _outside

    def step_beginning(self) -> None:
        self.calls.append(("beginning",))

    def step_began(self, saving: bool, mode: ModeKeys) -> None:
        self.calls.append(("began", mode))

    def step_ending(self, final: bool) -> tuple[None, bool]:
        self.calls.append(("ending", final))
        return None, False

    def no_step_to_end(self, final: bool) -> None:
        self.calls.append(("nothing", final))


class Extras:
    quiet = False

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.stop: TrainingStopped | None = None

    def check_stop(self, collector: Collector) -> None:
        if self.stop is not None:
            stop, self.stop = self.stop, None
            raise stop

    def on_step_start(self, collector: Collector) -> None:
        self.events.append(("start", collector.mode, collector.global_step))

    def on_step_end(self, collector: Collector, record: Any) -> None:
        self.events.append(("end", collector.mode, collector.global_step))


@pytest.fixture
def driver(tmp_path: Path) -> StepDriver:
    collector = Collector("pytorch", check_settings("pytorch", {"out_dir": str(tmp_path)}))
    collector.start()
    return StepDriver(collector, Extras(), Parts())


def _forward(driver: StepDriver, mode: ModeKeys, accumulates: Callable[[], bool], nested: Callable[[], bool]) -> None:
    """A registered model's forward pass began, the parts answering the driver's questions with these."""
    parts: Any = driver.parts
    parts.accumulates, parts.nested = accumulates, nested
    driver.forward_began(mode)


def _steps(driver: StepDriver) -> list[tuple[Any, ...]]:
    return driver.extras.events  # type: ignore[no-any-return]


def test_begin_ends_the_open_step_first_and_each_mode_counts_its_own(driver: StepDriver) -> None:
    driver.begin(ModeKeys.TRAIN)
    driver.begin(ModeKeys.TRAIN)
    driver.begin(ModeKeys.EVAL)  # the TRAIN step ends in TRAIN, then the mode switches
    record = driver.end()  # the step's record (what the listeners got), as the collector made it
    assert record is not None and (record.mode, record.mode_step, record.global_step) == (ModeKeys.EVAL, 0, 2)
    assert _steps(driver) == [
        ("start", ModeKeys.TRAIN, 0),
        ("end", ModeKeys.TRAIN, 0),
        ("start", ModeKeys.TRAIN, 1),
        ("end", ModeKeys.TRAIN, 1),
        ("start", ModeKeys.EVAL, 2),
        ("end", ModeKeys.EVAL, 2),
    ]
    assert driver.collector.mode_steps == {ModeKeys.TRAIN: 1, ModeKeys.EVAL: 0}
    calls = driver.parts.calls  # type: ignore[attr-defined]
    assert calls[:3] == [("beginning",), ("nothing", False), ("began", ModeKeys.TRAIN)]
    assert calls[3:6] == [("beginning",), ("ending", False), ("began", ModeKeys.TRAIN)]
    assert calls[-1] == ("ending", False)


def test_end_without_a_step_asks_the_parts_to_release_and_records_nothing(driver: StepDriver) -> None:
    assert driver.end(final=True) is None
    assert driver.parts.calls == [("nothing", True)]  # type: ignore[attr-defined]
    assert _steps(driver) == [] and driver.collector.global_step == -1


def test_set_mode_ends_the_open_step_only_when_the_mode_changes(driver: StepDriver) -> None:
    driver.begin(ModeKeys.TRAIN)
    driver.set_mode(ModeKeys.TRAIN)
    assert driver.state.open
    driver.set_mode(ModeKeys.PREDICT)
    assert not driver.state.open and driver.collector.mode is ModeKeys.PREDICT


def test_inferred_training_steps_span_the_micro_batches_until_an_optimizer_steps(driver: StepDriver) -> None:
    asked = []

    def accumulates() -> bool:
        asked.append(1)
        return True

    _forward(driver, ModeKeys.TRAIN, accumulates, _outside)
    _forward(driver, ModeKeys.TRAIN, accumulates, _outside)  # no optimizer stepped: the same step
    assert driver.collector.global_step == 0 and asked == [1]
    driver.optimizer_stepped()  # ends the TRAIN step
    assert not driver.state.open and driver.training.optimizer_seen
    _forward(driver, ModeKeys.TRAIN, accumulates, _outside)
    _forward(driver, ModeKeys.TRAIN, accumulates, _outside)
    assert driver.collector.global_step == 1 and asked == [1]  # an optimizer was seen: not asked again
    assert not driver.training.optimizer_stepped  # reset when the step began


def test_without_an_optimizer_every_forward_pass_is_a_step(driver: StepDriver) -> None:
    for _ in range(3):
        _forward(driver, ModeKeys.TRAIN, lambda: False, _outside)
    assert driver.collector.global_step == 2


def test_eval_forward_passes_are_steps_and_an_optimizer_step_does_not_end_them(driver: StepDriver) -> None:
    _forward(driver, ModeKeys.EVAL, lambda: True, _outside)
    driver.optimizer_stepped()
    assert driver.state.open  # an EVAL step ends at the next forward pass, not at an optimizer step
    _forward(driver, ModeKeys.EVAL, lambda: True, _outside)
    assert driver.collector.global_step == 1
    _forward(driver, ModeKeys.TRAIN, lambda: True, _outside)  # the mode switch ends the EVAL step
    assert [e[1] for e in _steps(driver) if e[0] == "end"] == [ModeKeys.EVAL, ModeKeys.EVAL]


def test_a_driven_mode_is_not_inferred_and_the_others_still_are(driver: StepDriver) -> None:
    driver.drive(ModeKeys.TRAIN)
    driver.begin(ModeKeys.TRAIN)
    _forward(driver, ModeKeys.TRAIN, lambda: False, _outside)  # would begin a step if inferred
    driver.optimizer_stepped()  # would end it
    assert driver.state.open and driver.collector.global_step == 0
    driver.end()
    _forward(driver, ModeKeys.EVAL, lambda: False, _outside)  # EVAL is not driven: inferred
    assert driver.state.open and driver.collector.mode is ModeKeys.EVAL
    driver.drive(None)  # the current mode, EVAL
    assert driver.driven == {ModeKeys.TRAIN, ModeKeys.EVAL}


def test_a_stop_ends_the_open_step_and_opens_no_other(driver: StepDriver) -> None:
    driver.begin(ModeKeys.TRAIN)
    driver.extras.stop = TrainingStopped("ExplodingTensor", 0)  # type: ignore[attr-defined]
    with pytest.raises(TrainingStopped):
        driver.begin(ModeKeys.TRAIN)
    assert not driver.state.open
    assert _steps(driver) == [("start", ModeKeys.TRAIN, 0), ("end", ModeKeys.TRAIN, 0)]
    driver.begin(ModeKeys.TRAIN)  # asked once: training that goes on records on
    assert driver.collector.global_step == 1


def test_the_lifecycle_refuses_transitions_the_diagram_does_not_have() -> None:
    state = StepState()
    with pytest.raises(RuntimeError, match="end_step in phase IDLE"):
        state.end()
    state.begin(True)
    assert state.phase is StepPhase.OPEN and state.saving
    with pytest.raises(RuntimeError, match="begin_step in phase OPEN"):
        state.begin(False)
    with pytest.raises(RuntimeError, match="close in phase OPEN"):
        state.close()
    state.end()
    assert not state.saving
    state.close()
    assert state.phase is StepPhase.CLOSED
    with pytest.raises(RuntimeError, match="begin_step in phase CLOSED"):
        state.begin(True)


def test_after_close_no_step_opens(driver: StepDriver) -> None:
    driver.begin(ModeKeys.TRAIN)
    driver.collector.close()
    assert driver.state.phase is StepPhase.CLOSED
    assert driver.collector.begin_step() is False
    assert driver.collector.global_step == 0


def test_a_forward_pass_nested_in_the_open_steps_ends_nothing_and_nesting_is_asked_only_then(
    driver: StepDriver,
) -> None:
    asked = []

    def nested() -> bool:
        asked.append(driver.collector.global_step)
        return True

    _forward(driver, ModeKeys.TRAIN, lambda: True, nested)  # no step open: begins one, nothing asked
    _forward(driver, ModeKeys.TRAIN, lambda: True, nested)  # a micro-batch: the step goes on, nothing asked
    assert asked == [] and driver.collector.global_step == 0
    _forward(driver, ModeKeys.EVAL, lambda: True, nested)  # would switch modes: inside the forward pass
    assert asked == [0] and driver.state.open and driver.collector.mode is ModeKeys.TRAIN
    driver.end()
    _forward(driver, ModeKeys.EVAL, lambda: True, nested)
    _forward(driver, ModeKeys.EVAL, lambda: True, nested)  # an EVAL step would end: inside its forward pass
    assert asked == [0, 1] and driver.collector.global_step == 1 and driver.state.open
    _forward(driver, ModeKeys.EVAL, lambda: True, _outside)
    assert driver.collector.global_step == 2


def test_the_steady_step_of_idle_quiet_parts_begins_without_their_boundary_calls(driver: StepDriver) -> None:
    parts, extras = driver.parts, driver.extras
    parts.idle = True  # type: ignore[attr-defined]
    extras.quiet = True  # type: ignore[attr-defined]
    driver.begin(ModeKeys.TRAIN)  # a mode switch: the full path
    assert parts.calls == [("beginning",), ("nothing", False), ("began", ModeKeys.TRAIN)]  # type: ignore[attr-defined]
    driver.end()
    del parts.calls[:]  # type: ignore[attr-defined]
    driver.training.optimizer_stepped = True
    assert driver.begin() is True  # losses are saved at every step
    assert driver.state.open and driver.collector.global_step == 1 and driver.collector.mode_steps[ModeKeys.TRAIN] == 1
    assert parts.calls == [] and extras.events == []  # type: ignore[attr-defined]  # the same collections save
    assert not driver.training.optimizer_stepped
    driver.begin()  # a step is open: the full path ends it
    assert parts.calls == [("beginning",), ("ending", False), ("began", ModeKeys.TRAIN)]  # type: ignore[attr-defined]
    driver.end()
    planner_begin = driver.collector.planner.begin_step

    def changed(mode: ModeKeys, mode_step: int) -> bool:  # the saving collections change at the step's beginning
        driver.collector.planner.generation += 1
        return planner_begin(mode, mode_step)

    driver.collector.planner.begin_step = changed  # type: ignore[method-assign]
    del parts.calls[:]  # type: ignore[attr-defined]
    driver.begin()
    assert parts.calls == [("began", ModeKeys.TRAIN)]  # type: ignore[attr-defined]
    driver.end()
    driver.collector.planner.begin_step = planner_begin  # type: ignore[method-assign]
    extras.quiet = False  # type: ignore[attr-defined]
    driver.begin()
    assert extras.events[-1] == ("start", ModeKeys.TRAIN, 4)  # type: ignore[attr-defined]


def test_a_nesting_the_caller_already_knows_is_not_asked_again(driver: StepDriver) -> None:
    def never() -> bool:
        raise AssertionError("asked the parts although the caller said")

    _forward(driver, ModeKeys.EVAL, lambda: True, never)  # no step open: nothing asked
    driver.forward_began(ModeKeys.EVAL, True)  # would end the EVAL step: inside its forward pass, as the caller says
    assert driver.collector.global_step == 0 and driver.state.open
    driver.forward_began(ModeKeys.EVAL, False)
    assert driver.collector.global_step == 1
