"""Issue 2: a SIGKILLed job leaves a readable run; truncated and corrupt records are skipped, never returned."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from storetrain import LOSS, tname, write_run

import trainspect as ts
from trainspect.exceptions import TensorUnavailableForStep

W0 = tname("0.weight")

CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {hooks!r})
    from hooktrain import Tiny
    import trainspect as ts
    tiny = Tiny()
    hook = ts.torch.Hook({out!r}, include_collections=["weights", "losses"], save_config=ts.SaveConfig(save_interval=1))
    tiny.register(hook)
    step = 0
    while True:
        tiny.train(1)
        print(step, repr(tiny.log[-1].loss), flush=True)
        step += 1
        time.sleep(0.01)
    """
)


def _wait_for_steps(out: Path, n: int, proc: subprocess.Popen, limit: float = 90.0) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        if (out / "tensors").is_dir():
            steps = ts.create_trial(out).steps()
            if len(steps) >= n:
                return len(steps)
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} steps became visible while the job ran")


def test_sigkill_mid_run_leaves_every_flushed_step_readable(tmp_path):
    out = tmp_path / "run"
    hooks_dir = str(Path(__file__).resolve().parents[1] / "hooks")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(hooks=hooks_dir, out=str(out))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        visible = _wait_for_steps(out, 15, proc)  # visible without close(): the writer flushes on its own
        proc.send_signal(signal.SIGKILL)
        stdout, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    printed = {int(a): float(b) for a, b in (line.split() for line in stdout.splitlines() if line.strip())}
    trial = ts.create_trial(out)
    steps = trial.steps()
    assert len(steps) >= visible
    assert steps == list(range(len(steps)))
    assert not trial.loaded_all_steps  # no end marker
    loss, w = trial.tensor(LOSS), trial.tensor(W0)
    for step in steps:
        assert w.value(step).shape == (6, 4)
        if step in printed:
            assert float(loss.value(step)) == np.float32(printed[step])
    assert trial.corrupt_records == 0


def _files(out: Path, pattern: str) -> Path:
    (path,) = sorted((out / "tensors" / "worker_0").glob(pattern))
    return path


def test_truncated_last_index_record_is_skipped_with_a_warning(tmp_path, caplog):
    out = tmp_path / "run"
    write_run(out)
    idx = _files(out, "index-*.idx")
    data = idx.read_bytes()
    idx.write_bytes(data[:-10])
    caplog.set_level(logging.WARNING)
    trial = ts.create_trial(out)
    assert trial.steps() == list(range(7))  # the last step (7) is gone, the rest is intact
    assert any("incomplete last record" in r.getMessage() for r in caplog.records)
    assert trial.corrupt_records == 0
    assert trial.tensor(W0).value(6).shape == (6, 4)


def test_corrupt_data_record_is_skipped_and_counted(tmp_path, caplog):
    out = tmp_path / "run"
    tiny = write_run(out)
    trial = ts.create_trial(out)
    # find where step 2's weight lives, and flip a byte of its payload
    entry = trial._index.tensors[W0][2]["worker_0"]
    data_file = Path(entry.file)
    raw = bytearray(data_file.read_bytes())
    raw[entry.offset + 12 + 5] ^= 0xFF
    data_file.write_bytes(bytes(raw))
    caplog.set_level(logging.WARNING)
    fresh = ts.create_trial(out)
    with pytest.raises(TensorUnavailableForStep):
        fresh.tensor(W0).value(2)
    assert fresh.corrupt_records == 1
    values = fresh.tensor(W0).values()
    assert 2 not in values and sorted(values) == [0, 1, 3, 4, 5, 6, 7]
    np.testing.assert_array_equal(values[3], tiny.log[3].weights["0.weight"])
    np.testing.assert_array_equal(fresh.tensor(tname("0.bias")).value(2), tiny.log[2].weights["0.bias"])
    assert any("corrupt" in r.getMessage() for r in caplog.records)


def test_corrupt_index_record_is_skipped_and_counted(tmp_path):
    out = tmp_path / "run"
    tiny = write_run(out)
    idx = _files(out, "index-*.idx")
    raw = bytearray(idx.read_bytes())
    # the records are framed JSON; flip a byte inside the payload of the 3rd record (step 2)
    starts = [i for i in range(len(raw)) if raw[i : i + 2] == b"TS" and raw[i + 12 : i + 13] == b"{"]
    raw[starts[2] + 20] ^= 0x01
    idx.write_bytes(bytes(raw))
    trial = ts.create_trial(out)
    assert trial.steps() == [0, 1, 3, 4, 5, 6, 7]
    assert trial.corrupt_records == 1
    np.testing.assert_array_equal(trial.tensor(W0).value(3), tiny.log[3].weights["0.weight"])
