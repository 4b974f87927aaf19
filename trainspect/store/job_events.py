"""How a job ended, in its run directory: a StopTraining action that stopped it, and the script's exit status.

``rules/stopped.json`` is written by the hook when a rule's StopTraining action ends the training (one entry per
worker that stopped); ``job_exit.json`` by ``trainspect run`` when the script ends (its exit status, and whether
any step was recorded before it ended). The report, compare and the MLflow plugin read them through
:func:`read_stops` and :func:`read_exit`; both return nothing for runs written before these files existed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from trainspect.exceptions import DamagedFile
from trainspect.store.jsonfile import ListOf, Obj, load_json
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import write_text_atomic

__all__ = ["write_stop", "read_stops", "write_exit", "read_exit", "stop_text"]

_STOPS = Obj({"stops": ListOf(Obj({"rule": str}))}, {})
_EXIT = Obj({"returncode": int}, {})


def _stops_path(layout: RunLayout) -> Path:
    return layout.verdicts.parent / "stopped.json"


def _exit_path(layout: RunLayout) -> Path:
    return layout.root / "job_exit.json"


def write_stop(
    run_dir: str | os.PathLike[str], rule: str, step: int | None, mode: str | None = None, worker: str = ""
) -> None:
    """Record that ``rule``'s StopTraining action stopped ``worker`` at global ``step`` (appends; never raises)."""
    layout = RunLayout(Path(run_dir))
    stops = read_stops(run_dir)
    stops.append({"rule": rule, "step": step, "mode": mode, "worker": worker, "time": time.time()})
    try:
        write_text_atomic(_stops_path(layout), json.dumps({"stops": stops}, indent=1))
    except OSError:
        pass  # a full disk loses this note only; the verdict itself says the rule found issues


def read_stops(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The recorded stops, oldest first (``rule``, ``step``, ``mode``, ``worker``, ``time``); [] when none."""
    try:
        doc = load_json(_stops_path(RunLayout(Path(run_dir))), _STOPS)
    except (FileNotFoundError, DamagedFile, OSError):
        return []
    return [dict(s) for s in doc["stops"]]


def stop_text(stop: dict[str, Any]) -> str:
    """``"stopped by StopTraining at step 52 (rule ExplodingTensor)"`` (``step``: the global step).

    Example:
        >>> stop_text({"rule": "ExplodingTensor", "step": 52, "mode": "TRAIN"})
        'stopped by StopTraining at step 52 (rule ExplodingTensor)'
    """
    at = "" if stop.get("step") is None else f" at step {stop['step']}"
    return f"stopped by StopTraining{at} (rule {stop.get('rule', '?')})"


def write_exit(run_dir: str | os.PathLike[str], returncode: int, steps_recorded: bool) -> None:
    """Record how the script ended (``trainspect run``); a negative ``returncode`` is the signal. Never raises."""
    doc = {"returncode": int(returncode), "steps_recorded": bool(steps_recorded), "time": time.time()}
    try:
        write_text_atomic(_exit_path(RunLayout(Path(run_dir))), json.dumps(doc))
    except OSError:
        pass


def read_exit(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``{"returncode", "steps_recorded", "time"}`` as ``trainspect run`` recorded it; None when not recorded."""
    try:
        return dict(load_json(_exit_path(RunLayout(Path(run_dir))), _EXIT))
    except (FileNotFoundError, DamagedFile, OSError):
        return None
