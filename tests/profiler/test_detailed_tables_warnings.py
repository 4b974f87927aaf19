"""Junk operator tables are logged one line per kind of problem with a count (not one line per file)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from trainspect.profiler.detailed import read_tables, write_table
from trainspect.profiler.schema import SCHEMA_VERSION


def test_junk_operator_files_give_one_warning_per_kind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "detailed"
    write_table(
        root / "worker_0",
        "operators",
        "worker_0",
        0,
        2,
        [{"name": "mm", "calls": 1, "self_time_us": 2.0, "total_time_us": 3.0}],
    )
    for i in range(30):
        (root / f"worker_{i + 1}").mkdir(parents=True)
        (root / f"worker_{i + 1}" / f"operators_{i}-{i + 1}.json").write_text("{junk")
    newer = {"schema_version": SCHEMA_VERSION + 1, "worker": "w", "start_step": 0, "end_step": 1, "rows": []}
    for i in range(2):
        (root / "worker_0" / f"operators_{10 + i}-{11 + i}.json").write_text(json.dumps(newer))
    problems: list[str] = []
    with caplog.at_level(logging.WARNING):
        frame = read_tables(root, "operators", problems)
    assert frame["name"].tolist() == ["mm"]
    lines = [r.getMessage() for r in caplog.records if "profiler table" in r.getMessage()]
    first = root / "worker_1" / "operators_0-1.json"
    newer_line, damaged_line = lines  # worker_0's newer files come first
    assert damaged_line.startswith(f"trainspect: skipped 30 damaged profiler tables (first: {first}: not valid JSON")
    assert newer_line.startswith("trainspect: skipped 2 profiler tables of a newer schema version (first: ")
    assert len(problems) == 2 + 20 + 1  # the two newer ones, the first 20 damaged files named, a count of the others
    assert problems[2].startswith(f"skipped profiler table {first}: ") and problems[22] == (
        "skipped 10 more damaged profiler tables"
    )


def test_one_junk_file_keeps_its_own_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "python_0-1.json").write_text("[]")
    problems: list[str] = []
    with caplog.at_level(logging.WARNING):
        read_tables(tmp_path, "python", problems)
    assert [r.getMessage() for r in caplog.records] == [f"trainspect: {problems[0]}"]
    assert problems[0].startswith(f"skipped profiler table {tmp_path / 'w' / 'python_0-1.json'}: ")
