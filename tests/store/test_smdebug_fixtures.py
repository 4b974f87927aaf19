"""Issue 2: create_trial reads trial directories written by the real smdebug 1.0.34 (tests/data/make_smdebug_fixture.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import trainspect as ts
from trainspect.modes import ModeKeys

DATA = Path(__file__).resolve().parents[1] / "data"
LOSS = "CrossEntropyLoss_output_0"
PARAMS = ["Sequential_0.weight", "Sequential_0.bias", "Sequential_2.weight", "Sequential_2.bias"]
GRADS = [f"gradient/{p}" for p in PARAMS]


def _load(name):
    expected = json.loads((DATA / f"{name}.expected.json").read_text())
    return ts.create_trial(DATA / name), expected["steps"]


def test_raw_fixture_names_steps_modes_values():
    trial, steps = _load("smdebug_trial_raw")
    assert trial.tensor_names() == sorted([LOSS, *PARAMS, *GRADS])
    assert trial.steps() == [0, 1, 2, 3, 4, 5]
    assert trial.steps(ModeKeys.TRAIN) == [0, 1, 2, 3]
    assert trial.steps(ModeKeys.EVAL) == [0, 1]
    assert trial.modes() == [ModeKeys.TRAIN, ModeKeys.EVAL]
    assert trial.mode(4) is ModeKeys.EVAL and trial.mode_step(4) == 0 and trial.global_step(ModeKeys.EVAL, 1) == 5
    assert trial.workers() == ["worker_0"]
    assert trial.loaded_all_steps
    assert trial.tensor_names(step=4) == sorted([LOSS, *PARAMS])
    for step, exp in steps.items():
        gs = int(step)
        loss = trial.tensor(LOSS).value(gs)
        assert loss.dtype == np.float32 and loss.shape == ()
        assert float(loss) == np.float32(exp["loss"])
        for name in PARAMS + (GRADS if exp["mode"] == "TRAIN" else []):
            value = trial.tensor(name).value(gs)
            want = np.asarray(exp[name], dtype=np.float32)
            assert value.dtype == np.float32 and value.shape == want.shape
            np.testing.assert_array_equal(value, want)
    assert trial.tensor(GRADS[0]).steps() == [0, 1, 2, 3]
    # reductions computed from the raw values
    np.testing.assert_allclose(
        trial.tensor(PARAMS[0]).reduction_value(1, "mean", abs=True),
        np.abs(np.asarray(steps["1"][PARAMS[0]], dtype=np.float32)).astype(np.float64).mean(),
        rtol=1e-6,
    )


def test_raw_fixture_collections():
    trial, _ = _load("smdebug_trial_raw")
    colls = trial.collections()
    assert {"weights", "biases", "gradients", "losses"} <= set(colls)
    assert colls["weights"].tensor_names == {"Sequential_0.weight", "Sequential_2.weight"}
    assert colls["gradients"].tensor_names == set(GRADS)
    assert trial.tensor_names(collection="biases") == ["Sequential_0.bias", "Sequential_2.bias"]
    assert trial.tensor_names(collection="losses") == [LOSS]


def test_reductions_fixture():
    trial, steps = _load("smdebug_trial_reductions")
    assert trial.steps() == [0, 2, 4]
    assert trial.steps(ModeKeys.TRAIN) == [0, 2] and trial.steps(ModeKeys.EVAL) == [0]
    assert trial.tensor_names() == sorted([LOSS, *PARAMS, *GRADS])
    for step, exp in steps.items():
        gs = int(step)
        if gs % 2:
            continue
        assert float(trial.tensor(LOSS).value(gs)) == np.float32(exp["loss"])
        for name in PARAMS + (GRADS if exp["mode"] == "TRAIN" else []):
            tensor = trial.tensor(name)
            assert tensor.has_reductions_only(gs)
            with pytest.raises(ts.exceptions.TensorUnavailableForStep):
                tensor.value(gs)
            got = tensor.reduction_values(gs)
            assert set(got) == {("min", False), ("max", False), ("mean", False), ("l2", False), ("mean", True)}
            for key, want in exp[name].items():
                absolute = key.startswith("abs_")
                red = key[4:] if absolute else key
                np.testing.assert_allclose(tensor.reduction_value(gs, red, abs=absolute), want, rtol=1e-5, atol=1e-7)
