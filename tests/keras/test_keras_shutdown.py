"""A Keras hook the script never closes is closed at interpreter exit, and on SIGTERM (issue 14)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

import trainspect as ts

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import keras, numpy as np
    import trainspect as ts
    out, how = sys.argv[1], sys.argv[2]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hook = ts.keras.Hook(out, include_collections=["weights", "losses"], save_config=ts.SaveConfig(save_interval=1))
    x, y = np.random.rand(64, 4).astype("float32"), np.random.randint(0, 3, 64)

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if how == "sigterm" and batch == 5:
                os.kill(os.getpid(), signal.SIGTERM)

    model.fit(x, y, batch_size=8, epochs=1, callbacks=[hook, Stop()], verbose=0)
    print("finished", flush=True)
    """
)


@pytest.mark.parametrize(("how", "steps", "rc"), [("none", 8, 0), ("sigterm", 6, -signal.SIGTERM)])
def test_a_keras_hook_never_closed_leaves_a_complete_run(tmp_path, how, steps, rc):
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(script), str(out), how], capture_output=True, text=True, timeout=300)
    assert proc.returncode == rc, proc.stderr
    trial = ts.create_trial(str(out))
    assert trial.steps(mode=ts.modes.TRAIN) == list(range(steps))
    assert (out / "training_job_end.ts").exists()
