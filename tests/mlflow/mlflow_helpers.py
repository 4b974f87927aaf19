"""Helpers of the MLflow tests: a free port and a real small torch training run."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train(out: Path, mlflow_run: object = None, epochs: int = 2, rules: bool = True) -> None:
    """A real small torch training run with rules and the profiler at 100 ms."""
    import torch

    import trainspect as ts
    from trainspect.rules import LossNotDecreasing, VanishingGradient

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    hook = ts.torch.Hook(
        str(out),
        rules=[VanishingGradient(), LossNotDecreasing()] if rules else None,
        profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
        mlflow_run=mlflow_run,
    )
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for _ in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
                time.sleep(0.03)  # a few system samples (100 ms) per epoch


def start_server(db: Path, artifacts: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start ``mlflow server`` (sqlite, 127.0.0.1) and wait until /health answers.

    Without MLflow's job execution (on by default since MLflow 3.5): no test uses it, and it adds a job runner and
    seven Huey consumers, each a Python process importing mlflow, that made each stop wait 20 s (then a kill).
    """
    exe = Path(sys.executable).parent / "mlflow"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                str(exe),
                "server",
                "--backend-store-uri",
                f"sqlite:///{db}",
                "--default-artifact-root",
                str(artifacts),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"mlflow server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.5)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server started by :func:`start_server`."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


class Relay:
    """A TCP relay in front of a running server: an outage without stopping (and restarting) the server.

    :meth:`stop` makes :attr:`uri` unreachable as a stopped server is (new connections refused, open keep-alive
    connections cut); :meth:`start` brings it back on the same port. Starting ``mlflow server`` takes seconds of
    CPU (tens on a busy machine); a relay takes none.
    """

    def __init__(self, server_uri: str) -> None:
        self._target = int(server_uri.rsplit(":", 1)[1])
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.start()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (Linux)
            listener.close()
        with self._lock:
            cut, self._open = self._open, set()
        for conn in cut:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for conn in (src, dst):  # either side ended: the connection ends
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
