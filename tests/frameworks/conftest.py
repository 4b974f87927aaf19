"""Framework coverage (issue 15): real third-party training loops, under ``trainspect run`` and with a manual hook."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
collect_ignore = ["scripts"]  # training scripts run as subprocesses, not test modules (--doctest-modules imports them)
for _path in (_HERE, _HERE / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
