"""Record a Keras training run: one callback for fit, validation, evaluate and predict.

python examples/keras_example.py --out runs/keras --epochs 3
tensorboard --logdir runs
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.rules import ExplodingTensor, VanishingGradient  # noqa: E402


def make_data(n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Return a learnable synthetic classification set (4 Gaussian blobs in 20 dimensions)."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 20)) * 2
    labels = rng.integers(0, 4, n)
    return (centers[labels] + rng.normal(size=(n, 20))).astype("float32"), labels.astype("int32")


def train(out_dir: str, epochs: int = 3) -> str:
    """Train a small dense model with the hook and return the run directory."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    x, y = make_data()
    hook = ts.keras.Hook(
        out_dir,
        save_config=ts.SaveConfig(save_interval=25),
        include_collections=["weights", "biases", "gradients", "losses", "optimizer_variables"],
        rules=[VanishingGradient(), ExplodingTensor()],
    )
    with hook:
        model.fit(x[:896], y[:896], batch_size=32, epochs=epochs, validation_split=0.1, verbose=0, callbacks=[hook])
        scores = model.evaluate(x[896:], y[896:], batch_size=64, verbose=0, callbacks=[hook], return_dict=True)
        model.predict(x[896:], batch_size=64, verbose=0, callbacks=[hook])
    print(f"evaluate: {scores}")
    return out_dir


def main() -> None:
    """Parse arguments, train, and say where the run is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/keras")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    out = train(args.out, args.epochs)
    trial = ts.create_trial(out)
    print(f"run directory: {out}")
    print(f"steps: {len(trial.steps(mode=ts.modes.TRAIN))} train, {len(trial.steps(mode=ts.modes.EVAL))} eval")
    for verdict in ts.rules.load_verdicts(out):
        print(f"{verdict.rule}: {verdict.status}")
    print(f"tensorboard --logdir {os.path.dirname(os.path.abspath(out))}")


if __name__ == "__main__":
    main()
