"""Suite-wide settings: internal errors re-raise (TRAINSPECT_TESTING) and torch uses one thread."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRAINSPECT_TESTING", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _no_disable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINSPECT_DISABLE", raising=False)


# Fixture generators under tests/data run in their own environments (e.g. the real smdebug), not in the suite.
collect_ignore = ["data"]
