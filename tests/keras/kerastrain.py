"""A small Keras model trained for real, recording its own weights, gradients and losses to compare with captures."""

from __future__ import annotations

from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

BATCH = 8
N = 32


@dataclass
class Seen:
    """What the test saw itself at the steps of one mode, in order."""

    weights: list[dict[str, np.ndarray]] = field(default_factory=list)
    grads: list[dict[str, np.ndarray]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)


def data(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(N, 4)).astype("float32"), rng.integers(0, 3, N).astype("int32")


def model(lr: float = 0.1, policy: str = "float32", **compile_kw) -> keras.Model:
    keras.backend.clear_session()  # layer names restart at dense, dense_1
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(3)])
    m.compile(
        optimizer=keras.optimizers.SGD(lr, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        **compile_kw,
    )
    return m


def tname(model, var) -> str:
    return type(model).__name__ + "_" + var.path.split("/", 1)[1].replace("/", ".")


class Recorder(keras.callbacks.Callback):
    """Before each training batch: the weights, and loss and gradients from a GradientTape on that same batch."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        super().__init__()
        self.x, self.y, self.train = x, y, Seen()

    def on_train_batch_begin(self, batch, logs=None):
        m = self.model
        xb, yb = self.x[batch * BATCH : (batch + 1) * BATCH], self.y[batch * BATCH : (batch + 1) * BATCH]
        self.train.weights.append({tname(m, v): v.numpy().copy() for v in m.trainable_variables})
        with tf.GradientTape() as tape:
            loss = m.loss(yb, m(xb, training=True))
        grads = tape.gradient(loss, m.trainable_variables)
        self.train.grads.append(
            {"gradient/" + tname(m, v): g.numpy() for v, g in zip(m.trainable_variables, grads, strict=True)}
        )
        self.train.losses.append(float(loss))
        self.train.lrs.append(float(m.optimizer.learning_rate))
