"""Issue 2: SaveConfig per mode and per collection (spec 5.3) and ReductionConfig (spec 5.5), through a real hook."""

from __future__ import annotations

import numpy as np
import pytest
from hooktrain import LOSS, Tiny, tname

import trainspect as ts
from trainspect.modes import ModeKeys

W0 = tname("0.weight")
G0 = f"gradient/{W0}"


def _saved_steps(out_dir, save_config, steps, mode_train=True):
    tiny = Tiny()
    hook = ts.torch.Hook(out_dir, export_tensorboard=False, include_collections=["weights"], save_config=save_config)
    tiny.register(hook)
    tiny.train(steps)
    hook.close()
    return ts.create_trial(out_dir).tensor(W0).steps()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, [0, 500]),
        ({"save_interval": 100, "end_step": 200}, [0, 100]),
        ({"save_interval": 100, "end_step": 201}, [0, 100, 200]),
        ({"save_interval": 100, "start_step": 150}, [200, 300, 400, 500]),
        ({"save_steps": [3, 7]}, [0, 3, 7, 500]),
    ],
)
def test_spec_examples_as_a_rule(kwargs, expected):
    cfg = ts.SaveConfig(**kwargs)
    assert [s for s in range(501) if cfg.should_save_step(ModeKeys.TRAIN, s)] == expected


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"save_interval": 10, "end_step": 20}, [0, 10]),
        ({"save_interval": 10, "end_step": 21}, [0, 10, 20]),
        ({"save_interval": 10, "start_step": 15}, [20, 30]),
        ({"save_steps": [3, 7], "save_interval": 25}, [0, 3, 7, 25]),
    ],
)
def test_spec_examples_through_the_hook(out_dir, kwargs, expected):
    assert _saved_steps(out_dir, ts.SaveConfig(**kwargs), 32) == expected


def test_save_config_per_mode(out_dir):
    tiny = Tiny()
    cfg = ts.SaveConfig(
        mode_save_configs={
            ModeKeys.TRAIN: ts.SaveConfigMode(save_interval=2),
            ModeKeys.EVAL: ts.SaveConfigMode(save_interval=1, start_step=1),
        }
    )
    hook = ts.torch.Hook(out_dir, export_tensorboard=False, include_collections=["weights"], save_config=cfg)
    tiny.register(hook)
    hook.set_mode(ModeKeys.TRAIN)
    tiny.train(5)
    hook.set_mode(ModeKeys.EVAL)
    tiny.evaluate(3)
    hook.close()
    trial = ts.create_trial(out_dir)
    w = trial.tensor(W0)
    assert w.steps(mode=ModeKeys.TRAIN) == [0, 2, 4]
    assert w.steps(mode=ModeKeys.EVAL) == [1, 2]
    assert w.steps() == [0, 2, 4, 6, 7]
    np.testing.assert_array_equal(w.value(2, mode=ModeKeys.EVAL), tiny.log[7].weights["0.weight"])
    # losses are always saved, every step of every mode
    assert trial.tensor(LOSS).steps(mode=ModeKeys.EVAL) == [0, 1, 2]


def test_save_config_per_collection(out_dir):
    tiny = Tiny()
    weights = ts.Collection("weights", save_config=ts.SaveConfig(save_interval=2))
    grads = ts.Collection("gradients", save_config=ts.SaveConfig(save_steps=[1], save_interval=3))
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=False,
        include_collections=[weights, grads],
        save_config=ts.SaveConfig(save_interval=100),
    )
    tiny.register(hook)
    tiny.train(7)
    hook.close()
    trial = ts.create_trial(out_dir)
    assert trial.tensor(W0).steps() == [0, 2, 4, 6]
    assert trial.tensor(G0).steps() == [0, 1, 3, 6]
    np.testing.assert_array_equal(trial.tensor(G0).value(3), tiny.log[3].grads["0.weight"])


def test_losses_disabled_by_end_step_zero(out_dir):
    tiny = Tiny()
    losses = ts.Collection("losses", save_config=ts.SaveConfig(end_step=0))
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=False,
        include_collections=["weights", losses],
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(2)
    hook.close()
    assert LOSS not in ts.create_trial(out_dir).tensor_names()


REDUCTIONS = ts.ReductionConfig(
    reductions=["min", "max", "mean", "std", "variance", "sum", "prod"],
    abs_reductions=["mean", "max"],
    norms=["l1", "l2"],
    abs_norms=["l2"],
)


# the reductions as docs/ defines them (population std and variance, as smdebug), written out in NumPy here rather
# than taken from trainspect.reductions, the code under test
_NUMPY = {
    "min": np.min,
    "max": np.max,
    "mean": np.mean,
    "std": lambda a: np.sqrt(np.mean((a - a.mean()) ** 2)),
    "variance": lambda a: np.mean((a - a.mean()) ** 2),
    "sum": np.sum,
    "prod": np.prod,
    "l1": lambda a: np.abs(a).sum(),
    "l2": lambda a: np.sqrt((a**2).sum()),
}


def _check_reductions(tensor, step, expected_array):
    for name, absolute in REDUCTIONS.names():
        got = tensor.reduction_value(step, name, abs=absolute)
        arr = expected_array.astype(np.float64)
        want = float(_NUMPY[name](np.abs(arr) if absolute else arr))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12, err_msg=f"{name} abs={absolute}")


def test_reductions_only_unless_save_raw_tensor(out_dir):
    tiny = Tiny()
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=False,
        include_collections=["weights", "gradients"],
        reduction_config=REDUCTIONS,
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(3)
    hook.close()
    trial = ts.create_trial(out_dir)
    w, g = trial.tensor(W0), trial.tensor(G0)
    for step in range(3):
        assert w.has_reductions_only(step)
        with pytest.raises(ts.exceptions.TensorUnavailableForStep, match="only reductions"):
            w.value(step)
        _check_reductions(w, step, tiny.log[step].weights["0.weight"])
        _check_reductions(g, step, tiny.log[step].grads["0.weight"])
        assert set(w.reduction_values(step)) == set(REDUCTIONS.names())
    # numpy's own formulas, written out, for a few of them
    arr = tiny.log[1].weights["0.weight"].astype(np.float64)
    np.testing.assert_allclose(w.reduction_value(1, "mean", abs=True), np.abs(arr).mean(), rtol=1e-6)
    np.testing.assert_allclose(w.reduction_value(1, "l2"), np.linalg.norm(arr.ravel()), rtol=1e-6)
    np.testing.assert_allclose(w.reduction_value(1, "std"), arr.std(), rtol=1e-6)
    # losses are scalars: never reduced, always raw
    assert trial.tensor(LOSS).value(0).shape == ()


def test_reductions_with_raw_tensor_and_per_collection(out_dir):
    tiny = Tiny()
    weights = ts.Collection("weights", reduction_config=ts.ReductionConfig(reductions=["mean"], save_raw_tensor=True))
    hook = ts.torch.Hook(
        out_dir,
        export_tensorboard=False,
        include_collections=[weights, "gradients"],
        reduction_config=ts.ReductionConfig(abs_reductions=["max"]),
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(2)
    hook.close()
    trial = ts.create_trial(out_dir)
    w, g = trial.tensor(W0), trial.tensor(G0)
    np.testing.assert_array_equal(w.value(1), tiny.log[1].weights["0.weight"])
    assert set(w.reduction_values(1)) == {("mean", False)}
    np.testing.assert_allclose(
        w.reduction_value(1, "mean"), tiny.log[1].weights["0.weight"].astype(np.float64).mean(), rtol=1e-6
    )
    assert set(g.reduction_values(1)) == {("max", True)}
    assert g.has_reductions_only(1)


def test_reduction_value_computed_from_raw_when_only_raw_saved(out_dir):
    tiny = Tiny()
    hook = ts.torch.Hook(
        out_dir, export_tensorboard=False, include_collections=["weights"], save_config=ts.SaveConfig(save_interval=1)
    )
    tiny.register(hook)
    tiny.train(2)
    hook.close()
    w = ts.create_trial(out_dir).tensor(W0)
    assert w.reduction_values(1) == {}
    _check_reductions(w, 1, tiny.log[1].weights["0.weight"])


def test_stable_until_never_skips_a_change_of_should_save():
    rng = np.random.default_rng(0)
    for _ in range(300):
        end = int(rng.integers(0, 60)) if rng.random() < 0.5 else None
        listed = sorted({int(s) for s in rng.integers(0, 80, int(rng.integers(0, 4)))})
        cfg = ts.SaveConfigMode(
            save_interval=int(rng.integers(1, 12)), start_step=int(rng.integers(0, 20)), end_step=end, save_steps=listed
        )
        for step in range(80):
            until = cfg.stable_until(step)
            assert until is None or until > step
            for later in range(step + 1, min(until if until is not None else 10**9, 120)):
                assert cfg.should_save(later) == cfg.should_save(step), (cfg, step, until, later)


def test_planner_decisions_equal_a_fresh_decision_at_every_step_when_configs_change_mid_run():
    from trainspect.collections import CollectionManager
    from trainspect.hooks.save_plan import SavePlanner

    manager = CollectionManager()
    planner = SavePlanner(manager, ["losses", "weights"], ts.SaveConfig(save_interval=7), None, None, False)

    def fresh(mode, step):
        return {
            n
            for n in planner.included
            if (manager.get(n).save_config or planner.save_config).modes[mode].should_save(step)
        }

    steps = {ModeKeys.TRAIN: -1, ModeKeys.EVAL: -1}
    for i in range(200):
        mode = ModeKeys.EVAL if 60 <= i < 70 else ModeKeys.TRAIN
        steps[mode] += 1
        if i == 30:
            manager.get("weights").save_config = ts.SaveConfig(save_interval=3, end_step=90)
        if i == 100:
            planner.included.add("biases")  # e.g. save_tensor into a collection not saved so far
        planner.begin_step(mode, steps[mode])
        assert {n for n in planner.included if planner.is_active(n)} == fresh(mode, steps[mode]), i
