"""Fixtures of the TensorBoard plugin tests: a log directory with a real torch run and synthetic runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tb_synth as synth
from _support.tensorboard import XSS, make_client
from tensorboard.summary import Writer
from werkzeug import test as wtest

HERE = Path(__file__).parent


def corrupt_run(run: Path) -> Path:
    """A synthetic run with garbage in the middle of its system file and an unreadable verdict file."""
    synth.write_manifest(run)
    synth.write_system(run, 60, cores=4, gpus=1)
    path = next((run / "profiler" / "system").glob("*/*.tsys"))
    data = path.read_bytes()
    mid = len(data) // 2
    path.write_bytes(data[:mid] + b"\x00garbage!" * 50 + data[mid:])
    (run / "rules").mkdir(parents=True, exist_ok=True)
    (run / "rules" / "verdicts.json").write_text('{"schema_version": 1, "verdicts": [')
    return run


def tensorboard_only_run(run: Path) -> Path:
    """A run with TensorBoard scalars and no trainspect data."""
    run.mkdir(parents=True, exist_ok=True)
    writer = Writer(str(run))
    for step in range(5):
        writer.add_scalar("accuracy", 0.5 + 0.1 * step, step)
    writer.flush()
    writer.close()
    return run


@pytest.fixture(scope="session")
def torch_run_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (small) torch training run, recorded once per session."""
    out = tmp_path_factory.mktemp("torch") / "torch_run"
    subprocess.run(
        [sys.executable, str(HERE / "tbtrain.py"), str(out)],
        check=True,
        timeout=240,
        capture_output=True,
        cwd=HERE.parent.parent,
    )
    return out


@pytest.fixture(scope="session")
def logdir(tmp_path_factory: pytest.TempPathFactory, torch_run_template: Path) -> Path:
    """The shared, read-only log directory of the tests."""
    root = tmp_path_factory.mktemp("logdir")
    shutil.copytree(torch_run_template, root / "torch_run")
    synth.synthetic_run(root / "synth")
    synth.synthetic_run(root / XSS, seconds=30, steps=50)
    synth.write_manifest(root / "halfwritten")
    corrupt_run(root / "corrupt")
    tensorboard_only_run(root / "tb_only")
    return root


@pytest.fixture(scope="module")
def client(logdir: Path) -> Iterator[wtest.Client]:
    c, _plugin = make_client(logdir)
    yield c
