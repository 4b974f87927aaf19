"""Issue 7: what the Keras hook captures equals what the test computes itself from the same real training run."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from kerastrain import BATCH, N, Recorder, data, model

import trainspect as ts
from trainspect.modes import ModeKeys

ALL = ["weights", "biases", "gradients", "losses", "optimizer_variables", "outputs"]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras") / "run"
    x, y = data()
    m = model()
    rec = Recorder(x, y)
    with ts.keras.Hook(
        out, export_tensorboard=True, save_config=ts.SaveConfig(save_interval=1), include_collections=ALL
    ) as hook:
        hist = m.fit(
            x,
            y,
            batch_size=BATCH,
            epochs=2,
            shuffle=False,
            verbose=0,
            callbacks=[rec, hook],
            validation_data=(x[:16], y[:16]),
        )
        ev = m.evaluate(x, y, batch_size=16, verbose=0, callbacks=[hook], return_dict=True)
        pred = m.predict(x, batch_size=16, verbose=0, callbacks=[hook])
    m.history_ = hist.history
    return out, m, rec, ev, pred, x


def test_weights_before_update_gradients_and_losses_match_a_gradient_tape(full_run):
    out, m, rec, _, _, _ = full_run
    trial = ts.create_trial(out)
    steps = trial.steps(mode=ModeKeys.TRAIN)
    assert steps == list(range(2 * N // BATCH))
    for step in steps:
        for name, value in rec.train.weights[step].items():
            np.testing.assert_array_equal(trial.tensor(name).value(step, mode=ModeKeys.TRAIN), value)
        for name, value in rec.train.grads[step].items():
            np.testing.assert_allclose(trial.tensor(name).value(step, mode=ModeKeys.TRAIN), value, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(
            float(trial.tensor("loss").value(step, mode=ModeKeys.TRAIN)), rec.train.losses[step], rtol=1e-5
        )
        assert float(trial.tensor("optimizer/learning_rate").value(step, mode=ModeKeys.TRAIN)) == pytest.approx(
            rec.train.lrs[step]
        )
        assert float(trial.tensor("optimizer/iterations").value(step, mode=ModeKeys.TRAIN)) == step
    assert not np.array_equal(
        rec.train.weights[0]["Sequential_dense.kernel"], rec.train.weights[1]["Sequential_dense.kernel"]
    )


def test_names_and_collections_follow_the_pytorch_scheme(full_run):
    trial = ts.create_trial(full_run[0])
    assert trial.tensor_names(collection="weights") == ["Sequential_dense.kernel", "Sequential_dense_1.kernel"]
    assert trial.tensor_names(collection="biases") == ["Sequential_dense.bias", "Sequential_dense_1.bias"]
    assert trial.tensor_names(collection="gradients") == sorted(
        f"gradient/Sequential_{p}" for p in ("dense.kernel", "dense.bias", "dense_1.kernel", "dense_1.bias")
    )
    assert trial.tensor_names(collection="losses") == ["loss"]
    assert trial.tensor_names(collection="metrics") == ["accuracy"]
    assert {"dense_output_0", "dense_1_output_0"} <= set(trial.tensor_names(collection="outputs"))
    assert trial.tensor_names(collection="optimizer_variables") == [
        "optimizer/iterations",
        "optimizer/learning_rate",
        "optimizer/momentum",
    ]


def test_modes_validation_evaluate_and_predict(full_run):
    out, m, _, ev, pred, x = full_run
    trial = ts.create_trial(out)
    assert trial.steps(mode=ModeKeys.EVAL) == list(range(2 * 2 + 2))  # 2 validation batches per epoch, then evaluate
    assert trial.steps(mode=ModeKeys.PREDICT) == [0, 1]
    assert trial.modes() == [ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT]
    # the last EVAL step is evaluate()'s last batch; evaluate's loss is the mean of its two batch losses
    losses = [float(trial.tensor("loss").value(s, mode=ModeKeys.EVAL)) for s in (4, 5)]
    assert np.mean(losses) == pytest.approx(ev["loss"], rel=1e-5)
    np.testing.assert_allclose(
        trial.tensor("dense_1_output_0").value(1, mode=ModeKeys.PREDICT), pred[16:], rtol=1e-5, atol=1e-6
    )
    hidden = np.maximum(x[:16] @ m.layers[0].kernel.numpy() + m.layers[0].bias.numpy(), 0)
    np.testing.assert_allclose(
        trial.tensor("dense_output_0").value(0, mode=ModeKeys.PREDICT), hidden, rtol=1e-5, atol=1e-6
    )
    assert "loss" not in [n for n in trial.tensor_names() if trial.tensor(n).steps(mode=ModeKeys.PREDICT)]


def test_metrics_are_recorded_at_the_end_of_each_epoch_and_evaluation(full_run):
    out, m, _, ev, _, _ = full_run
    acc = ts.create_trial(out).tensor("accuracy")
    assert acc.steps(mode=ModeKeys.TRAIN) == [3, 7]
    assert [float(acc.value(s, mode=ModeKeys.TRAIN)) for s in (3, 7)] == pytest.approx(m.history_["accuracy"])
    assert acc.steps(mode=ModeKeys.EVAL) == [1, 3, 5]
    assert [float(acc.value(s, mode=ModeKeys.EVAL)) for s in (1, 3)] == pytest.approx(m.history_["val_accuracy"])
    assert float(acc.value(5, mode=ModeKeys.EVAL)) == pytest.approx(ev["accuracy"])


def test_default_config_records_losses_and_metrics_every_step_only(tmp_path):
    x, y = data()
    m = model()
    with ts.keras.Hook(tmp_path / "run", export_tensorboard=False) as hook:
        hist = m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[hook])
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor_names() == ["accuracy", "loss"]
    assert trial.steps() == [0, 1, 2, 3]
    # logs' accuracy is Keras' running mean over the epoch: its last value is the epoch's
    assert float(trial.tensor("accuracy").value(3)) == pytest.approx(hist.history["accuracy"][-1])
    assert "compute_loss" not in vars(m) and m.train_function is None  # taps removed at close; Keras retraces


def test_save_interval_and_reductions(tmp_path):
    x, y = data()
    m = model()
    rc = ts.ReductionConfig(reductions=["mean"], abs_reductions=["max"], norms=["l2"])
    grads = ts.Collection("gradients", reduction_config=rc)
    with ts.keras.Hook(
        tmp_path / "run",
        export_tensorboard=False,
        save_config=ts.SaveConfig(save_interval=3),
        include_collections=["weights", grads],
    ) as hook:
        rec = Recorder(x, y)
        m.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[rec, hook])
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor("Sequential_dense.kernel").steps() == [0, 3, 6]
    g = trial.tensor("gradient/Sequential_dense.kernel")
    assert g.steps() == [0, 3, 6]
    want = rec.train.grads[3]["gradient/Sequential_dense.kernel"]
    assert g.reduction_value(3, "mean") == pytest.approx(want.mean(), rel=1e-4, abs=1e-7)
    assert g.reduction_value(3, "max", abs=True) == pytest.approx(np.abs(want).max(), rel=1e-5)
    assert g.reduction_value(3, "l2") == pytest.approx(np.linalg.norm(want), rel=1e-5)


def test_tensorboard_scalars_of_a_keras_run(full_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = list(full_run[0].glob("**/events.out.tfevents*"))
    assert events
    acc = EventAccumulator(str(events[0].parent), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"]) | set(acc.Tags()["scalars"])
    assert any("loss" in t for t in tags), tags


def test_recompiling_between_fits_reinstalls_the_taps(tmp_path):
    x, y = data()
    m = model()
    with ts.keras.Hook(
        tmp_path / "run",
        export_tensorboard=False,
        save_config=ts.SaveConfig(save_interval=1),
        include_collections=["gradients"],
    ) as hook:
        m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[hook])
        m.compile(
            optimizer=keras.optimizers.SGD(0.0), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        rec = Recorder(x, y)
        m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[rec, hook])
    assert not np.any(
        rec.train.weights[0]["Sequential_dense.kernel"] - rec.train.weights[-1]["Sequential_dense.kernel"]
    )  # lr 0 is used
    g = ts.create_trial(tmp_path / "run").tensor("gradient/Sequential_dense.kernel")
    np.testing.assert_allclose(g.value(5), rec.train.grads[1]["gradient/Sequential_dense.kernel"], rtol=1e-5, atol=1e-7)


def test_custom_collection_of_a_layers_inputs_and_outputs(tmp_path):
    x, y = data()
    m = model()
    hook = ts.keras.Hook(tmp_path / "run", export_tensorboard=False, save_config=ts.SaveConfig(save_interval=2))
    hook.get_collection("hidden").add_module_tensors(m.layers[0], inputs=True, outputs=True)
    with hook:
        m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[hook])
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor_names(collection="hidden") == ["dense_input_0", "dense_output_0"]
    assert trial.tensor("dense_input_0").steps() == [0, 2]
    np.testing.assert_array_equal(trial.tensor("dense_input_0").value(2), x[16:24])


def test_trainspect_disable_leaves_the_model_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSPECT_DISABLE", "1")
    x, y = data()
    m = model()
    with ts.keras.Hook(tmp_path / "run", include_collections=["weights", "gradients"], rules="default") as hook:
        m.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[hook])
    assert not (tmp_path / "run").exists()
    assert "compute_loss" not in vars(m) and "apply" not in vars(m.optimizer)
