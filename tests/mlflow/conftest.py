"""MLflow fixtures: a real ``mlflow server`` (sqlite, 127.0.0.1, free port) and an embedded local store."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow_helpers import free_port


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, _migrated_db: Path) -> Iterator[str]:
    """The URI of a tracking server started for the session (stopped after)."""
    import shutil

    tmp = tmp_path_factory.mktemp("mlflow-server")
    shutil.copy(_migrated_db, tmp / "db.sqlite")
    port = free_port()
    exe = Path(sys.executable).parent / "mlflow"
    log = (tmp / "server.log").open("w")
    proc = subprocess.Popen(
        [str(exe), "server", "--backend-store-uri", f"sqlite:///{tmp}/db.sqlite", "--default-artifact-root",
         str(tmp / "art"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"mlflow server did not start: {(tmp / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield uri
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def _migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty, migrated MLflow sqlite database (migrations take seconds; each test copies the file)."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("db-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def local_store(tmp_path: Path, _migrated_db: Path) -> Iterator[str]:
    """MLflow's embedded sqlite store as the current tracking URI (restored after)."""
    import shutil

    import mlflow

    before = mlflow.get_tracking_uri()
    shutil.copy(_migrated_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    (tmp_path / "artifacts").mkdir()
    exp_id = mlflow.create_experiment(f"exp-{tmp_path.name}", artifact_location=(tmp_path / "artifacts").as_uri())
    mlflow.set_experiment(experiment_id=exp_id)
    yield uri
    if mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(before)
