"""Reading a whole run keeps the process's resident size bounded: mapped pages are given back as reading goes on.

Every page of a memory-mapped data file that was read stays resident (file-backed, yet counted in the RSS that
monitors and container limits watch) unless it is given back; the source gives back each file's pages every
``RELEASE_BYTES`` read (issue 30: a 17 GB run read at 16 GB RSS).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import synthetic_run

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store import source

STEPS, SIZE = 16, 1 << 20  # 16 steps of 4 MiB (float32)


def _rss_file() -> int:
    """The process's resident file-backed bytes (``RssFile`` of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    pytest.fail("no RssFile in /proc/self/status")


def _run(path: Path) -> Path:
    records = [
        StepRecord(
            ModeKeys.TRAIN,
            i,
            i,
            1000.0 + i,
            "worker_0",
            {"w": TensorRecord("w", np.full(SIZE, i, dtype=np.float32), {}, frozenset({"weights"}))},
        )
        for i in range(STEPS)
    ]
    synthetic_run.start_run(path, "rss", {"framework": "pytorch"})
    synthetic_run.write_tensors(path, records)
    return path


@pytest.mark.parametrize("release", [True, False])
def test_a_whole_run_read_does_not_stay_resident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: bool
) -> None:
    run = _run(tmp_path / "run")
    monkeypatch.setattr(source, "RELEASE_BYTES", (4 << 20) if release else (1 << 40))
    trial = ts.create_trial(str(run))
    before = _rss_file()
    kept = [trial.tensor("w").value(step) for step in range(STEPS)]  # every array held
    grown = _rss_file() - before
    total = STEPS * SIZE * 4
    if release:
        assert grown < total // 3, f"{grown >> 20} MiB of {total >> 20} MiB stayed resident"
    else:  # without giving pages back, what was read stays resident (the test can tell the difference)
        assert grown > total // 2
    for step, value in enumerate(kept):  # the arrays stay valid after their pages were given back
        assert value.shape == (SIZE,) and float(value[0]) == step and float(value[-1]) == step
