"""Damaged index files are logged one line per kind of problem, with a count and the first file (not one per file)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import trainspect as ts
from trainspect.store import framing
from trainspect.store.index import TrialIndex
from trainspect.store.source import TrainspectSource
from trainspect.store.tensor_file import KIND_INDEX

FILES = 37


def _record(doc: object) -> bytes:
    payload = json.dumps(doc).encode()
    return framing.frame(KIND_INDEX, payload) + payload


def _damaged_run(root: Path) -> Path:
    """``FILES`` index files of 3 records of the wrong shape each, and as many with one corrupt record each."""
    folder = root / "tensors" / "worker_0"
    folder.mkdir(parents=True)
    (folder / "data-0.bin").touch()
    for i in range(FILES):
        (folder / f"index-a{i:03d}.idx").write_bytes(b"".join(_record({"g": "x", "n": k}) for k in range(3)))
        good = _record({"g": i, "m": 1, "ms": i, "f": "data-0.bin", "e": []})
        bad = bytearray(good)
        bad[-3] ^= 0x01  # the checksum no longer matches
        (folder / f"index-b{i:03d}.idx").write_bytes(bytes(bad) + good)
    return root


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "index" in r.getMessage()]


def test_many_damaged_index_files_give_one_line_per_kind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = _damaged_run(tmp_path)
    first_shape, first_corrupt = (run / "tensors" / "worker_0" / n for n in ("index-a000.idx", "index-b000.idx"))
    with caplog.at_level(logging.WARNING):
        source = TrainspectSource(run)
        source.refresh(TrialIndex())
    shape = [m for m in _warnings(caplog) if "wrong shape" in m]
    corrupt = [m for m in _warnings(caplog) if "corrupt" in m]
    assert shape == [
        f"trainspect: skipped {3 * FILES} index records of the wrong shape in {FILES} files, first: "
        f"{first_shape}: skipped an index record of the wrong shape"
    ]
    assert len(corrupt) == 1 and corrupt[0].startswith(
        f"trainspect: skipped {FILES} corrupt index records in {FILES} files, first: {first_corrupt}: skipped 1 corrupt"
    )
    assert source.corrupt_records == 4 * FILES
    assert source.problems == [shape[0].removeprefix("trainspect: "), corrupt[0].removeprefix("trainspect: ")]


def test_the_trial_lists_each_kind_once_and_a_refresh_logs_only_new_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = _damaged_run(tmp_path)
    trial = ts.create_trial(run)
    assert sum("wrong shape" in p for p in trial.problems) == 1
    assert sum("corrupt index records in" in p for p in trial.problems) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        trial.refresh()
        assert _warnings(caplog) == []  # nothing new
        (run / "tensors" / "worker_0" / "index-c.idx").write_bytes(_record({"g": "y"}))
        trial.refresh()
    new = run / "tensors" / "worker_0" / "index-c.idx"
    assert _warnings(caplog) == [f"trainspect: {new}: skipped an index record of the wrong shape"]
    assert f"skipped {3 * FILES + 1} index records of the wrong shape in {FILES + 1} files" in " ".join(trial.problems)


def test_one_damaged_file_keeps_its_own_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "tensors" / "worker_0"
    folder.mkdir(parents=True)
    (folder / "index-0.idx").write_bytes(_record({"g": "x"}))
    with caplog.at_level(logging.WARNING):
        source = TrainspectSource(tmp_path)
        source.refresh(TrialIndex())
    line = f"{folder / 'index-0.idx'}: skipped an index record of the wrong shape"
    assert _warnings(caplog) == [f"trainspect: {line}"] and source.problems == [line]
