"""Files written into a run honour the umask, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support.package import PACKAGE_ROOT
from storetrain import write_run

from trainspect.report.render import write_report
from trainspect.rules import ExplodingTensor, LossNotDecreasing

ROOT = Path(__file__).resolve().parents[2]
NAMED = ("trainspect.json", "report.html", "rules/verdicts.json")


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(run: Path) -> dict[str, int]:
    return {str(p.relative_to(run)): stat.S_IMODE(p.stat().st_mode) for p in run.rglob("*") if p.is_file()}


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_every_file_of_a_run_honours_the_umask(tmp_path: Path, umask: None, mask: int) -> None:
    os.umask(mask)
    run = tmp_path / "run"
    write_run(run, rules=[ExplodingTensor(), LossNotDecreasing(num_steps=2)])
    write_report(run)
    modes = _modes(run)
    assert all(name in modes for name in NAMED), sorted(modes)
    expected = 0o666 & ~mask
    assert {name: oct(m) for name, m in modes.items() if m != expected} == {}
    assert not [name for name in modes if name.endswith(".tmp")]


def test_a_failing_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    """Writes that hit the file size limit (EFBIG, as a full disk's ENOSPC) raise and leave no .tmp file."""
    run = tmp_path / "run"
    write_run(run)
    write_report(run)
    before = {p: p.read_bytes() for p in (run / "report.html", run / "trainspect.json")}
    script = textwrap.dedent(f"""
        import resource, signal
        from pathlib import Path
        from trainspect.report.render import write_report
        from trainspect.rules import Status, Verdict
        from trainspect.rules.verdict import write_verdicts
        from trainspect.store.manifest import write_json_atomic
        run = Path({str(run)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        attempts = {{
            "report": lambda: write_report(run),
            "verdicts": lambda: write_verdicts(run / "rules" / "verdicts.json",
                                               [Verdict(rule="R" * 100, status=Status.NO_DATA)] * 200),
            "json": lambda: write_json_atomic(run / "trainspect.json", {{"x": "y" * 10000}}),
        }}
        for name, attempt in attempts.items():
            try:
                attempt()
            except OSError as exc:
                print(name, "failed", exc.errno)
            else:
                print(name, "written")
    """)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["report failed 27", "verdicts failed 27", "json failed 27"], proc.stdout
    assert [p.name for p in run.rglob(".*.tmp")] == []
    assert {p: p.read_bytes() for p in before} == before  # the old files are intact
