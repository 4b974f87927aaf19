"""Helpers of the framework tests: run a script unchanged under ``trainspect run``; hook configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).parent / "scripts"


def trainspect_run(tmp_path: Path, script: str, config: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Run ``scripts/<script>`` unchanged under ``trainspect run``; return the run directory and what it saw."""
    out, result = tmp_path / "run", tmp_path / "result.json"
    cmd = [str(Path(sys.executable).parent / "trainspect"), "run", "--out", str(out)]
    if config is not None:
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(config))
        cmd += ["--config", str(cfg)]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    proc = subprocess.run(
        [*cmd, "--", sys.executable, str(SCRIPTS / script), str(result)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads(result.read_text())


def with_manual_hook(tmp_path: Path, script_module: str) -> tuple[Path, dict[str, Any]]:
    """Run ``scripts/<script_module>.main`` in this process with a hook the test registers on its model."""
    import importlib

    import trainspect as ts

    out = tmp_path / "run"
    hook = ts.torch.Hook(
        out, include_collections=["losses", "gradients", "biases"], save_config=ts.SaveConfig(save_interval=1)
    )
    try:
        saw = importlib.import_module(script_module).main(tmp_path / "result.json", on_model=hook.register_module)
    finally:
        hook.close()
    return out, saw


EVERY_STEP = {
    "HookParameters": {"SAVE_INTERVAL": "1"},
    "CollectionConfigurations": [{"CollectionName": n} for n in ("gradients", "losses", "biases")],
}
"""A hook config in smdebug's JSON format: losses, gradients and biases at every step (of every mode)."""
