"""Step-time overhead of trainspect's Keras hook, as ratios to plain ``fit`` (issue 7 targets).

    .venv/bin/python benchmarks/bench_keras.py [--quick] [--rounds N]

For each workload and configuration, two identical models A and B are compiled and traced; ``fit`` runs of 50
steps alternate between a plain one and a hooked one (order swapped every round): A plain and B hooked for half
the rounds, then B plain and A hooked, which cancels the few percent two model instances can differ by. Reported:
the geometric mean of the two halves' median wall-time ratios (and the spread of the per-round ratios, wall and
process CPU); each hooked ``fit`` ends with ``hook.flush()`` and ``hook.close()`` is added to the last round of
each half. Single-threaded TensorFlow, synthetic data.
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


WORKLOADS = {"dense": (dense, (784,), 128), "cnn": (cnn, (28, 28, 1), 64)}


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


def _phase(plain: keras.Model, hooked: keras.Model, hook: ts.keras.Hook, data: tuple, rounds: int,
           steps: int) -> tuple[list[float], list[float], list[float]]:  # fmt: skip
    x, y, batch = data
    sides = {"plain": lambda: plain.fit(x, y, batch_size=batch, verbose=0, shuffle=False),
             "hooked": lambda: hooked.fit(x, y, batch_size=batch, verbose=0, shuffle=False, callbacks=[hook])}  # fmt: skip
    for fn in sides.values():
        fn()  # trace (again, for a model whose taps were just removed)
    hook.flush()
    wall, cpu, plain_s = [], [], []
    for r in range(rounds):
        times = {}
        for k in ("plain", "hooked") if r % 2 == 0 else ("hooked", "plain"):
            times[k] = _timed(sides[k] if k == "plain" else lambda: (sides["hooked"](), hook.flush()))
        if r == rounds - 1:
            closing = _timed(hook.close)  # removes the taps; written data flushed
            times["hooked"] = (times["hooked"][0] + closing[0], times["hooked"][1] + closing[1])
        wall.append(times["hooked"][0] / times["plain"][0])
        cpu.append(times["hooked"][1] / times["plain"][1])
        plain_s.append(times["plain"][0] / steps)
    return wall, cpu, plain_s


def _compare(
    name: str, kwargs: dict, steps: int, rounds: int, base: str
) -> tuple[float, list[float], list[float], float]:
    """Two models, A and B: A plain and B hooked, then B plain and A hooked (the hook of the first half closed).

    Two model instances can differ by a few percent in speed (memory placement); swapping the roles cancels that:
    the ratio is the geometric mean of the two halves' medians. Each hooked ``fit`` ends with ``hook.flush()``, so
    the background writer's work is counted in the block that caused it.
    """
    _, shape, batch = WORKLOADS[name]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * batch, *shape)).astype("float32")
    y = rng.integers(0, 10, steps * batch).astype("int32")
    a, b = _model(name), _model(name)
    half = max(1, rounds // 2)
    w1, c1, p1 = _phase(a, b, ts.keras.Hook(tempfile.mkdtemp(dir=base), **kwargs), (x, y, batch), half, steps)
    w2, c2, p2 = _phase(b, a, ts.keras.Hook(tempfile.mkdtemp(dir=base), **kwargs), (x, y, batch), half, steps)
    ratio = (statistics.median(w1) * statistics.median(w2)) ** 0.5
    return ratio, w1 + w2, c1 + c2, statistics.median(p1 + p2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke test, not a measurement)")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    steps = 20 if args.quick else 50
    rounds = 3 if args.quick else max(3, args.rounds)
    base = tempfile.mkdtemp(prefix="bench_keras_")
    failed = False
    try:
        for workload in WORKLOADS:
            for label, (kwargs, target) in CONFIGS.items():
                ratio, wall, cpu, plain_step = _compare(workload, kwargs, steps, rounds, base)
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
