"""A TF2 Keras script in smdebug's idiom (SageMaker's tensorflow2 examples) runs unchanged on trainspect (issue 15)."""

from __future__ import annotations

import keras
import kerastrain
import numpy as np
import pytest


@pytest.fixture
def smd():
    from trainspect import smdebug_compat

    assert smdebug_compat.install()
    import smdebug.tensorflow as smd

    yield smd
    smdebug_compat.uninstall()


def test_kerashook_with_a_wrapped_optimizer_records_the_fit(tmp_path, smd):
    from smdebug.trials import create_trial

    x, y = kerastrain.data()
    hook = smd.KerasHook(
        out_dir=str(tmp_path / "run"),
        save_config=smd.SaveConfig(save_interval=1),
        include_collections=[smd.CollectionKeys.WEIGHTS, smd.CollectionKeys.LOSSES],
    )
    assert smd.get_hook() is hook
    model = kerastrain.model()
    optimizer = hook.wrap_optimizer(model.optimizer)
    assert optimizer is model.optimizer  # trainspect reads gradients from the training step
    seen = kerastrain.Recorder(x, y)
    hook.set_mode(smd.modes.TRAIN)
    hook.save_scalar("learning_rate", 0.1)  # before the first step: saved at it
    model.fit(x, y, batch_size=kerastrain.BATCH, epochs=1, callbacks=[seen, hook], verbose=0)
    hook.save_scalar("epoch_accuracy", 0.5, sm_metric=True)
    hook._cleanup()

    trial = create_trial(str(tmp_path / "run"))
    steps = kerastrain.N // kerastrain.BATCH
    assert trial.steps(mode=smd.modes.TRAIN) == list(range(steps))  # the scalars opened no step of their own
    assert trial.tensor("scalar/learning_rate").steps() == [0]
    assert trial.tensor("scalar/epoch_accuracy").steps() == [steps - 1]  # between steps: the last one
    name = kerastrain.tname(model, model.trainable_variables[0])
    for step, weights in enumerate(seen.train.weights):
        np.testing.assert_array_equal(trial.tensor(name).value(step), weights[name])
    assert trial.tensor_names(collection="losses")
    with pytest.raises(NotImplementedError, match="wrap_tape.*Model.fit"):
        hook.wrap_tape(None)
    assert isinstance(hook, keras.callbacks.Callback)
