"""The architecture's rules, checked on the source: env access in one place, frameworks only in hooks/."""

from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "trainspect"


def _sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "static" not in p.parts)


def test_only_env_py_reads_the_environment() -> None:
    offenders = [
        str(p.relative_to(PKG))
        for p in _sources()
        if p.name != "env.py" and re.search(r"os\.environ|os\.getenv|getenv\(", p.read_text())
    ]
    assert offenders == []


def test_only_hooks_import_a_framework() -> None:
    pattern = re.compile(r"^\s*(import|from)\s+(torch|tensorflow|keras)\b", re.M)
    offenders = [
        str(p.relative_to(PKG))
        for p in _sources()
        if pattern.search(p.read_text()) and p.relative_to(PKG).parts[0] != "hooks"
    ]
    assert offenders == []


def test_importing_trainspect_loads_no_framework() -> None:
    import subprocess
    import sys

    code = (
        "import sys, trainspect, trainspect.rules, trainspect.store; "
        "print(sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
