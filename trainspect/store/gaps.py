"""Gaps: what the writer did not write, and why, so every reader can say so.

When writing falls behind training (a large model's raw tensors every step, a slow disk) or a URL run's spool is
full, the run writer keeps each step's losses and scalars and drops raw tensor values, largest first, keeping
their reductions. Each such step adds one JSON line to ``tensors/<worker>/gaps.jsonl``::

    {"step": 120, "mode": "TRAIN", "mode_step": 120, "reason": "writer backlog",
     "dropped": [["Net_fc1.weight", 4194304, "reductions"], ["gradient/Net_fc1.weight", 4194304, "nothing"]]}

``kept`` is ``"reductions"`` (the raw value is gone, its reductions are there) or ``"nothing"``. The Trial
(``problems``), ``trainspect info``, the rules (NoData for a step whose inputs are a gap), the report and MLflow
read them through :func:`read_gaps`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainspect.step import StepRecord, TensorRecord
from trainspect.store.layout import RunLayout
from trainspect.store.safe_files import read_capped

__all__ = ["GAPS_FILE", "degrade", "gap_line", "read_gaps", "gaps_summary", "read_worker_lines"]

GAPS_FILE = "gaps.jsonl"
_MAX_FILE = 64 << 20  # a gaps file larger than this is read only up to here
_log = logging.getLogger(__name__)


def _kept(t: TensorRecord) -> bool:
    """Whether a tensor is never dropped: losses, scalars, and anything with a single value."""
    if t.value is None or t.value.size <= 1:
        return True
    return bool({"losses", "scalars"} & set(t.collections or ()))


def degrade(record: StepRecord, room: int) -> tuple[StepRecord, list[tuple[str, int, str]]]:
    """The record with raw values dropped, largest first, until it needs at most ``room`` bytes.

    Losses, scalars and single values are kept whatever the room; a dropped value keeps its reductions.

    Returns:
        The lighter record and ``(tensor, bytes dropped, what was kept)`` for each dropped value.

    Example:
        >>> import numpy as np
        >>> from trainspect.modes import ModeKeys
        >>> big = TensorRecord("w", np.zeros(1000, np.float32), {("mean", False): 0.0}, frozenset({"weights"}))
        >>> loss = TensorRecord("loss", np.array(0.5), collections=frozenset({"losses"}))
        >>> light, dropped = degrade(StepRecord(ModeKeys.TRAIN, 3, 3, 0.0, "w0", {"w": big, "loss": loss}), 0)
        >>> sorted(light.tensors), light.tensors["w"].value, dropped
        (['loss', 'w'], None, [('w', 4000, 'reductions')])
    """
    tensors = dict(record.tensors)
    need = sum(t.value.nbytes for t in tensors.values() if t.value is not None)
    dropped: list[tuple[str, int, str]] = []
    for name, t in sorted(tensors.items(), key=lambda kv: -(kv[1].value.nbytes if kv[1].value is not None else 0)):
        if need <= room or _kept(t):
            continue
        assert t.value is not None
        need -= t.value.nbytes
        if t.reductions or t.partials:
            tensors[name] = TensorRecord(
                t.name, None, t.reductions, t.collections, t.shape or tuple(t.value.shape), t.shard, t.partials
            )
            dropped.append((name, int(t.value.nbytes), "reductions"))
        else:
            del tensors[name]
            dropped.append((name, int(t.value.nbytes), "nothing"))
    light = StepRecord(record.mode, record.mode_step, record.global_step, record.wall_time, record.worker, tensors)
    return light, dropped


def gap_line(record: StepRecord, dropped: Iterable[tuple[str, int, str]], reason: str) -> str:
    """The JSON line of one step's gap."""
    doc = {
        "step": record.global_step,
        "mode": record.mode.name,
        "mode_step": record.mode_step,
        "reason": reason,
        "dropped": [list(d) for d in dropped],
    }
    return json.dumps(doc, separators=(",", ":")) + "\n"


def _parse(line: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("step"), int):
        return None
    return doc


def read_worker_lines(run_dir: str | Path, filename: str, what: str) -> list[dict[str, Any]]:
    """The JSON lines of every worker's ``tensors/<worker>/<filename>``, each with its ``worker``, by step.

    A line that is not a JSON object with an integer ``step`` is skipped (counted in one warning naming ``what``);
    a file that is not a regular file (a FIFO, a device) or cannot be read is skipped with a warning naming it.
    """
    layout = RunLayout(Path(run_dir))
    out: list[dict[str, Any]] = []
    bad = 0
    for path in sorted(layout.tensors_dir.glob(f"*/{filename}")) if layout.tensors_dir.is_dir() else []:
        try:
            text = read_capped(path, _MAX_FILE).decode("utf-8", errors="replace")
        except OSError as exc:  # a FIFO, a device, unreadable: skipped, named
            _log.warning("trainspect: skipped %s: %s", path, exc)
            continue
        for line in text.splitlines():
            doc = _parse(line)
            if doc is None:
                bad += 1 if line.strip() else 0
                continue
            out.append({**doc, "worker": path.parent.name})
    if bad:
        _log.warning("trainspect: skipped %d malformed %s record(s) in %s", bad, what, layout.tensors_dir)
    return sorted(out, key=lambda d: (d["step"], d["worker"]))


def read_gaps(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every recorded gap of a run, each with its ``worker``, by step (malformed lines skipped, counted once)."""
    return [g for g in read_worker_lines(run_dir, GAPS_FILE, "gap") if isinstance(g.get("dropped"), list)]


def gaps_summary(gaps: list[dict[str, Any]]) -> str:
    """One sentence on the gaps ("" when none).

    Example:
        >>> gaps_summary([{"step": 5, "worker": "worker_0", "reason": "writer backlog",
        ...                "dropped": [["w", 4000, "reductions"], ["g", 4000, "nothing"]]}])  # doctest: +ELLIPSIS
        'raw values of 2 tensor(s) not written at 1 step(s) (first at step 5; writer backlog): losses and ...'
    """
    if not gaps:
        return ""
    names = {d[0] for g in gaps for d in g["dropped"] if isinstance(d, list) and d}
    reduced = {d[0] for g in gaps for d in g["dropped"] if isinstance(d, list) and len(d) > 2 and d[2] == "reductions"}
    reasons = sorted({str(g.get("reason", "")) for g in gaps})
    return (
        f"raw values of {len(names)} tensor(s) not written at {len({g['step'] for g in gaps})} step(s) (first at "
        f"step {gaps[0]['step']}; {', '.join(reasons)}): losses and scalars were kept; {len(reduced)} of them kept "
        "their reductions"
    )
