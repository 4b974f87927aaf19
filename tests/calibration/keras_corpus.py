"""The Keras member of the calibration corpus: a healthy ``model.fit`` with validation data (imports TensorFlow)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.config import SaveConfig  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)


def healthy_keras_fit(out: Path) -> None:
    """An MLP on a noisy linear-teacher task, Adam, validation on held-out data every epoch."""
    from corpus import COLLECTIONS, SAVE_EVERY

    rng = np.random.default_rng(30)
    w = rng.normal(size=(16, 4))
    x = rng.normal(size=(1280, 16)).astype("float32")
    y = (x @ w).argmax(1)
    y = np.where(rng.random(1280) < 0.2, rng.integers(0, 4, 1280), y).astype("int32")
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(4),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    hook = ts.keras.Hook(
        out,
        export_tensorboard=False,
        save_config=SaveConfig(save_interval=SAVE_EVERY),
        include_collections=list(COLLECTIONS),
    )
    with hook:
        model.fit(
            x[:1024],
            y[:1024],
            batch_size=32,
            epochs=8,
            verbose=0,
            validation_data=(x[1024:], y[1024:]),
            callbacks=[hook],
        )
