"""The verdict record (``rules/verdicts.json``): every evaluation, live and offline, and each rule's current verdict.

One file, three views:

* ``verdicts``: the current verdict of each rule, its latest one (by ``evaluated_at``; with several workers, the
  latest of each worker combined), with its chart series.
  This is the list every reader shows (the report, the TensorBoard Rules tab, the MLflow tags, ``trainspect
  rules``) and what :func:`~trainspect.rules.verdict.read_verdicts` returns, so readers of the first format
  keep working.
* ``worker_parts``: for a rule whose current verdict combines the verdicts of several workers (the live runners of
  the ranks of a job each judge their own worker), those verdicts without their series. A verdict replaces the
  earlier verdicts of the workers it covers and is combined with the others
  (:func:`~trainspect.rules.worker_verdicts.merge_current`): no rank's verdict hides another's, and an offline
  evaluation of every worker replaces them all.
* ``evaluations``: one entry per evaluation (``source`` ``live``, ``offline`` or ``report``, who ran it, when,
  whether the data had ended) holding that evaluation's verdicts without their series. An evaluation still in
  progress (the hook's live runner, ``trainspect rules --watch``) updates its own entry; a finished one is kept.

Writes read the file, merge and replace it atomically; a best-effort ``flock`` on a side file keeps two
writers (the hook and a ``trainspect rules`` run) from losing each other's entries.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainspect._json_safe import json_safe
from trainspect.rules.verdict import VERDICT_SCHEMA_VERSION, Verdict
from trainspect.rules.worker_verdicts import merge_current
from trainspect.store.manifest import write_text_atomic
from trainspect.store.safe_files import load_json_bounded

__all__ = [
    "VerdictRecord",
    "record_verdicts",
    "record_report_verdicts",
    "read_record",
    "stamp",
    "unfinished_rules",
    "MAX_EVALUATIONS",
]

_log = logging.getLogger(__name__)
_WARNED: set[str] = set()

MAX_EVALUATIONS = 200
"""Evaluations kept in the record; older ones are dropped (their count is kept in ``evaluations_dropped``)."""


def stamp(verdicts: Sequence[Verdict], source: str, when: float | None = None) -> list[Verdict]:
    """Return the verdicts marked with their source and evaluation time (``when``: now when None)."""
    at = time.time() if when is None else float(when)
    return [replace(v, source=source, evaluated_at=at) for v in verdicts]


def read_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole record as a dict (``{}`` when the file is missing or unreadable)."""
    try:
        doc = load_json_bounded(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        if (key := f"{os.fspath(path)}: {exc}") not in _WARNED:  # the record is read before and after each write
            _WARNED.add(key)
            _log.warning("rules: the verdict record %s is unreadable (%s); starting a new one", path, exc)
        return {}
    return doc if isinstance(doc, dict) else {}


class VerdictRecord:
    """Writes evaluations into one verdict record; reuses its own last write when nobody else wrote since.

    Args:
        path: the record, usually ``RunLayout(run).verdicts``.
        source: ``"live"``, ``"offline"`` or ``"report"``.

    Example:
        >>> import tempfile, pathlib
        >>> from trainspect.rules.verdict import Status, read_verdicts
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "verdicts.json"
        >>> VerdictRecord(path, "live").write([Verdict("A", Status.ISSUES_FOUND)], final=True)
        >>> VerdictRecord(path, "offline").write(stamp([Verdict("B", Status.NO_ISSUES_FOUND)], "offline"), final=True)
        >>> [(v.rule, v.status.value) for v in read_verdicts(path)]
        [('A', 'IssuesFound'), ('B', 'NoIssuesFound')]
    """

    def __init__(self, path: str | os.PathLike[str], source: str) -> None:
        self.path = Path(path)
        self.source = source
        self._id = f"{source}-{socket.gethostname()}-{os.getpid()}-{time.time():.6f}"
        self._started = time.time()
        self._cache: tuple[tuple[int, int], dict[str, Any]] | None = None

    def write(self, verdicts: Sequence[Verdict], final: bool, **meta: Any) -> None:
        """Merge one evaluation's verdicts into the record (replacing this writer's unfinished entry).

        Args:
            verdicts: the evaluation's verdicts.
            final: whether the data had ended (a final entry is never replaced).
            **meta: extra keys of the entry (``worker``, ``last_step`` …), also copied to the top level.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.path):
            doc = self._read()
            entry = {
                "id": self._id,
                "source": self.source,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": self._started,
                "updated": time.time(),
                "final": bool(final),
                **meta,
                "verdicts": [_compact(v) for v in verdicts],
            }
            doc = merge(doc, entry, verdicts)
            doc.update(json_safe({"source": self.source, "final": bool(final), **meta}, nonfinite="string"))
            self._write(doc)
            if final:  # a later write of this writer is a new evaluation
                self._id = f"{self._id}+"

    def _read(self) -> dict[str, Any]:
        key = _stat(self.path)
        if self._cache is not None and key is not None and self._cache[0] == key:
            return self._cache[1]
        return read_record(self.path)

    def _write(self, doc: dict[str, Any]) -> None:
        text = json.dumps(doc)  # no indent: the C encoder (the live runner rewrites this file about once a second)
        write_text_atomic(self.path, text, prefix="verdicts")
        key = _stat(self.path)
        self._cache = (key, doc) if key is not None else None


def merge(doc: dict[str, Any], entry: dict[str, Any], verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The record ``doc`` with one more evaluation ``entry`` and the current verdicts updated by ``verdicts``."""
    evaluations = [e for e in doc.get("evaluations") or [] if isinstance(e, dict) and not _same(e, entry)]
    dropped = int(doc.get("evaluations_dropped") or 0)
    if "evaluations" not in doc and doc.get("verdicts"):  # a record of the first format: one evaluation
        evaluations.append(
            {
                "id": "earlier",
                "source": str(doc.get("source") or "unknown"),
                "final": bool(doc.get("final")),
                "verdicts": list(doc["verdicts"]),
            }
        )
    evaluations.append(json_safe(entry, nonfinite="string"))
    if len(evaluations) > MAX_EVALUATIONS:
        dropped += len(evaluations) - MAX_EVALUATIONS
        evaluations = evaluations[-MAX_EVALUATIONS:]
    current: dict[str, dict[str, Any]] = {}
    for old in doc.get("verdicts") or []:
        if isinstance(old, dict) and "rule" in old:
            current[str(old["rule"])] = old
    stored = doc.get("worker_parts")
    parts = {str(k): v for k, v in stored.items() if isinstance(v, list)} if isinstance(stored, dict) else {}
    for new in verdicts:
        current[new.rule], combined = merge_current(current.get(new.rule), parts.get(new.rule), new)
        if combined:
            parts[new.rule] = combined
        else:
            parts.pop(new.rule, None)
    skip = ("verdicts", "evaluations", "evaluations_dropped", "worker_parts")
    out = {k: v for k, v in doc.items() if k not in skip}
    out["schema_version"] = VERDICT_SCHEMA_VERSION
    out["verdicts"] = list(current.values())
    out["evaluations"] = evaluations
    if dropped:
        out["evaluations_dropped"] = dropped
    if parts:
        out["worker_parts"] = parts
    return out


def _same(old: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether ``entry`` updates ``old``.

    It does when both come from the same writer, or ``old`` is an unfinished evaluation of the same source and
    process (``trainspect rules --watch`` evaluates again at every look).
    """
    if old.get("id") == entry["id"]:
        return True
    who = ("source", "host", "pid")
    return not old.get("final") and all(old.get(k) == entry.get(k) for k in who)


def _compact(v: Verdict) -> dict[str, Any]:
    data = v.to_dict()
    data.pop("series", None)
    return data


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an advisory lock on ``<dir>/.verdicts.lock`` where the platform has ``flock`` (else no lock)."""
    try:
        import fcntl
    except ImportError:  # Windows: writers are rare enough to go without
        yield
        return
    try:
        fd = os.open(path.with_name(".verdicts.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def record_verdicts(
    run_dir_or_file: str | os.PathLike[str],
    verdicts: Sequence[Verdict],
    source: str,
    final: bool,
    quiet: bool = False,
    **meta: Any,
) -> None:
    """Add one evaluation to a run's record (``run_dir_or_file``: the run directory or the record itself).

    Errors writing the file are logged as one warning (``quiet``: at INFO, when the caller says so itself), never
    raised.
    """
    from trainspect.store.layout import RunLayout

    target = Path(run_dir_or_file)
    path = target if target.suffix == ".json" else RunLayout(target).verdicts
    try:
        VerdictRecord(path, source).write(verdicts, final, **meta)
    except OSError as exc:
        (_log.info if quiet else _log.warning)("rules: could not write verdicts into %s: %s", path, exc)


def record_report_verdicts(run_dir: str | os.PathLike[str], verdicts: Sequence[Verdict], data: Any) -> list[Verdict]:
    """Stamp the profiler verdicts the report evaluated (``source="report"``) and add them to the run's record.

    So the TensorBoard Rules tab and MLflow show what the report shows. Only trainspect runs are written to
    (a SageMaker folder is left as it is). A failure to write is logged at INFO: the report itself shows these
    verdicts, and says in its own one line when the disk is full.

    Returns:
        The verdicts, stamped.
    """
    stamped = stamp(verdicts, "report")
    if stamped and getattr(data, "source", "trainspect") == "trainspect":
        record_verdicts(run_dir, stamped, "report", bool(getattr(data, "job_ended", False)), quiet=True)
    return stamped


def unfinished_rules(path: str | os.PathLike[str]) -> set[str]:
    """Rules whose current verdict is not final: in progress, or from an evaluation made while the data went on.

    A mid-run ``trainspect rules`` judged part of the run; once the run is over such verdicts are evaluated again
    (the report and the closing summary do) instead of standing as the final word.

    Example:
        >>> import tempfile, pathlib
        >>> from trainspect.rules.verdict import Status
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "verdicts.json"
        >>> VerdictRecord(p, "offline").write(stamp([Verdict("A", Status.ISSUES_FOUND)], "offline"), final=False)
        >>> VerdictRecord(p, "live").write(stamp([Verdict("B", Status.NO_ISSUES_FOUND)], "live"), final=True)
        >>> sorted(unfinished_rules(p))
        ['A']
    """
    doc = read_record(path)
    made = {}
    for entry in doc.get("evaluations") or []:
        if not isinstance(entry, dict):
            continue
        for v in entry.get("verdicts") or []:
            if isinstance(v, dict):
                made[(v.get("rule"), v.get("evaluated_at"))] = bool(entry.get("final"))
    out = set()
    for v in doc.get("verdicts") or []:
        if not isinstance(v, dict):
            continue
        key = (v.get("rule"), v.get("evaluated_at"))
        if v.get("status") == "InProgress" or made.get(key, True) is False:
            out.add(str(v.get("rule")))
    return out
