"""examples/custom_rule.py runs and its rule triggers on the run it trains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_rule.py"


def test_custom_rule_example_runs():
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "LargeGradientNorm: IssuesFound" in proc.stdout
