"""Helpers of the MLflow tests: a free port and a real small torch training run."""

from __future__ import annotations

import socket
import subprocess
import sys
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
    hook = ts.torch.Hook(str(out), rules=[VanishingGradient(), LossNotDecreasing()] if rules else None,
                         profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
                         mlflow_run=mlflow_run)  # fmt: skip
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
    """Start ``mlflow server`` (sqlite, 127.0.0.1) and wait until /health answers."""
    exe = Path(sys.executable).parent / "mlflow"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(exe), "server", "--backend-store-uri", f"sqlite:///{db}", "--default-artifact-root", str(artifacts),
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
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
