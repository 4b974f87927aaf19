"""Step-time overhead of trainspect's Keras hook, as ratios to plain ``fit`` (issue 7 targets).

    .venv/bin/python benchmarks/bench_keras.py [--quick] [--rounds N] [--phases P]

One model per workload and configuration, toggled: ``fit`` runs of ~0.5 s alternate between plain Keras (the
function Keras traced without trainspect, no callbacks) and the hooked model (the functions traced with the hook's
taps, the hook as callback), order swapped every round. Two model instances, or two traces of the same step, can
differ by a few percent in speed here, so comparing one instance with itself removes the first and P phases, each
with a fresh hook and fresh traces of both sides, average the second: reported is the geometric mean of the phases'
median wall-time ratios, with the spread of the per-round ratios (wall and process CPU). Each hooked ``fit`` ends
with ``hook.flush()`` (the background writer's work counts in the block that caused it) and each phase's
``hook.close()`` is added to its last hooked round. Single-threaded TensorFlow, synthetic data.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import trainspect as ts  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)

CONFIGS = {
    "default (losses every step)": (dict(), 1.05),
    "weights+gradients every 100": (
        dict(
            include_collections=["weights", "biases", "gradients", "losses"],
            save_config=ts.SaveConfig(save_interval=100),
        ),
        1.10,
    ),
}


def dense() -> keras.Model:
    """An MNIST-sized MLP."""
    return keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def cnn() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    )


WORKLOADS = {"dense": (dense, (784,), 128, 80), "cnn": (cnn, (28, 28, 1), 64, 25)}
"""name -> (model, input shape, batch size, steps per ``fit``: ~0.5 s)"""


def _model(name: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = WORKLOADS[name][0]()
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _timed(fn) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def _fit(model: keras.Model, data: tuple, callbacks: list) -> None:
    x, y, batch = data
    model.fit(x, y, batch_size=batch, verbose=0, shuffle=False, callbacks=callbacks)


def _phase(model: keras.Model, kwargs: dict, data: tuple, rounds: int, base: str) -> tuple[list[float], list[float]]:
    """Trace both sides afresh, then alternate plain and hooked ``fit``s; return the per-round (wall, cpu) ratios."""
    model.make_train_function(force=True)
    _fit(model, data, [])
    plain_fn = model.train_function
    hook = ts.keras.Hook(tempfile.mkdtemp(dir=base), **kwargs)
    _fit(model, data, [hook])  # traces the hooked functions
    hook.flush()

    def plain() -> None:
        hooked_fn, model.train_function = model.train_function, plain_fn
        try:
            _fit(model, data, [])
        finally:
            model.train_function = hooked_fn

    def hooked() -> None:
        _fit(model, data, [hook])
        hook.flush()

    wall, cpu = [], []
    for r in range(rounds):
        times = {}
        for side, fn in (
            (("plain", plain), ("hooked", hooked)) if r % 2 == 0 else (("hooked", hooked), ("plain", plain))
        ):
            times[side] = _timed(fn)
        if r == rounds - 1:
            closing = _timed(hook.close)  # removes the taps; written data flushed
            times["hooked"] = (times["hooked"][0] + closing[0], times["hooked"][1] + closing[1])
        wall.append(times["hooked"][0] / times["plain"][0])
        cpu.append(times["hooked"][1] / times["plain"][1])
    return wall, cpu


def _compare(
    name: str, kwargs: dict, rounds: int, phases: int, base: str
) -> tuple[float, list[float], list[float], float]:
    """Return (ratio, per-round wall ratios, per-round cpu ratios, plain seconds per step) for one configuration."""
    _, shape, batch, steps = WORKLOADS[name]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * batch, *shape)).astype("float32")
    y = rng.integers(0, 10, steps * batch).astype("int32")
    model = _model(name)
    _fit(model, (x, y, batch), [])
    plain_s = statistics.median(_timed(lambda: _fit(model, (x, y, batch), []))[0] for _ in range(3)) / steps
    wall, cpu, medians = [], [], []
    for _ in range(phases):
        w, c = _phase(model, kwargs, (x, y, batch), max(1, rounds // phases), base)
        wall += w
        cpu += c
        medians.append(statistics.median(w))
    return statistics.geometric_mean(medians), wall, cpu, plain_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two rounds, one phase (a smoke test, not a measurement)")
    parser.add_argument("--rounds", type=int, default=48, help="rounds per configuration, over all phases")
    parser.add_argument("--phases", type=int, default=4, help="fresh hook and traces this many times")
    args = parser.parse_args()
    rounds, phases = (2, 1) if args.quick else (max(args.phases, args.rounds), max(1, args.phases))
    base = tempfile.mkdtemp(prefix="bench_keras_")
    failed = False
    try:
        for workload in WORKLOADS:
            for label, (kwargs, target) in CONFIGS.items():
                ratio, wall, cpu, plain_step = _compare(workload, kwargs, rounds, phases, base)
                ok = ratio <= target
                failed |= not ok
                print(
                    f"{workload:6s} {label:28s} plain {plain_step * 1e3:6.2f} ms/step  "
                    f"wall ratio {ratio:5.3f} [{min(wall):.2f}..{max(wall):.2f}]  "
                    f"cpu ratio {statistics.median(cpu):5.3f} [{min(cpu):.2f}..{max(cpu):.2f}]  "
                    f"target <= {target:.2f} {'ok' if ok else 'MISSED'}",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if failed:
        print("some targets missed (on a loaded machine, rerun before concluding)")


if __name__ == "__main__":
    main()
