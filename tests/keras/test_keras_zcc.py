"""Issue 7: the example runs; autolog and `trainspect run` instrument an unmodified Keras script; profiling works."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import keras
import numpy as np
from kerastrain import BATCH, data, model

import trainspect as ts
from trainspect.hooks import zcc
from trainspect.profiler.detailed import read_tables
from trainspect.profiler.readers import FrameworkMetricsReader

ROOT = Path(__file__).resolve().parents[2]
TRAINSPECT = str(Path(sys.executable).parent / "trainspect")


def test_keras_example_runs(tmp_path):
    out = tmp_path / "example"
    proc = subprocess.run(
        [sys.executable, "examples/keras_example.py", "--out", str(out), "--epochs", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"run directory: {out}" in proc.stdout and "steps: 52 train, 8 eval" in proc.stdout, proc.stdout
    trial = ts.create_trial(out)
    assert trial.tensor("Sequential_dense.kernel").steps(ts.modes.TRAIN) == [0, 25, 50]
    verdicts = ts.rules.load_verdicts(out)
    assert {v.rule for v in verdicts if v.source == "live"} == {"VanishingGradient", "ExplodingTensor"}
    assert all(v.source == "report" for v in verdicts if v.source != "live")  # the others, judged at close


def test_trainspect_run_on_an_unmodified_keras_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import numpy as np, keras
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
        m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        x = np.random.rand(32, 4).astype("float32"); y = np.random.randint(0, 3, 32)
        m.fit(x, y, batch_size=8, epochs=2, verbose=0, validation_split=0.25)
        m.evaluate(x, y, batch_size=16, verbose=0)
        m.predict(x, batch_size=16, verbose=0)
        import sys; print("torch imported:", "torch" in sys.modules)
    """)
    )
    config = tmp_path / "cfg.json"
    config.write_text(
        '{"HookParameters": {"save_interval": "3"}, "CollectionConfigurations": [{"CollectionName": "weights"}]}'
    )
    out = tmp_path / "run"
    proc = subprocess.run(
        [TRAINSPECT, "run", "--out", str(out), "--config", str(config), "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "torch imported: False" in proc.stdout  # a Keras (TensorFlow) script under trainspect run never loads torch
    trial = ts.create_trial(out)
    assert trial.loaded_all_steps
    assert trial.steps(ts.modes.TRAIN) == list(range(6))
    assert trial.steps(ts.modes.EVAL) == [0, 1, 2, 3]  # one validation batch per epoch, then two evaluate batches
    assert trial.tensor("loss").steps(ts.modes.TRAIN) == list(range(6))
    assert trial.tensor("Sequential_dense.kernel").steps(ts.modes.TRAIN) == [0, 3]
    assert trial.tensor_names(collection="metrics") == ["accuracy"]


def test_autolog_patches_fit_evaluate_predict_and_close_restores_them(tmp_path):
    fit = keras.Model.fit
    logger = ts.autolog(
        out_dir=tmp_path / "run",
        profiler_config=ts.ProfilerConfig(framework_profile_params={"start_step": 1, "num_steps": 2}),
    )
    assert logger is not None
    try:
        assert keras.Model.fit is not fit
        x, y = data()
        m = model()
        m.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
        m.evaluate(x, y, batch_size=16, verbose=0)
    finally:
        logger.close()
    assert keras.Model.fit is fit and not zcc._ACTIVE
    trial = ts.create_trial(tmp_path / "run")
    assert trial.steps(ts.modes.TRAIN) == [0, 1, 2, 3] and trial.steps(ts.modes.EVAL) == [0, 1]
    frames = FrameworkMetricsReader(tmp_path / "run").to_dataframe()
    assert len(frames) >= 6, frames
    ops = read_tables(tmp_path / "run" / "profiler" / "detailed", "operators")
    assert len(ops) > 0 and set(ops["start_step"]) == {1} and set(ops["end_step"]) == {3}
    assert (ops["self_time_us"] >= 0).all() and any("MatMul" in n for n in ops["name"])
    assert np.isfinite(ops["total_time_us"]).all()


class _StepGate(keras.callbacks.Callback):
    """Counts the training steps begun, after the hook's ``on_train_batch_begin`` (it comes first in the list)."""

    def __init__(self) -> None:
        super().__init__()
        self.cond = threading.Condition()
        self.begun = 0
        self.ended = False

    def on_train_batch_begin(self, batch, logs=None):  # noqa: ANN001
        with self.cond:
            self.begun += 1
            self.cond.notify_all()

    def on_train_end(self, logs=None):  # noqa: ANN001
        with self.cond:
            self.ended = True  # let a generator prefetched past the last step finish
            self.cond.notify_all()


def test_input_wait_of_a_slow_generator_is_recorded_as_dataloader_time(tmp_path):
    """A batch made only after its step began, in 50 ms, is waited on for at least 50 ms: on any machine load.

    Keras reads the generator ahead (two batches for the tensor spec, then tf.data's prefetch), so a generator
    that just sleeps is waited on only while the steps are faster than it, which a loaded machine breaks. Here
    batch ``i`` is made once step ``i`` has begun; the hook stamped that step's start before, so its wait is
    bounded from below. The batches Keras peeks at from the main thread before training are left free.
    """
    x, y = data()
    gate = _StepGate()
    free = []

    def slow():
        made = 0
        while True:
            for i in range(0, len(x), BATCH):
                if threading.current_thread() is threading.main_thread():
                    free.append(made)  # Keras peeking at the first batches inside fit(), before any step
                else:
                    with gate.cond:
                        assert gate.cond.wait_for(lambda n=made: gate.begun > n or gate.ended, timeout=120)
                time.sleep(0.05)
                made += 1
                yield x[i : i + BATCH], y[i : i + BATCH]

    m = model()
    with ts.keras.Hook(tmp_path / "run", export_tensorboard=False, profiler_config=ts.ProfilerConfig()) as hook:
        m.fit(slow(), steps_per_epoch=4, epochs=2, verbose=0, callbacks=[hook, gate])
    frame = FrameworkMetricsReader(tmp_path / "run").to_dataframe()
    waits = frame[frame["event_name"] == "DataLoaderIter"]["duration"].to_numpy()
    steps = frame[frame["event_name"].str.startswith("Step:")]["duration"].to_numpy()
    assert len(steps) == 8 and len(waits) == 8
    assert free == list(range(len(free))) and len(free) <= 2, free
    assert (waits >= 0.05 - 1e-3).sum() >= 8 - len(free), waits  # every gated batch: its 50 ms at least
    assert (waits <= steps + 1e-6).all()


def test_autolog_in_a_torch_only_script_never_imports_tensorflow(tmp_path):
    code = textwrap.dedent(f"""
        import sys, trainspect
        logger = trainspect.autolog(out_dir={str(tmp_path / "run")!r})
        import torch
        m = torch.nn.Linear(2, 1); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad(); torch.nn.functional.mse_loss(m(torch.ones(4, 2)), torch.zeros(4, 1)).backward(); opt.step()
        logger.close()
        print(sorted(k for k in ("tensorflow", "keras") if k in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert ts.create_trial(tmp_path / "run").steps(ts.modes.TRAIN) == [0, 1, 2]
