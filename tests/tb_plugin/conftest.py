"""Fixtures of the TensorBoard plugin tests: a log directory with a real torch run and synthetic runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tb_synth as synth
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.summary import Writer
from werkzeug import test as wtest
from werkzeug import wrappers

from trainspect.tb_plugin.plugin import TrainspectPlugin

HERE = Path(__file__).parent
XSS = "<img src=x onerror=window.__xss=1>"
PREFIX = "/data/plugin/trainspect"


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
    subprocess.run([sys.executable, str(HERE / "tbtrain.py"), str(out)], check=True, timeout=240,
                   capture_output=True, cwd=HERE.parent.parent)  # fmt: skip
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


class TensorBoardProcess:
    """A real TensorBoard with the plugin, started in a child process through ``trainspect ui``.

    TensorBoard serves from daemon threads (and, with TensorFlow installed, reloads through TensorFlow's C++
    file system); hosting those threads in the pytest process can abort the interpreter at exit, so each
    TensorBoard gets its own process, configured by ``program.TensorBoard(plugins=default.get_plugins())``.
    """

    def __init__(self, logdir: Path, load_fast: str) -> None:
        cmd = [sys.executable, "-m", "trainspect.cli", "ui", str(logdir), "--port", "0", "--load-fast", load_fast]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("trainspect ui: http://127.0.0.1:"):
            self.close()
            raise RuntimeError(f"trainspect ui did not start: {line!r}")
        self.url = line.split()[2].split("#")[0]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def make_client(root: Path) -> tuple[wtest.Client, TrainspectPlugin]:
    """A werkzeug client on TensorBoard's WSGI app with the plugin, over the Python data provider."""
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(root))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(root))
    context = base_plugin.TBContext(logdir=str(root), data_provider=provider, multiplexer=mux)
    plugin = TrainspectPlugin(context)
    return wtest.Client(application.TensorBoardWSGI([plugin], data_provider=provider), wrappers.Response), plugin


@pytest.fixture(scope="module")
def client(logdir: Path) -> Iterator[wtest.Client]:
    c, _plugin = make_client(logdir)
    yield c
