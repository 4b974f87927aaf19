"""Issue 2: failures inside trainspect never reach training; another job's directory is refused; NaN/Inf survive."""

from __future__ import annotations

import errno
import logging

import numpy as np
import pytest
import torch
from hooktrain import LOSS, Tiny, tname

import trainspect as ts
from trainspect.store.tensor_file import TensorFileWriter

W0 = tname("0.weight")


def _warnings(caplog):
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("trainspect")]


def test_second_job_on_same_out_dir_is_refused_and_nothing_is_overwritten(out_dir):
    tiny = Tiny()
    first = ts.torch.Hook(out_dir, export_tensorboard=False)
    tiny.register(first)
    tiny.train(3)
    first.close()
    before = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    with pytest.raises(ts.RunDirectoryInUse, match="another job"):
        second = ts.torch.Hook(out_dir, export_tensorboard=False)
        Tiny().register(second)
    after = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    assert after == before
    assert ts.create_trial(out_dir).steps() == [0, 1, 2]


@pytest.mark.parametrize("where", ["write", "flush"])
def test_disk_full_disables_capture_with_one_warning_and_training_goes_on(out_dir, monkeypatch, caplog, where):
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    real = getattr(TensorFileWriter, where)
    calls = {"n": 0}

    def full(self, *args):
        calls["n"] += 1
        if calls["n"] > (3 if where == "write" else 0) and getattr(self, "_fail_now", False):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args)

    tiny = Tiny()
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=False,
        include_collections=["weights", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(3)
    assert hook.collector._writer.wait_idle(10)
    monkeypatch.setattr(TensorFileWriter, where, full)
    monkeypatch.setattr(TensorFileWriter, "_fail_now", True, raising=False)
    caplog.set_level(logging.WARNING)
    tiny.train(6)  # must not raise
    hook.close()
    monkeypatch.setattr(TensorFileWriter, where, real)
    assert len(tiny.log) == 9
    warns = _warnings(caplog)
    assert len(warns) == 1, [w.getMessage() for w in warns]
    assert "tensor capture disabled" in warns[0].getMessage() and "No space left" in warns[0].getMessage()
    trial = ts.create_trial(out_dir)
    assert set(range(3)) <= set(trial.steps())
    for step in range(3):
        np.testing.assert_array_equal(trial.tensor(W0).value(step), tiny.log[step].weights["0.weight"])
        assert float(trial.tensor(LOSS).value(step)) == np.float32(tiny.log[step].loss)


def test_a_tensor_that_cannot_be_converted_disables_the_hook_with_one_warning(out_dir, monkeypatch, caplog):
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    caplog.set_level(logging.WARNING)
    tiny = Tiny()
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=False,
        include_collections=["weights", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(2)
    hook.save_tensor("not_a_tensor", object())  # must not raise
    hook.save_tensor("strings", np.array(["a", "b"]))
    tiny.train(2)
    hook.close()
    assert hook.collector._writer is None or hook.collector._writer.wait_idle(10)
    assert len(tiny.log) == 4
    warns = _warnings(caplog)
    assert len(warns) == 1, [w.getMessage() for w in warns]
    assert "disabled" in warns[0].getMessage()
    trial = ts.create_trial(out_dir)
    for step in range(2):
        np.testing.assert_array_equal(trial.tensor(W0).value(step), tiny.log[step].weights["0.weight"])


def test_closing_a_disabled_hook_still_finishes_the_run(out_dir, monkeypatch):
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    tiny = Tiny()
    hook = ts.torch.Hook(out_dir, export_tensorboard=False)
    tiny.register(hook)
    tiny.train(1)
    hook.save_tensor("not_a_tensor", object())
    hook.close()
    assert (out_dir / "training_job_end.ts").exists()
    assert ts.create_trial(out_dir).loaded_all_steps


def test_user_errors_pass_through_unchanged(out_dir, monkeypatch):
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    tiny = Tiny()
    hook = ts.torch.Hook(out_dir, export_tensorboard=False)
    tiny.register(hook)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        tiny.model(torch.ones(2, 5))
    hook.close()


def test_a_wrong_argument_raises_to_the_caller_and_the_hook_stays_enabled(out_dir, monkeypatch):
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    tiny = Tiny()
    hook = ts.torch.Hook(out_dir, export_tensorboard=False)
    tiny.register(hook)
    tiny.train(1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sm_metrc'"):
        hook.save_scalar("acc", 0.5, sm_metrc=True)
    with pytest.raises(TypeError):
        hook.set_mode()
    assert not hook.disabled
    tiny.train(2)
    hook.close()
    assert ts.create_trial(out_dir).steps() == [0, 1, 2]


def test_nan_and_inf_are_stored_and_read_back_exactly(out_dir):
    values = np.array([[np.nan, np.inf, -np.inf], [1.5, -0.0, 3.0]], dtype=np.float32)
    tiny = Tiny()
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=True,
        include_collections=[
            ts.Collection(
                "odd",
                include_regex=["^odd"],
                reduction_config=ts.ReductionConfig(
                    reductions=["min", "max", "mean"], abs_reductions=["max"], save_raw_tensor=True
                ),
            )
        ],
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(1, between=lambda: hook.save_tensor("odd_values", torch.from_numpy(values), collections_to_write="odd"))
    tiny.train(1, between=lambda: hook.save_tensor("odd_inf", torch.tensor([1.0, np.inf]), collections_to_write="odd"))
    hook.close()
    trial = ts.create_trial(out_dir)
    got = trial.tensor("odd_values").value(0)
    np.testing.assert_array_equal(got, values)
    assert np.signbit(got[1, 1])
    reds = trial.tensor("odd_values").reduction_values(0)
    assert np.isnan(reds[("min", False)]) and np.isnan(reds[("mean", False)]) and np.isnan(reds[("max", True)])
    inf = trial.tensor("odd_inf")
    assert inf.reduction_values(1) == {
        ("min", False): 1.0,
        ("max", False): np.inf,
        ("mean", False): np.inf,
        ("max", True): np.inf,
    }
    np.testing.assert_array_equal(inf.value(1), [1.0, np.inf])


def test_a_job_that_recorded_nothing_says_so_at_close(out_dir, caplog):
    """A hook that never saw a step (its model was never called, nothing was trained) says so, and why, at close."""
    caplog.set_level(logging.WARNING)
    registered, trained = Tiny(), Tiny()
    with ts.torch.Hook(out_dir, export_tensorboard=False) as hook:
        registered.register(hook)
        with torch.no_grad():
            trained.model(torch.ones(4, 4))  # another model's inference: no step of the hook's
    lines = [w.getMessage() for w in _warnings(caplog)]
    assert len(lines) == 1 and "nothing was recorded" in lines[0] and str(out_dir) in lines[0], lines
    assert "hook.register_module(model)" in lines[0]
    caplog.clear()
    with ts.torch.Hook(out_dir.parent / "trained", export_tensorboard=False) as hook:
        trained.register(hook)
        trained.train(3)
    assert not [w for w in _warnings(caplog) if "nothing was recorded" in w.getMessage()]
