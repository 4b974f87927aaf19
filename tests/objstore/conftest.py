"""An S3-compatible HTTP server (moto's standalone server, a subprocess on 127.0.0.1) for the object-store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _support.s3 import BUCKET, S3Server, make_fs


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
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "TRAINSPECT_UPLOAD_INTERVAL_MS": "200",
        "TRAINSPECT_UPLOAD_CLOSE_S": "20",
        "TRAINSPECT_SPOOL_DIR": str(tmp_path / "spool"),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    make_fs().mkdir(BUCKET)
    yield s3_server
