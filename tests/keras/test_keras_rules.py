"""Issue 7: rules need no framework-specific configuration; one scenario gives the same verdict in Keras and PyTorch."""

from __future__ import annotations

import keras
import numpy as np
import torch
from kerastrain import data, model

import trainspect as ts
from trainspect.rules import DeadRelu, ExplodingTensor, Status


def _keras_nan_run(out):
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32") * 100
    y = rng.normal(size=(64, 1)).astype("float32") * 100
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    m.compile(optimizer=keras.optimizers.SGD(1e12), loss="mse")
    with ts.keras.Hook(out, export_tensorboard=False, rules=[ExplodingTensor()]) as hook:
        m.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[hook])


def _torch_nan_run(out):
    torch.manual_seed(0)
    x, y = torch.randn(64, 4) * 100, torch.randn(64, 1) * 100
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(m.parameters(), lr=1e12)
    loss_fn = torch.nn.MSELoss()
    with ts.torch.Hook(out, export_tensorboard=False, rules=[ExplodingTensor()]) as hook:
        hook.register_module(m)
        hook.register_loss(loss_fn)
        for _epoch in range(2):
            for i in range(0, 64, 8):
                opt.zero_grad()
                loss_fn(m(x[i : i + 8]), y[i : i + 8]).backward()
                opt.step()


def test_nan_from_a_huge_learning_rate_is_found_in_both_frameworks(tmp_path):
    verdicts = {}
    for name, train in (("keras", _keras_nan_run), ("torch", _torch_nan_run)):
        out = tmp_path / name
        train(out)
        trial = ts.create_trial(out)
        assert trial.tensor_names(collection="gradients"), name  # the rule's needs were recorded without configuration
        offline = ts.rules.evaluate(trial, [ExplodingTensor()], write=False)[0]
        live = [v for v in ts.rules.load_verdicts(out) if v.rule == "ExplodingTensor"]
        verdicts[name] = (offline.status, live[-1].status if live else None)
    assert verdicts["keras"] == verdicts["torch"] == (Status.ISSUES_FOUND, Status.ISSUES_FOUND), verdicts


def test_relu_requirements_map_to_keras_activations(tmp_path):
    keras.backend.clear_session()
    inp = keras.Input((4,))
    h = keras.layers.Dense(6, activation="relu", name="fused")(inp)
    h = keras.layers.Dense(5, name="linear")(h)
    h = keras.layers.ReLU(name="relu_layer")(h)
    h = keras.layers.Activation("tanh", name="tanh_layer")(h)
    m = keras.Model(inp, keras.layers.Dense(3, name="head")(h))
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data()
    with ts.keras.Hook(tmp_path / "run", export_tensorboard=False, rules=[DeadRelu()]) as hook:
        m.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[hook])
    trial = ts.create_trial(tmp_path / "run")
    relu = {n for n in trial.tensor_names() if "_output_" in n}
    assert relu == {"fused_output_0", "relu_layer_output_0"}, relu
    verdict = ts.rules.evaluate(trial, [DeadRelu()], write=False)[0]
    assert verdict.status in (Status.NO_ISSUES_FOUND, Status.ISSUES_FOUND), verdict.message


def test_model_fixture_names_are_stable():
    assert [v.path for v in model().trainable_variables][0] == "sequential/dense/kernel"
