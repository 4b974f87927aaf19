"""The collector's step lifecycle at its edges: a failed writer, a late save, the capture sentinel."""

from __future__ import annotations

import torch
from torch import nn

import trainspect as ts
from trainspect.hooks.step_state import NO_CAPTURES

torch.set_num_threads(1)


def _hook_and_step(tmp_path) -> tuple[ts.torch.Hook, nn.Module]:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    hook = ts.torch.Hook(
        tmp_path, include_collections=["weights", "losses"], save_config=ts.SaveConfig(save_interval=1)
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    return hook, model


def test_a_step_after_the_writer_failed_saves_nothing(tmp_path) -> None:
    hook, model = _hook_and_step(tmp_path)
    collector = hook.collector
    assert collector.writer_failed is False  # a healthy writer
    hook.begin_step()
    assert collector.state.saving  # every step saves the weights
    hook.end_step()
    queue = collector._tensor_queue
    assert queue is not None
    queue.failed = OSError("no space left on device")  # what the writer thread sets when a write fails
    assert collector.writer_failed
    hook.begin_step()
    assert not collector.state.saving  # nothing is copied for a writer that cannot write it
    hook.end_step()
    queue.failed = None
    hook.close()


def test_a_tensor_saved_between_steps_reopens_the_last_step_as_a_saving_step(tmp_path) -> None:
    hook, model = _hook_and_step(tmp_path)
    seen = []
    added_late = hook._added_late

    def observed() -> None:
        seen.append((hook.collector.state.open, hook.collector.state.saving))
        added_late()

    hook._added_late = observed  # type: ignore[method-assign]
    hook.save_tensor("late", torch.ones(2))
    hook.close()
    assert seen == [(True, True)]
    assert ts.create_trial(tmp_path).tensor("late").steps() == [0]


def test_the_undecided_captures_capture_nothing() -> None:
    assert not (NO_CAPTURES.params or NO_CAPTURES.gradients or NO_CAPTURES.module_io or NO_CAPTURES.optimizer)
    assert not NO_CAPTURES.at_begin and NO_CAPTURES.generation < 0


def test_switching_the_collectors_mode_ends_the_open_step(tmp_path) -> None:
    """``Collector.set_mode`` ends the open step first (the driver's ``set_mode`` calls it after its own end, which
    hands the framework's staged tensors over): the next step counts in the new mode from 0."""
    from trainspect.modes import ModeKeys

    hook, model = _hook_and_step(tmp_path)
    collector = hook.collector
    hook.begin_step()
    assert collector.state.open and collector.mode is ModeKeys.TRAIN
    collector.set_mode(ModeKeys.EVAL)
    assert not collector.state.open and collector.mode is ModeKeys.EVAL
    hook.begin_step()
    assert collector.mode_steps == {ModeKeys.TRAIN: 1, ModeKeys.EVAL: 0} and collector.global_step == 2
    hook.end_step()
    hook.close()
    assert ts.create_trial(tmp_path).steps(mode=ModeKeys.EVAL) == [0]


def test_a_directory_holding_another_jobs_finished_run_is_refused_at_construction(tmp_path, monkeypatch) -> None:
    """A plain script's second hook on the same directory fails where it is made, naming the reason, before any
    model is registered or any file is touched (not at its first step, inside training)."""
    import pytest

    for name in ("TRAINSPECT_JOB_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    with ts.torch.Hook(tmp_path / "run") as hook:
        hook.save_scalar("x", 1.0)
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    with pytest.raises(ts.RunDirectoryInUse, match="another job"):
        ts.torch.Hook(tmp_path / "run")
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before
