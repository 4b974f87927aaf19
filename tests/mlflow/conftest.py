"""MLflow fixtures: a real ``mlflow server`` (sqlite, 127.0.0.1, free port) and an embedded local store."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow_helpers import free_port, start_server, stop_server


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, _migrated_db: Path) -> Iterator[str]:
    """The URI of a tracking server started for the session (stopped after)."""
    tmp = tmp_path_factory.mktemp("mlflow-server")
    shutil.copy(_migrated_db, tmp / "db.sqlite")
    port = free_port()
    proc = start_server(tmp / "db.sqlite", tmp / "art", port, tmp / "server.log")
    yield f"http://127.0.0.1:{port}"
    stop_server(proc)


@pytest.fixture(scope="session")
def _migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty, migrated MLflow sqlite database (migrations take seconds; each test copies the file)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("db-template")
    db = folder / "mlflow.db"
    # the Default experiment (id 0) keeps the artifact root given here; MLflow's default is ./mlruns in the cwd
    SqlAlchemyStore(f"sqlite:///{db}", (folder / "default-artifacts").as_uri()).search_experiments()
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
