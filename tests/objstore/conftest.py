"""An S3-compatible HTTP server (moto's standalone server, a subprocess on 127.0.0.1) for the object-store tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

BUCKET = "runs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """moto's server in a subprocess; ``kill`` and ``start`` again on the same port (its objects live in memory)."""

    def __init__(self, log_dir: Path) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / "moto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"moto server did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")).read()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    server.kill()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3Server]:
    """A fresh bucket ``runs`` on the server; the AWS variables point boto/s3fs at it; uploads every 0.2 s."""
    if s3_server.proc is None:
        s3_server.start()
    s3_server.reset()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_server.endpoint,
                       "TRAINSPECT_UPLOAD_INTERVAL_MS": "200", "TRAINSPECT_UPLOAD_CLOSE_S": "20",
                       "TRAINSPECT_SPOOL_DIR": str(tmp_path / "spool")}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    make_fs().mkdir(BUCKET)
    yield s3_server


def make_fs():  # type: ignore[no-untyped-def]
    """A plain s3fs client of the test server (no cache)."""
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True, use_listings_cache=False)


def wait_for(check, timeout: float = 30.0):  # noqa: ANN001, ANN202
    """Poll ``check()`` every 0.1 s until it returns something true or ``timeout`` passes; return its last result."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)
