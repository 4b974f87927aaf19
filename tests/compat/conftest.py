"""Fixtures of the smdebug compatibility tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def smdebug_modules():
    from trainspect import smdebug_compat

    assert smdebug_compat.install()
    yield
    smdebug_compat.uninstall()
