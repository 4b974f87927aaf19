"""SIGKILL at random times, small steps: every step completed more than 0.5 s before the kill is readable.

The time bound of docs/format.md, which holds while the writer keeps up: the steps pause 2 ms (as data loading does)
and write no TensorBoard histograms, so the writer keeps up beside busy loops too (a writer ticking every 1 s fails
here); the byte bound, which holds whatever the load, is tested with 1–4 MB steps beside busy loops in
test_sigkill_load.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

KILLS = 12


def test_random_sigkills_lose_nothing_older_than_half_a_second(tmp_path):
    script = Path(__file__).with_name("killtrain.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(KILLS), "20261130"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr
    kills = json.loads(proc.stdout)
    assert len(kills) == KILLS
    assert sum(1 for k in kills if k["must"] > 0) >= KILLS // 2  # most kills came well after training had started
    for k in kills:
        assert k["missing"] == [], k
        assert k["wrong"] == [] and k["contiguous"], k
        assert k["readable"] <= k["completed"] + 1, k  # at most the step in flight at the kill
