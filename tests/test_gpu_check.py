"""benchmarks/gpu_check.py: SKIPs quickly without CUDA; its report, TensorBoard and nvidia-smi checks on a fake-NVML run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "tests" / "profiler"))

from _support.package import PACKAGE_ROOT  # noqa: E402
from fake_nvml import GIB, FakeNvml, a100  # noqa: E402

from trainspect.hooks.system_monitor import SystemMonitor  # noqa: E402
from trainspect.profiler import ProfilerConfig  # noqa: E402


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.FAILED.clear()
    return module


def test_without_cuda_every_check_is_skipped_and_exit_is_0() -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(PACKAGE_ROOT)}
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 10 and all(line.startswith("SKIP: no CUDA device (") for line in lines)
    assert "tensorboard" in lines[-1]


@pytest.fixture
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run whose system monitor sampled a fake A100 (50 %, 2 GiB, 100 W) at 100 ms for about a second."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([a100("0000:01:00.0", "GPU-1")]).module())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = tmp_path / "gpu_run"
    with SystemMonitor(out, node="n0", config=ProfilerConfig(system_monitor_interval_millis=100)):
        time.sleep(1.0)
    return out


def test_report_tensorboard_and_smi_checks_pass_on_gpu_data(fake_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check = _script()
    check.check_report(fake_run)
    check.check_tensorboard(fake_run)
    now = time.time()
    check.check_nvml_vs_smi(fake_run, [(now, [50.0, 2048.0, 100.0]), (now - 0.5, [52.0, 2050.0, 98.0])])
    out = capsys.readouterr().out
    assert check.FAILED == [], out
    assert [line.split(":")[0] for line in out.splitlines()] == ["PASS", "PASS", "PASS"]


def test_the_checks_fail_when_the_readings_disagree(fake_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check = _script()
    check.check_nvml_vs_smi(fake_run, [(time.time(), [50.0, 2048.0 + 4 * GIB / 2**20, 100.0])])  # 4 GiB off
    check.check_report(fake_run.parent / "missing")
    out = capsys.readouterr().out
    assert check.FAILED == ["nvml_vs_smi", "report"], out
