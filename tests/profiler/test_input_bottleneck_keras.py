"""InputBottleneck on a real Keras fit whose data adapter (a slow PyDataset) dominates the step (issue 13, point 4)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")

import trainspect as ts  # noqa: E402
from trainspect.cli import main  # noqa: E402


class SlowBatches(keras.utils.PyDataset):  # type: ignore[misc]
    """Batches that take 20 ms each to produce (reading and decoding, in a real pipeline)."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(0.02)
        rng = np.random.default_rng(i)
        return rng.normal(size=(8, 4)).astype("float32"), rng.integers(0, 3, 8).astype("int32")


def test_keras_input_bound_fit_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hook = ts.keras.Hook(
        str(tmp_path),
        include_collections=["losses"],
        profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
    )
    with hook:
        model.fit(SlowBatches(), epochs=1, callbacks=[hook], verbose=0)
    capsys.readouterr()
    code = main(["rules", str(tmp_path), "--rule", "InputBottleneck", "--json"])
    (v,) = json.loads(capsys.readouterr().out)
    assert code == 1 and v["status"] == "IssuesFound", v["message"]
    assert v["details"]["worker_0"]["input_wait_percent"] > 60.0
    assert "% of the step cycle waited for input" in v["message"] and v["mode"] == "TRAIN"
