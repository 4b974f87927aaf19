"""The TensorBoard plugin under test: a werkzeug client of TensorBoard's WSGI app, or a real TensorBoard process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug import test as wtest
from werkzeug import wrappers

from trainspect.tb_plugin.plugin import TrainspectPlugin

XSS = "<img src=x onerror=window.__xss=1>"
PREFIX = "/data/plugin/trainspect"


def make_client(root: Path) -> tuple[wtest.Client, TrainspectPlugin]:
    """A werkzeug client on TensorBoard's WSGI app with the plugin, over the Python data provider."""
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(root))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(root))
    context = base_plugin.TBContext(logdir=str(root), data_provider=provider, multiplexer=mux)
    plugin = TrainspectPlugin(context)
    return wtest.Client(application.TensorBoardWSGI([plugin], data_provider=provider), wrappers.Response), plugin


def get(client: wtest.Client, route: str, status: int = 200, **params: object) -> dict:
    """The JSON answer of the plugin's ``route``, checking its status and content headers."""
    response = client.get(PREFIX + route, query_string={k: str(v) for k, v in params.items()})
    assert response.status_code == status, response.data[:300]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.mimetype == "application/json"
    return json.loads(response.data)


class TensorBoardProcess:
    """A real TensorBoard with the plugin, started in a child process through ``trainspect ui``.

    TensorBoard serves from daemon threads (and, with TensorFlow installed, reloads through TensorFlow's C++
    file system); hosting those threads in the pytest process can abort the interpreter at exit, so each
    TensorBoard gets its own process, configured by ``program.TensorBoard(plugins=default.get_plugins())``.
    The constructor returns once the process has printed its address (no fixed wait).
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
        """Terminate the process (kill it after 30 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
