"""Bad input to the CLIs and SaveConfig: refused in one line naming the key, value and what is allowed (exit 2)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "store"))

from _support.package import PACKAGE_ROOT
from storetrain import write_run  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.cli import main  # noqa: E402
from trainspect.exceptions import ConfigError  # noqa: E402
from trainspect.hook_config import hook_kwargs_from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "run"
    write_run(out)
    return out


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_an_empty_step_range_is_refused(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", str(run_dir), "--start-step", "50", "--end-step", "10"]) == 2
    line = _one_line(capsys)
    assert "--start-step 50" in line and "--end-step 10" in line and "greater than --start-step" in line
    assert main(["rules", str(run_dir), "--start-step", "-3"]) == 2
    assert "--start-step -3" in _one_line(capsys)


@pytest.mark.parametrize("command", ["rules", "report", "info"])
def test_an_empty_directory_holds_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([command, str(empty)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"trainspect {command}: ") and str(empty) in line and "holds no run" in line
    assert list(empty.iterdir()) == []


def test_save_config_refuses_an_end_before_the_start() -> None:
    with pytest.raises(ConfigError, match=r"SaveConfig: start_step=10, end_step=5: end_step \(exclusive\)"):
        ts.SaveConfig(start_step=10, end_step=5)
    with pytest.raises(ValueError, match=r"SaveConfig \(mode EVAL\): start_step=10, end_step=5"):
        ts.SaveConfig(start_step=10, mode_save_configs={"EVAL": {"end_step": 5}})
    with pytest.raises(ConfigError, match="start_step=10, end_step=5"):
        hook_kwargs_from_dict({"LocalPath": "x", "HookParameters": {"start_step": "10", "end_step": "5"}})
    assert not ts.SaveConfig(end_step=0).should_save_step("train", 0)  # end_step=0 still turns saving off
    assert ts.SaveConfig(start_step=5, end_step=5).modes[ts.modes.TRAIN].end_step == 5


def test_report_into_a_directory_writes_report_html(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing = tmp_path / "existing"
    existing.mkdir()
    assert main(["report", str(run_dir), "-o", str(existing)]) == 0
    assert (existing / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert main(["report", str(run_dir), "-o", str(tmp_path / "new") + os.sep]) == 0
    assert (tmp_path / "new" / "report.html").is_file()
    capsys.readouterr()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "report.html").mkdir()
    assert main(["report", str(run_dir), "-o", str(tmp_path / "taken")]) == 2
    assert "exists and is not a file" in _one_line(capsys)


def test_report_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(run_dir: Path, tmp_path: Path) -> None:
    """The report cannot be written (file size limit: EFBIG, as a full disk's ENOSPC): one line, exit 2."""

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "trainspect.cli", "report", str(run_dir), "-o", str(out)],
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=small_files,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainspect report: cannot write the report of"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(out.iterdir()) == []
