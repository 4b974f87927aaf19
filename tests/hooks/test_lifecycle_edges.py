"""The step lifecycle at its edges: what the driver reports at a step's beginning, a new hook's state, who records.

A real collector recording into a temporary run directory, driven by the step driver with a framework adapter that
notes what it is told; real PyTorch hooks for the hook-level behaviour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import trainspect as ts
from trainspect.hook_settings import check_settings
from trainspect.hooks.collector import Collector
from trainspect.hooks.save_plan import TensorPlan
from trainspect.hooks.step_driver import StepDriver
from trainspect.hooks.step_state import StepPhase
from trainspect.modes import ModeKeys

torch.set_num_threads(1)


class _Parts:
    """A framework adapter that notes whether each step it was told about saves."""

    def __init__(self) -> None:
        self.saving: list[bool] = []

    def step_beginning(self) -> None:
        pass

    def step_began(self, saving: bool, mode: ModeKeys) -> None:
        self.saving.append(saving)

    def step_ending(self, final: bool) -> tuple[None, bool]:
        return None, False

    def no_step_to_end(self, final: bool) -> None:
        pass


class _Extras:
    quiet = True


def test_the_driver_reports_whether_each_step_it_begins_saves(tmp_path: Path) -> None:
    settings = check_settings(
        "pytorch",
        {
            "out_dir": str(tmp_path),
            "include_collections": [ts.Collection("losses", save_config=ts.SaveConfig(save_interval=3))],
        },
    )
    collector = Collector("pytorch", settings)
    collector.start()
    parts = _Parts()
    driver = StepDriver(collector, _Extras(), parts)
    reported = [driver.begin(ModeKeys.TRAIN) for _ in range(5)]
    driver.end()
    collector.close()
    assert reported == [True, False, False, True, False]  # every third step saves the losses
    assert reported == parts.saving  # what the caller is told is what the framework adapter was told


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(3, 1)


def test_a_new_hook_is_idle_and_saves_nothing_until_its_first_step_begins(tmp_path: Path) -> None:
    hook = ts.torch.Hook(tmp_path, include_collections=["weights"], save_config=ts.SaveConfig(save_interval=1))
    hook.register_module(_model())
    state = hook.collector.state
    assert state.phase is StepPhase.IDLE and not state.open
    assert state.saving is False  # no step: nothing is being saved
    assert repr(state) == "StepState(IDLE, saving=False)"
    hook.begin_step("train")
    assert state.open and state.saving is True
    hook.end_step()
    assert state.phase is StepPhase.IDLE and state.saving is False
    hook.close()


def test_a_rank_other_than_0_records_no_tensors_of_an_unsharded_model_under_include_workers_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TRAINSPECT_JOB_ID": "job-one"}.items():
        monkeypatch.setenv(name, value)
    model = _model()
    hook = ts.torch.Hook(
        tmp_path,
        include_workers="one",
        include_collections=["weights", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
    )
    hook.register_module(model)
    assert hook.collector.sharded is False  # a plain module: its parameters are whole on every rank
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        hook.begin_step("train")
        loss = model(torch.ones(2, 3)).pow(2).sum()
        hook.record_loss("loss", loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        hook.end_step()
    collector: Any = hook.collector
    assert collector.rank == 1 and collector.worker == "worker_1"
    assert collector.records_tensors is False
    hook.close()
    assert (tmp_path / "workers" / "worker_1.json").is_file()  # the rank joined the job
    assert not (tmp_path / "tensors" / "worker_1").exists()  # but rank 0 alone records an unsharded model


def _collector(tmp_path: Path, **extra: Any) -> Collector:
    settings = check_settings("pytorch", {"out_dir": str(tmp_path), **extra})
    collector = Collector("pytorch", settings)
    collector.start()
    return collector


def test_tensors_added_late_to_a_finished_step_are_written_at_that_step(tmp_path: Path) -> None:
    collector = _collector(tmp_path, include_collections=["default"])
    collector.begin_step()
    step = collector.open_step()
    assert step is not None
    collector.end_step()
    plan = TensorPlan(True, (), False, frozenset({"default"}))
    late = np.arange(3, dtype=np.float32)
    collector.add_late(step, [("late_copy", plan, late, None, late.shape, None, None)])
    collector.close()
    trial = ts.create_trial(tmp_path)
    assert "late_copy" in trial.tensor_names()
    np.testing.assert_array_equal(trial.tensor("late_copy").value(step[2]), late)


def test_a_reopened_last_step_is_open_and_saving_until_it_ends_again(tmp_path: Path) -> None:
    collector = _collector(tmp_path)
    assert collector.reopen_last_step() is False  # no step finished yet
    collector.begin_step()
    collector.end_step()
    assert collector.reopen_last_step() is True
    state = collector.state
    assert state.open and state.saving is True  # what is added now is saved, whatever the schedule said
    collector.end_step()
    assert not state.open and state.saving is False
    collector.close()


def test_a_hook_whose_first_step_saves_nothing_takes_no_module_inputs_or_outputs(tmp_path: Path) -> None:
    hook = ts.torch.Hook(
        tmp_path,
        include_collections=[
            ts.Collection("losses", save_config=ts.SaveConfig(start_step=1)),
            ts.Collection("outs", module_outputs=True),
        ],
        save_config=ts.SaveConfig(start_step=1),
    )
    model = _model()
    hook.register_module(model)
    planner = hook.collector.planner
    hook.begin_step("train")  # step 0: nothing saves
    assert hook.collector.state.saving is False and planner.takes_modules is False
    model(torch.ones(2, 3))
    hook.end_step()
    hook.close()


def test_scalars_ended_with_a_step_join_their_collections_unless_the_caller_says_they_are_known(tmp_path: Path) -> None:
    collector = Collector("pytorch", check_settings("pytorch", {"out_dir": str(tmp_path)}))
    collector.start()
    collector.begin_step()
    collector.end_step(
        [("my_metric", 1.5, np.dtype(np.float32), frozenset({"losses"}))]
    )  # names not handed over before
    collector.begin_step()
    collector.end_step([("other", 2.5, np.dtype(np.float32), frozenset({"losses"}))], known=True)  # the caller vouches
    collector.close()
    trial = ts.create_trial(str(tmp_path))
    assert trial.tensor_names(collection="losses") == ["my_metric"]
    assert sorted(trial.tensor_names()) == ["my_metric", "other"]  # both written; only the first was listed


def test_a_callback_on_the_runs_opening_runs_when_it_opens_or_at_once_if_open(tmp_path: Path) -> None:
    opened: list[str] = []
    collector = Collector("pytorch", check_settings("pytorch", {"out_dir": str(tmp_path / "run")}))
    collector.on_open(lambda c: opened.append("early"))
    collector.start()
    assert opened == []  # the run opens at the first step
    collector.begin_step()
    assert opened == ["early"]
    collector.on_open(lambda c: opened.append("late"))
    assert opened == ["early", "late"]  # registered on an open run: called at once
    collector.close()
    dry = Collector("pytorch", check_settings("pytorch", {"out_dir": str(tmp_path / "dry"), "dry_run": True}))
    dry.start()
    dry.begin_step()
    dry.on_open(lambda c: opened.append("dry"))
    dry.close()
    assert opened == ["early", "late"]  # a dry run records nothing: nobody is told it opened


def test_a_close_while_the_training_threads_end_closes_the_run_returns_when_the_run_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray Train's worker: the run, opened in the training thread, is closed by the watcher of that thread while the
    worker's ``destroy_process_group()`` closes it too, and the worker is killed as soon as that returns. That
    second ``close()`` returns only once the first has written the end of the run."""
    import threading

    from trainspect.hooks.hook_extras import HookExtras
    from trainspect.store.layout import RunLayout

    closing, release = threading.Event(), threading.Event()
    before_close = HookExtras.before_close

    def held(self: HookExtras, collector: Collector) -> None:
        closing.set()
        release.wait(30)  # the watcher's close is held here, before anything of the end is written
        before_close(self, collector)

    monkeypatch.setattr(HookExtras, "before_close", held)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ts.torch.Hook(tmp_path)

    def train() -> None:  # the training function, on a thread of its own
        hook.register_module(model)
        for _ in range(2):
            model(torch.ones(2, 3)).sum().backward()
            opt.step()

    trainer = threading.Thread(target=train)
    trainer.start()
    trainer.join()
    assert closing.wait(30)  # the training thread ended: its watcher is closing the run
    threading.Timer(0.3, release.set).start()
    hook.close()  # destroy_process_group()'s close, from another thread
    layout = RunLayout(tmp_path)
    assert layout.end_marker.exists()  # written before close() returned
    assert ts.create_trial(tmp_path).steps() == [0, 1]
