"""Chrome-trace files as SageMaker writes them, read into framework events the way smdebug's readers read them.

Two kinds of file (spec 3.3):

* timelines ``framework/pevents/<YYYYMMDDHH>/<µs of last event>_<node>_<suffix>.json`` (Python, model,
  Horovod, SMDataParallel): a JSON array; ``ph: "M"`` events name the processes (the phase of the events with
  that ``pid``) and give ``start_time_since_epoch_in_micros``, which ``ts`` is relative to;
* TensorFlow detailed-profiler traces ``framework/tensorflow/detailed_profiling/<YYYYMMDDHH>/<start step>/
  plugins/profile/<date>/<host>.trace.json.gz``: gzip'd ``{"traceEvents": [...]}`` whose ``ts`` is relative to
  the profiler start recorded in the ``<node>_<start µs>_<end µs>.metadata`` file of the ``<start step>`` folder.

An event is a complete event (``ph: "X"``, ``ts`` + ``dur``) or a ``"B"``/``"E"`` pair of the same ``pid``
(the ``"E"`` closes the latest open ``"B"``; an ``"E"`` with no open ``"B"`` is dropped), as smdebug reads them;
instant (``"i"``) and metadata events are not events. Times here are epoch **microseconds**.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from pathlib import Path
from typing import Any

from trainspect.profiler.events import TraceEvent
from trainspect.store.safe_files import TRACE_CAP, UnsafeFile, loads_bounded, read_capped

__all__ = ["load_trace", "parse_trace", "read_trace_file", "tf_trace_metadata", "to_us", "in_window"]

_META = re.compile(r"^(.+)_(\d+)_(\d+)\.metadata$")
_DAMAGED = "truncated or malformed trace; readable events kept"


_PER_US = {
    "s": 1_000_000,
    "seconds": 1_000_000,
    "ms": 1000,
    "milliseconds": 1000,
    "us": 1,
    "microseconds": 1,
    "ns": 0.001,
    "nanoseconds": 0.001,
}


def to_us(value: float, unit: str) -> float:
    """A time in ``unit`` as epoch µs, converted as smdebug converts query bounds (truncated to whole µs).

    An open bound (±inf) stays open.
    """
    key = str(getattr(unit, "name", unit)).lower()
    if key not in _PER_US:
        raise ValueError(f"unit={unit!r}: allowed: s, ms, us, ns (or seconds, milliseconds, microseconds, nanoseconds)")
    factor = _PER_US[key]
    if not math.isfinite(value) or factor < 1:
        return value * factor
    return int(value * factor)


def in_window(events: list[TraceEvent], start_us: float, end_us: float) -> list[TraceEvent]:
    """Events (times in µs) that overlap ``[start_us, end_us]``, bounds included: smdebug's selection."""
    return [e for e in events if not (e.end_time < start_us or end_us < e.start_time)]


def load_trace(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The JSON objects of a trace file (plain or gzip'd, an array or ``{"traceEvents": [...]}``).

    A file cut off while being written keeps its whole lines; the flag says something was skipped.

    Raises:
        OSError, EOFError, gzip.BadGzipFile: the file cannot be read at all.
    """
    raw = read_capped(path, TRACE_CAP)
    if path.suffix == ".gz":
        raw = _gunzip(raw, path)
    text = raw.decode("utf-8", errors="replace").strip()
    for candidate in (text, text.rstrip(",") + "]"):
        try:
            data = loads_bounded(candidate)
        except ValueError:
            continue
        events = data.get("traceEvents", []) if isinstance(data, dict) else data
        if not isinstance(events, list):
            return [], True
        return [e for e in events if isinstance(e, dict)], candidate is not text
    events = []
    for line in text.strip("[]").splitlines():
        try:
            events.append(loads_bounded(line.strip().rstrip(",")))
        except ValueError:
            continue
    return [e for e in events if isinstance(e, dict)], True


def _gunzip(raw: bytes, path: Path) -> bytes:
    """Decompress at most :data:`TRACE_CAP` bytes (a gzip bomb is refused, not expanded)."""
    parts: list[bytes] = []
    size = 0
    while raw and size <= TRACE_CAP:  # one gzip member after the other, as gzip.decompress reads them
        inflate = zlib.decompressobj(wbits=31)
        parts.append(inflate.decompress(raw, TRACE_CAP + 1 - size))
        size += len(parts[-1])
        if not inflate.eof:
            break
        raw = inflate.unused_data
    if size > TRACE_CAP:
        raise UnsafeFile(f"{path}: decompresses to over {TRACE_CAP:,} bytes")
    return b"".join(parts)


def _base_and_phases(raw: list[dict[str, Any]], base: float) -> tuple[float, dict[Any, str]]:
    phase_of: dict[Any, str] = {}
    for ev in raw:
        if ev.get("ph") != "M":
            continue
        got = ev.get("args")
        args: dict[str, Any] = got if isinstance(got, dict) else {}
        if "start_time_since_epoch_in_micros" in args:
            base = float(args["start_time_since_epoch_in_micros"])
        if ev.get("name") == "process_name" and "name" in args:
            phase_of[ev.get("pid")] = str(args["name"])
    return base, phase_of


def _event(ev: dict[str, Any], start: float, end: float, node: str, phase_of: dict[Any, str]) -> TraceEvent:
    args = ev.get("args")
    pid = ev.get("pid", 0)
    return TraceEvent(
        start,
        end,
        str(ev.get("name", "")),
        phase_of.get(pid, str(ev.get("name", ""))),
        node,
        node,
        _int(pid),
        _int(ev.get("tid", 0)),
        dict(args) if isinstance(args, dict) else {},
    )


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def parse_trace(raw: list[dict[str, Any]], node: str, base_us: float = 0.0) -> list[TraceEvent]:
    """Framework events (times in epoch µs) of a trace's JSON objects.

    ``ts`` is relative to ``start_time_since_epoch_in_micros`` (or ``base_us``); a ``ts`` already past 1e15 is
    taken as absolute.
    """
    base, phase_of = _base_and_phases(raw, base_us)
    out: list[TraceEvent] = []
    open_b: dict[Any, list[dict[str, Any]]] = {}
    for ev in raw:
        ph = ev.get("ph")
        try:
            ts = float(ev["ts"])
        except (KeyError, TypeError, ValueError):
            continue
        start = ts + (base if ts < 1e15 else 0.0)
        if ph == "X":
            try:
                out.append(_event(ev, start, start + float(ev.get("dur", 0.0)), node, phase_of))
            except (TypeError, ValueError):
                continue
        elif ph == "B":
            open_b.setdefault(ev.get("pid"), []).append({**ev, "ts": start})
        elif ph == "E" and open_b.get(ev.get("pid")):
            begin = open_b[ev.get("pid")].pop()
            if start >= begin["ts"]:
                merged = {**begin, "args": {**(begin.get("args") or {}), **(ev.get("args") or {})}}
                out.append(_event(merged, begin["ts"], start, node, phase_of))
    return out


def tf_trace_metadata(trace: Path) -> tuple[str, int, int] | None:
    """``(node, start µs, end µs)`` from the ``.metadata`` file of a TF trace's ``<start step>`` folder."""
    step_dir = trace.parents[3] if len(trace.parents) > 3 else trace.parent
    for meta in sorted(step_dir.glob("*.metadata")):
        match = _META.match(meta.name)
        if match:
            return match.group(1), int(match.group(2)), int(match.group(3))
    return None


def read_trace_file(path: str | Path) -> tuple[list[TraceEvent], str | None]:
    """Every event of one trace file (times in epoch µs) and what was wrong with it (``None``: nothing).

    A timeline's node is the second ``_`` field of its name; a TF trace's node and time base come from its
    ``.metadata`` file (without one the trace cannot be placed in time and yields no events).

    Example:
        >>> import json, pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "1000_algo-1_pythontimeline.json"
        >>> _ = p.write_text(json.dumps([{"ph": "X", "name": "a", "pid": 1, "ts": 5, "dur": 2}]))
        >>> [(e.start_time, e.end_time, e.node_id) for e in read_trace_file(p)[0]]
        [(5.0, 7.0, 'algo-1')]
    """
    path = Path(path)
    try:
        raw, damaged = load_trace(path)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        return [], str(exc)
    problem = _DAMAGED if damaged else None
    if path.name.endswith(".trace.json.gz"):
        meta = tf_trace_metadata(path)
        if meta is None:
            return [], "no <node>_<start>_<end>.metadata file next to the TF trace: its start time is unknown"
        return parse_trace(raw, meta[0], float(meta[1])), problem
    parts = path.name.split("_")
    return parse_trace(raw, parts[1] if len(parts) >= 3 else ""), problem
