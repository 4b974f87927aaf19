"""SIGKILL under load, 1–4 MB per step: what a kill loses is bounded in bytes of queue (docs/format.md, Durability).

Every step followed by at least the tensor queue's byte budget of later queued steps is readable, its loss
exact, each of its tensors readable or listed in gaps.jsonl. The bound does not depend on the machine's speed: the
trainings run beside busy loops, and a slow writer only makes more steps fall inside the bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

KILLS = 4
BUDGET = 8 << 20  # the tensor queue's byte budget in the test (MAX_PENDING_BYTES is 256 MiB)
HOGS = 2  # busy-loop processes beside the trainings (two cores: load 4 and more)


def test_random_sigkills_under_load_lose_at_most_the_byte_budget(tmp_path):
    script = Path(__file__).with_name("killload.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(KILLS), "20261201", str(BUDGET), str(HOGS)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr
    kills = json.loads(proc.stdout)
    assert len(kills) == KILLS
    assert sum(k["must"] for k in kills) > 0, kills  # the bound covered some steps
    for k in kills:
        assert k["unlogged"] == 0 and k["names"] >= 4, k  # every step's queued bytes were seen
        assert k["missing"] == [] and k["lost_tensors"] == [], k
        assert k["wrong"] == [] and k["bad_values"] == [] and k["contiguous"], k
        assert k["readable"] <= k["completed"] + 1, k  # at most the step in flight at the kill
        assert k["on_backlog"] == "degrade" or k["degraded"] == 0, k  # "block" waits, drops nothing
