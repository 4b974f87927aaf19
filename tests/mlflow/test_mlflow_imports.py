"""A hook logging to MLflow imports cleanly: no circular-import warning, and MLflow registers the context provider."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from _support.package import PACKAGE_ROOT
from mlflow.tracking import MlflowClient

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def test_a_hook_with_mlflow_prints_no_import_warning(tmp_path: Path, _migrated_db: Path) -> None:
    shutil.copy(_migrated_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = MlflowClient(tracking_uri=uri).create_run("0").info.run_id
    # the training script imports trainspect and torch, never mlflow: the hook is the first to load MLflow
    script = textwrap.dedent(f"""
        import sys, warnings
        warnings.simplefilter("always")
        sys.path.insert(0, {str(HERE)!r})
        from mlflow_helpers import train
        train(__import__("pathlib").Path({str(tmp_path / "run")!r}), rules=False, epochs=1,
              mlflow_run={{"run": {run_id!r}, "tracking_uri": {uri!r}, "interval_s": 0.2}})
        from mlflow.tracking.context.registry import _run_context_provider_registry
        print(sorted(type(p).__name__ for p in _run_context_provider_registry))
    """)
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "circular import" not in proc.stderr and "Failure attempting to register" not in proc.stderr, proc.stderr
    assert "TrainspectRunContextProvider" in proc.stdout
    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.tags["trainspect.version"]
