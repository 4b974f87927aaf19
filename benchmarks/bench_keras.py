"""Step-time overhead of trainspect's Keras hook, as ratios to plain ``fit`` (issue 7 targets).

    .venv/bin/python benchmarks/bench_keras.py [--quick] [--rounds N]

For each workload and configuration, two identical models are compiled and warmed up (traced), one plain and one
with the hook; then ``fit`` runs of a few dozen steps alternate between them (order swapped every round), so load
from other jobs on a shared machine hits both sides alike. Reported: the median over rounds of the per-round ratio
of wall time, and of the process's CPU time (all threads, the writer's included); ``hook.close()`` is added to the
hooked side's last round. Single-threaded TensorFlow, synthetic data.
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


def _compare(name: str, kwargs: dict, steps: int, rounds: int, base: str) -> tuple[list[float], list[float], float]:
    _, shape, batch = WORKLOADS[name]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * batch, *shape)).astype("float32")
    y = rng.integers(0, 10, steps * batch).astype("int32")
    plain, hooked = _model(name), _model(name)
    hook = ts.keras.Hook(tempfile.mkdtemp(dir=base), **kwargs)
    sides = {"plain": lambda: plain.fit(x, y, batch_size=batch, verbose=0, shuffle=False),
             "hooked": lambda: hooked.fit(x, y, batch_size=batch, verbose=0, shuffle=False, callbacks=[hook])}  # fmt: skip
    for fn in sides.values():
        fn()  # trace
    wall, cpu, plain_s = [], [], []
    for r in range(rounds):
        times = {k: _timed(sides[k]) for k in (("plain", "hooked") if r % 2 == 0 else ("hooked", "plain"))}
        if r == rounds - 1:
            closing = _timed(hook.close)
            times["hooked"] = (times["hooked"][0] + closing[0], times["hooked"][1] + closing[1])
        wall.append(times["hooked"][0] / times["plain"][0])
        cpu.append(times["hooked"][1] / times["plain"][1])
        plain_s.append(times["plain"][0] / steps)
    return wall, cpu, statistics.median(plain_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke test, not a measurement)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    steps = 20 if args.quick else 50
    rounds = 3 if args.quick else max(3, args.rounds)
    base = tempfile.mkdtemp(prefix="bench_keras_")
    failed = False
    try:
        for workload in WORKLOADS:
            for label, (kwargs, target) in CONFIGS.items():
                wall, cpu, plain_step = _compare(workload, kwargs, steps, rounds, base)
                ratio = statistics.median(wall)
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
