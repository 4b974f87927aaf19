"""Issue 7: config errors at construction; internal failures never reach fit; unusual models work or say what is missing."""

from __future__ import annotations

import json
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from kerastrain import BATCH, Recorder, data, model

import trainspect as ts
from trainspect.hooks import keras_model
from trainspect.modes import ModeKeys


def _warnings(caplog):
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("trainspect")]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"include_collections": ["nope"]}, "unknown collection 'nope'"),
        ({"save_config": {"save_interval": 1}}, "expected a SaveConfig"),
        ({"include_workers": "some"}, "include_workers='some'"),
        ({"rules": "everything"}, "rules='everything'"),
    ],
)
def test_config_errors_raise_at_construction(tmp_path, kwargs, match):
    with pytest.raises((ts.ConfigError, ValueError), match=match):
        ts.keras.Hook(tmp_path / "run", **kwargs)


def test_json_config(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(
        json.dumps(
            {
                "LocalPath": str(tmp_path / "run"),
                "HookParameters": {"save_interval": "2"},
                "CollectionConfigurations": [{"CollectionName": "weights"}],
            }
        )
    )
    hook = ts.keras.Hook.create_from_json_file(cfg)
    x, y = data()
    with hook:
        model().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[hook])
    assert ts.create_trial(tmp_path / "run").tensor("Sequential_dense.kernel").steps() == [0, 2]
    cfg.write_text(json.dumps({"LocalPath": str(tmp_path / "bad"), "HookParameters": {"save_intervall": "2"}}))
    with pytest.raises(ts.ConfigError, match="save_intervall"):
        ts.keras.Hook.create_from_json_file(cfg)
    # a PyTorch-only setting in a config shared with a PyTorch job: ignored by the Keras hook, with one line
    cfg.write_text(json.dumps({"LocalPath": str(tmp_path / "both"), "HookParameters": {"local_gradients": "true"}}))
    with caplog_at_warning() as lines:
        ts.keras.Hook.create_from_json_file(cfg).close()
    assert [line for line in lines if "local_gradients is a PyTorch hook setting" in line]


def test_an_internal_failure_never_reaches_fit(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    caplog.set_level(logging.WARNING)
    real, calls = keras_model.to_host, {"n": 0}

    def broken(value, plan):
        calls["n"] += 1
        if calls["n"] > 6:
            raise RuntimeError("boom inside trainspect")
        return real(value, plan)

    monkeypatch.setattr(keras_model, "to_host", broken)
    x, y = data()
    m = model()
    hook = ts.keras.Hook(
        tmp_path / "run",
        export_tensorboard=False,
        include_collections=["weights", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
    )
    hist = m.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[hook])  # must not raise
    hook.close()
    assert len(hist.history["loss"]) == 2
    warns = _warnings(caplog)
    assert len(warns) == 1 and "disabled" in warns[0].getMessage(), [w.getMessage() for w in warns]
    assert hook.disabled
    trial = ts.create_trial(tmp_path / "run")
    assert trial.loaded_all_steps and 0 in trial.steps()


def test_user_errors_pass_through_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    x, y = data()
    with ts.keras.Hook(tmp_path / "run", export_tensorboard=False) as hook, pytest.raises(ValueError):
        model().fit(x[:, :3], y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[hook])


class Scale(keras.layers.Layer):
    """A custom layer with its own weight."""

    def build(self, shape):
        self.alpha = self.add_weight(shape=(shape[-1],), initializer="ones", name="alpha")

    def call(self, x):
        return x * self.alpha


class Net(keras.Model):
    """A subclassed model with a custom layer."""

    def __init__(self):
        super().__init__()
        self.scale = Scale()
        self.dense = keras.layers.Dense(3)

    def call(self, x):
        return self.dense(self.scale(x))


def test_subclassed_model_with_a_custom_layer(tmp_path):
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    m = Net()
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data()
    rec = Recorder(x, y)
    with ts.keras.Hook(
        tmp_path / "run",
        export_tensorboard=False,
        save_config=ts.SaveConfig(save_interval=1),
        include_collections=["weights", "gradients", "outputs"],
    ) as hook:
        m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[rec, hook])
    trial = ts.create_trial(tmp_path / "run")
    assert "Net_scale.alpha" in trial.tensor_names(collection="weights")
    assert {"scale_output_0", "dense_output_0"} <= set(trial.tensor_names(collection="outputs"))
    np.testing.assert_allclose(
        trial.tensor("gradient/Net_scale.alpha").value(2),
        rec.train.grads[2]["gradient/Net_scale.alpha"],
        rtol=1e-5,
        atol=1e-7,
    )


def test_mixed_precision_gradients_are_unscaled(tmp_path):
    try:
        m = model(policy="mixed_float16")
        assert isinstance(m.optimizer, keras.optimizers.LossScaleOptimizer)
        x, y = data()
        rec = Recorder(x, y)
        with ts.keras.Hook(
            tmp_path / "run",
            export_tensorboard=False,
            save_config=ts.SaveConfig(save_interval=1),
            include_collections=["gradients"],
        ) as hook:
            m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[rec, hook])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    trial = ts.create_trial(tmp_path / "run")
    got = trial.tensor("gradient/Sequential_dense.kernel").value(1)
    np.testing.assert_allclose(got, rec.train.grads[1]["gradient/Sequential_dense.kernel"], rtol=2e-2, atol=2e-3)


def test_jit_compile_captures_gradients_and_says_outputs_are_not(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    m = model(jit_compile=True)
    x, y = data()
    rec = Recorder(x, y)
    with ts.keras.Hook(
        tmp_path / "run",
        export_tensorboard=False,
        save_config=ts.SaveConfig(save_interval=1),
        include_collections=["gradients", "outputs"],
    ) as hook:
        m.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), epochs=1, verbose=0, callbacks=[rec, hook])
    warns = _warnings(caplog)
    assert len(warns) == 1 and "jit_compile=True" in warns[0].getMessage() and "not captured" in warns[0].getMessage()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor_names(collection="outputs") == []
    np.testing.assert_allclose(
        trial.tensor("gradient/Sequential_dense.kernel").value(3),
        rec.train.grads[3]["gradient/Sequential_dense.kernel"],
        rtol=1e-4,
        atol=1e-6,
    )


class CondLossStep(keras.Sequential):
    """A custom train step that computes its loss inside a ``tf.cond`` branch (a nested graph)."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = tf.cond(
                tf.constant(True), lambda: self.compute_loss(x=x, y=y, y_pred=pred), lambda: tf.constant(0.0)
            )
        self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
        return {"loss": loss}


class _LogKeys(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.keys: set[str] = set()

    def on_train_batch_end(self, batch, logs=None):
        self.keys |= set(logs or {})


@pytest.mark.parametrize("variant", ["graph", "eager", "jit_compile", "loss in a nested graph"])
def test_batch_losses_of_every_kind_of_step_and_logs_left_as_keras_makes_them(tmp_path, variant):
    if variant == "loss in a nested graph":
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        m = CondLossStep([keras.Input((4,)), keras.layers.Dense(3)])
        m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    else:
        m = model(run_eagerly=variant == "eager", jit_compile=variant == "jit_compile")
    x, y = data()
    rec, keys = Recorder(x, y), _LogKeys()
    with ts.keras.Hook(tmp_path / "run", export_tensorboard=False) as hook:
        hist = m.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[rec, keys, hook])
        ev = m.evaluate(x, y, batch_size=16, verbose=0, callbacks=[hook], return_dict=True)
        # only a loss computed in a nested graph goes through the shadow variable (an eager read per step)
        assert hook._view.taps._shadowed == (variant == "loss in a nested graph")
    loss = ts.create_trial(tmp_path / "run").tensor("loss")
    assert loss.steps(mode=ModeKeys.TRAIN) == list(range(8))
    got = [float(loss.value(s, mode=ModeKeys.TRAIN)) for s in range(8)]
    np.testing.assert_allclose(got, rec.train.losses, rtol=1e-5)
    assert loss.steps(mode=ModeKeys.EVAL) == [0, 1]  # evaluate's batches
    assert float(np.mean([loss.value(s, mode=ModeKeys.EVAL) for s in (0, 1)])) == pytest.approx(ev["loss"], rel=1e-5)
    # the step's loss leaves Keras' logs, History and evaluate's result as they are without trainspect
    assert keys.keys == set(hist.history) == set(ev)
    assert all(not k.startswith("__trainspect") for k in keys.keys)


class caplog_at_warning:  # noqa: N801 - a context manager named as it reads
    """The messages logged at WARNING by trainspect inside the block."""

    def __enter__(self) -> list[str]:
        self.lines: list[str] = []
        self.handler = logging.Handler(logging.WARNING)
        self.handler.emit = lambda record: self.lines.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("trainspect").addHandler(self.handler)
        return self.lines

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("trainspect").removeHandler(self.handler)


def test_a_gradienttape_loop_records_nothing_and_the_close_says_why(tmp_path, caplog):
    """A custom GradientTape loop is not instrumented: the hook's close says that nothing was recorded, and why."""
    caplog.set_level(logging.WARNING)
    m = model()
    x, y = data()
    optimizer = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with ts.keras.Hook(tmp_path / "run", export_tensorboard=False, save_config=ts.SaveConfig(save_interval=1)):
        for start in range(0, 64, BATCH):
            with tf.GradientTape() as tape:
                loss = loss_fn(y[start : start + BATCH], m(x[start : start + BATCH], training=True))
            grads = tape.gradient(loss, m.trainable_variables)
            optimizer.apply(grads, m.trainable_variables)
    lines = [w.getMessage() for w in _warnings(caplog)]
    assert len(lines) == 1, lines
    assert "nothing was recorded" in lines[0] and "GradientTape" in lines[0] and "callbacks=[hook]" in lines[0]


def test_a_trained_model_gets_no_such_word(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    m, (x, y) = model(), data()
    with ts.keras.Hook(tmp_path / "run", export_tensorboard=False) as hook:
        m.fit(x[:32], y[:32], batch_size=BATCH, epochs=1, verbose=0, callbacks=[hook])
    assert not [w for w in _warnings(caplog) if "nothing was recorded" in w.getMessage()]
