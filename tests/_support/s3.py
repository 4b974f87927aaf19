"""An S3-compatible HTTP server (moto's standalone server, a subprocess on 127.0.0.1) for the object-store tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

BUCKET = "runs"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """moto's server in a subprocess; ``kill`` and ``start`` again on the same port (its objects live in memory)."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / "moto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait (up to 60 s) until it answers."""
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=5).read()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"moto server did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """Kill the server (its objects are lost)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def reset(self) -> None:
        """Delete every bucket and object."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")).read()


def make_fs() -> Any:
    """A plain s3fs client of the test server (no cache)."""
    import s3fs

    return s3fs.S3FileSystem(
        endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True, use_listings_cache=False
    )
