"""Issue 2: the Trial API (spec 5.6) over a run written by a real hook."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from storetrain import LOSS, PARAMS, Tiny, tname, write_run

import trainspect as ts
from trainspect.exceptions import NoMoreData, StepUnavailable, TensorUnavailable, TensorUnavailableForStep
from trainspect.modes import ModeKeys
from trainspect.store.framing import HEADER_SIZE

W0, G0 = tname("0.weight"), f"gradient/{tname('0.weight')}"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("trial") / "run"
    tiny = write_run(out)
    return out, tiny


def test_tensor_names_filters(written):
    out, _ = written
    trial = ts.create_trial(out)
    every = trial.tensor_names()
    assert len(every) == 2 + 2 * len(PARAMS)  # the loss module's output and the backpropagated "loss"
    assert trial.tensor_names(regex=r"^gradient/") == sorted(f"gradient/{tname(p)}" for p in PARAMS)
    assert trial.tensor_names(regex=[r"0\.weight$", "Loss"]) == [LOSS, W0, G0]
    assert trial.tensor_names(collection="weights") == [tname("0.weight"), tname("2.weight")]
    assert trial.tensor_names(collection=trial.collection("biases")) == [tname("0.bias"), tname("2.bias")]
    assert trial.tensor_names(collection="losses") == [LOSS, "loss"]
    # eval steps carry no gradients
    assert trial.tensor_names(step=0, mode=ModeKeys.EVAL) == sorted([LOSS] + [tname(p) for p in PARAMS])
    assert trial.tensor_names(step=4) == trial.tensor_names(step=0, mode=ModeKeys.EVAL)
    assert trial.tensor_names(step=1, mode=ModeKeys.TRAIN, regex="^gradient") == sorted(
        f"gradient/{tname(p)}" for p in PARAMS
    )
    with pytest.raises(ValueError, match="regex or collection"):
        trial.tensor_names(regex=".*", collection="weights")


def test_steps_modes_and_mapping(written):
    out, _ = written
    trial = ts.create_trial(out)
    assert trial.steps() == list(range(8))
    assert trial.steps(ModeKeys.TRAIN) == [0, 1, 2, 3, 4, 5]
    assert trial.steps("eval") == [0, 1]
    assert trial.modes() == [ModeKeys.TRAIN, ModeKeys.EVAL]
    assert trial.mode(5) is ModeKeys.EVAL and trial.mode_step(5) == 1
    assert trial.global_step(ModeKeys.TRAIN, 4) == 6
    with pytest.raises(StepUnavailable):
        trial.global_step(ModeKeys.EVAL, 2)
    assert trial.workers() == ["worker_0"]
    assert {"weights", "biases", "gradients", "losses"} <= set(trial.collections())
    assert trial.collection("gradients").tensor_names == {f"gradient/{tname(p)}" for p in PARAMS}
    with pytest.raises(KeyError, match="recorded"):
        trial.collection("nope")


def test_tensor_methods(written):
    out, tiny = written
    trial = ts.create_trial(out)
    w = trial.tensor(W0)
    assert w.steps() == list(range(8))
    assert w.steps(mode=ModeKeys.EVAL) == [0, 1]
    assert trial.tensor(G0).steps() == [0, 1, 2, 3, 6, 7]
    assert trial.tensor(G0).steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3, 4, 5]
    np.testing.assert_array_equal(w.value(1, mode=ModeKeys.EVAL), tiny.log[5].weights["0.weight"])
    values = w.values(mode=ModeKeys.TRAIN)
    assert sorted(values) == [0, 1, 2, 3, 4, 5]
    np.testing.assert_array_equal(values[4], tiny.log[6].weights["0.weight"])
    assert w.shape(3) == (6, 4) and w.shapes(ModeKeys.EVAL) == {0: (6, 4), 1: (6, 4)}
    assert w.workers(3) == ["worker_0"]
    assert w.prev_steps(5, 2) == [3, 4]
    np.testing.assert_allclose(w.reduction_value(2, "max", abs=True), np.abs(tiny.log[2].weights["0.weight"]).max())
    with pytest.raises(TensorUnavailableForStep):
        trial.tensor(G0).value(4)
    with pytest.raises(TensorUnavailable):
        trial.tensor("nope")
    assert trial.has_tensor(W0) and not trial.has_tensor("nope")


def test_has_passed_step_and_wait_for_steps_after_the_end(written):
    out, _ = written
    trial = ts.create_trial(out)
    assert trial.loaded_all_steps
    assert trial.has_passed_step(3) is ts.StepState.AVAILABLE
    assert trial.has_passed_step(1, ModeKeys.EVAL) is ts.StepState.AVAILABLE
    assert trial.has_passed_step(2, ModeKeys.EVAL) is ts.StepState.UNAVAILABLE
    assert trial.has_passed_step(100) is ts.StepState.UNAVAILABLE
    trial.wait_for_steps([0, 7], poll=0.01)
    with pytest.raises(NoMoreData):
        trial.wait_for_steps([8], poll=0.01)


def test_random_access_reads_only_the_record(written, monkeypatch):
    from trainspect.store import framing

    out, _ = written
    trial = ts.create_trial(out)
    checked = []
    real = dict(framing._CHECKSUMS)
    for version, fn in real.items():
        monkeypatch.setitem(framing._CHECKSUMS, version, lambda data, fn=fn: checked.append(len(data)) or fn(data))
    value = trial.tensor(tname("2.bias")).value(5)
    assert checked == [value.nbytes]  # one record checked and mapped, nothing else of the file read
    data_size = sum(p.stat().st_size for p in (out / "tensors").rglob("data-*.bin"))
    assert data_size > 20 * (HEADER_SIZE + checked[0])


def test_live_refresh_and_end_detection(out_dir):
    tiny = Tiny()
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=False,
        include_collections=["weights", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(3)
    hook.collector._writer.wait_idle(10)
    trial = ts.create_trial(out_dir)
    assert trial.steps() == [0, 1, 2]
    assert not trial.loaded_all_steps
    assert trial.has_passed_step(3) is ts.StepState.NOT_YET_AVAILABLE
    with pytest.raises(StepUnavailable):
        trial.wait_for_steps([3], poll=0.01, timeout=0.05)

    tiny.train(2)
    hook.collector._writer.wait_idle(10)
    assert trial.steps() == [0, 1, 2, 3, 4]  # every query refreshes
    np.testing.assert_array_equal(trial.tensor(W0).value(4), tiny.log[4].weights["0.weight"])
    with trial.no_refresh():
        tiny.train(1)
        hook.collector._writer.wait_idle(10)
        assert trial.steps() == [0, 1, 2, 3, 4]
    assert trial.steps()[-1] == 5

    waiter_done = threading.Event()

    def wait():
        trial.wait_for_steps([6], poll=0.02, timeout=30)
        waiter_done.set()

    thread = threading.Thread(target=wait)
    thread.start()
    tiny.train(1)
    hook.close()
    thread.join(30)
    assert waiter_done.is_set()
    assert trial.loaded_all_steps
    assert trial.has_passed_step(7) is ts.StepState.UNAVAILABLE
    with pytest.raises(NoMoreData):
        trial.wait_for_steps([9], poll=0.01)


def test_missing_path():
    with pytest.raises(FileNotFoundError):
        ts.create_trial("/nonexistent/trainspect/run")
