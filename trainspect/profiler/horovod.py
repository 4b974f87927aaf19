"""Horovod timelines (``HOROVOD_TIMELINE=<file>``) read into tables of collective operations, and their summaries.

Horovod's coordinator (rank 0) writes the timeline, a Chrome-trace JSON array (``horovod/common/timeline.cc``):

* ``ph: "M"`` ``process_name`` events: pid 0 carries ``start_time_since_epoch_in_micros``, the wall clock at
  ``ts`` 0; every other pid is one tensor, named in ``args.name`` (``allreduce.<param>``, ``broadcast.<key>``, a
  user's ``name=``);
* ``"B"``/``"E"`` pairs per pid (an ``"E"`` closes the pid's latest open ``"B"``): a ``NEGOTIATE_<OP>`` span while
  the ranks agree the tensor is ready, then the operation span (``ALLREDUCE``…) holding one activity at a time
  (``GLOO_ALLREDUCE``, ``MEMCPY_IN_FUSION_BUFFER``…); the operation's closing ``"E"`` gives ``dtype`` and ``shape``;
* ``"X"`` markers named ``"0"``, ``"1"``…: the coordinator received that rank's request for the tensor. Only
  negotiations outside Horovod's response cache have them (by default the first of each tensor;
  ``HOROVOD_CACHE_CAPACITY=0`` gives them to every one). Within one coordinator cycle the markers come in rank
  order, so a marker's time is the cycle's, and the last rank is certain only when its request came in a later
  cycle (``clear``): told by ``CYCLE_START`` marks (``HOROVOD_TIMELINE_MARK_CYCLES=1``) or, without them, by a
  lower rank arriving after a higher one;
* ``"i"`` ``CYCLE_START`` marks, counted.

The file is read a chunk at a time (memory does not grow with the file, only with the rows kept). A file without
its closing ``]`` (a running job, an older Horovod) is read to its end; a cut-off last event and unreadable records
are skipped, with one warning per read. Times are epoch seconds (float64: rounded to about 0.25 µs; durations are
exact to Horovod's µs) when the file gives its start time (Horovod 0.28 does: rank 0's clock), else seconds since
the timeline started (``HorovodTimeline.start_time_s`` is then None). The file names no rank: it is rank 0's view.
"""

from __future__ import annotations

import codecs
import json
import logging
import math
import os
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pandas as pd

from trainspect.store.safe_files import open_regular

__all__ = [
    "HorovodTimeline",
    "read_horovod_timeline",
    "negotiations",
    "last_ready_counts",
    "phase_totals",
    "tensor_totals",
    "SPAN_COLUMNS",
    "READY_COLUMNS",
    "NEGOTIATION_COLUMNS",
    "LAST_READY_COLUMNS",
    "PHASE_COLUMNS",
    "TENSOR_COLUMNS",
]

log = logging.getLogger(__name__)

SPAN_COLUMNS = ["tensor", "call", "kind", "name", "operation", "start_s", "end_s", "duration_s", "dtype", "shape"]
"""Columns of :attr:`HorovodTimeline.spans`, one row per ``"B"``/``"E"`` span in file order.

``tensor`` (``<pid N>`` when its name is unreadable); ``call``: the n-th collective on that tensor from 0 (a
negotiation and the operation after it share one); ``kind``: ``negotiate``, ``operation`` or ``activity`` (inside an
operation); ``name`` as Horovod writes it; ``operation``: the collective (``ALLREDUCE``…) the span belongs to;
``start_s``, ``end_s``, ``duration_s`` (``end_s``/``duration_s`` NaN for a span still open at the end of the file);
``dtype``, ``shape`` (Horovod's text, ``"[16, 8]"``, ``"[]"``): on operation rows when Horovod gave them, else None
(a broadcast, a failed operation). Text columns have object dtype; ``call`` is int64; times are float64.
"""
READY_COLUMNS = ["tensor", "call", "rank", "time_s", "cycle"]
"""Columns of :attr:`HorovodTimeline.ready`: one row per readiness marker in file order; ``cycle``: how many
``CYCLE_START`` marks came before it, less one (-1: none yet, or the file has none)."""
NEGOTIATION_COLUMNS = [
    "tensor",
    "call",
    "ranks",
    "first_rank",
    "last_rank",
    "first_ready_s",
    "last_ready_s",
    "wait_s",
    "clear",
]
"""Columns of :func:`negotiations`: ``ranks`` (distinct ranks with a marker), ``wait_s`` (last less first marker:
how long the first rank's request waited), ``clear`` (the last rank's request came in a later coordinator cycle
than every other's)."""
LAST_READY_COLUMNS = ["rank", "last", "last_unclear", "negotiations", "last_percent"]
"""Columns of :func:`last_ready_counts`."""
PHASE_COLUMNS = ["kind", "name", "count", "open", "total_s", "mean_s", "max_s"]
"""Columns of :func:`phase_totals` (``tensor`` first with ``per_tensor=True``)."""
TENSOR_COLUMNS = ["tensor", "operation", "calls", "dtype", "shape", "negotiate_s", "operation_s"]
"""Columns of :func:`tensor_totals`."""

_CHUNK = 1 << 20
_MAX_RECORD = 1 << 16  # a record not decoded with this much text after its start is unreadable
_SEP = re.compile(r"[\s,]*")
_RESYNC = re.compile(r"[,\[\]}\n]\s*\{")
_MAX_ID = 1 << 62  # a pid past this is no Horovod tensor index (and would not fit the int64 columns)
_MAX_RANK_DIGITS = 6  # a "rank" of more digits is not one
_NEGOTIATE = "NEGOTIATE_"
_KINDS = np.array(["negotiate", "operation", "activity"], dtype=object)


class _Scan:
    """The JSON values of a JSON array that may lack its ``]``, be cut off or hold garbage, a chunk at a time.

    Text that does not decode is skipped up to the next ``{`` that follows a separator (``,``, ``[``, ``]``, ``}``
    or a line break, as between Horovod's records; not the ``{`` of a record's own ``args``): one unreadable
    stretch. A stretch that starts like a record and runs to the end of the file is the cut-off last event.
    """

    def __init__(self, fh: IO[bytes], chunk: int) -> None:
        self._fh, self._chunk = fh, chunk
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._json = json.JSONDecoder()
        self.buf, self.pos, self.eof = "", 0, False
        self.opened = self.terminated = False
        self.unreadable = 0
        self.cut_off = False
        self._run: bool | None = None  # in an unreadable stretch: whether it may be a cut-off record

    def _more(self) -> None:
        data = self._fh.read(self._chunk)
        self.eof = not data
        self.buf = self.buf[self.pos :] + self._utf8.decode(data, final=self.eof)
        self.pos = 0

    def _resync(self) -> None:
        """Move to the next record start after the unreadable text at ``pos`` (or to the end)."""
        start = self.pos + 1
        while (found := _RESYNC.search(self.buf, start)) is None and not self.eof:
            self.pos = max(len(self.buf) - 1, self.pos)  # keep a separator that ends the buffer
            self._more()
            start = 0
        self.pos = found.end() - 1 if found else len(self.buf)

    def _fail(self, error: Exception) -> None:
        if not self.eof and len(self.buf) - self.pos < _MAX_RECORD and isinstance(error, ValueError):
            self._more()  # the record may go on in the next chunk
            return
        if self._run is None:
            self._run = self.eof and self.buf[self.pos] == "{" and isinstance(error, ValueError)
        self._resync()

    def _end_run(self, at_end: bool) -> None:
        if self._run is not None:
            self.cut_off = at_end and self._run
            self.unreadable += not self.cut_off
        self._run = None

    def _bracket(self) -> bool:
        """Step over the array's opening ``[`` or a ``]``; whether there was one."""
        char = self.buf[self.pos]
        if char == "]" or (char == "[" and not self.opened):
            self.terminated, self.opened, self.pos = char == "]", True, self.pos + 1
            return True
        return False

    def values(self) -> Iterator[Any]:
        """Yield every decodable value; count unreadable stretches; note a cut-off end."""
        while True:
            self.pos = _SEP.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos >= len(self.buf):
                if self.eof:
                    break
                self._more()
            elif not self._bracket():
                try:
                    value, self.pos = self._json.raw_decode(self.buf, self.pos)
                except (ValueError, RecursionError) as exc:
                    self._fail(exc)
                    continue
                self._end_run(at_end=False)
                self.terminated, self.opened = False, True
                yield value
        self._end_run(at_end=True)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past the float range
        return None
    return number if math.isfinite(number) else None


def _pid(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < _MAX_ID else None


def _text(values: Any) -> pd.Series:
    """A text column: object dtype, None where missing, whatever pandas infers for strings by default."""
    return pd.Series(values, dtype=object)


class _Builder:
    """Rows of spans and readiness markers, kept column by column in compact arrays."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.base_us: float | None = None
        self.cycle_marks = self.skipped = self.records = 0
        self._open: dict[int, list[int]] = {}
        self._call: dict[int, int] = {}
        self._negotiated: dict[int, bool] = {}
        self._strings: dict[str, int] = {}
        self.s_pid, self.s_call, self.s_kind, self.s_name, self.s_op = (array("q") for _ in range(5))
        self.s_start, self.s_end = array("d"), array("d")
        self.s_args: dict[int, tuple[str | None, str | None]] = {}
        self.r_pid, self.r_call, self.r_rank, self.r_cycle = (array("q") for _ in range(4))
        self.r_ts = array("d")

    def add(self, ev: Any) -> None:
        """Take one decoded value: every one counts in ``records``, one not understood also in ``skipped``."""
        self.records += 1
        ph = ev.get("ph") if isinstance(ev, dict) else None
        if ph == "i":
            self.cycle_marks += ev.get("name") == "CYCLE_START"
        elif ph == "M":
            self.skipped += not self._meta(ev)
        else:
            self.skipped += not self._event(ph, ev)

    def _event(self, ph: Any, ev: Any) -> bool:
        handler = {"B": self._begin, "E": self._end, "X": self._ready}.get(ph) if isinstance(ph, str) else None
        if handler is None:
            return False
        pid, ts = _pid(ev.get("pid")), _number(ev.get("ts"))
        return pid is not None and ts is not None and handler(pid, ts, ev)

    def _meta(self, ev: dict[str, Any]) -> bool:
        args = ev.get("args")
        if not isinstance(args, dict):
            return False
        start = _number(args.get("start_time_since_epoch_in_micros"))
        if start is not None:
            self.base_us = start
        pid = _pid(ev.get("pid"))
        if ev.get("name") == "process_name" and isinstance(args.get("name"), str) and pid is not None:
            self.names[pid] = args["name"]
        return True

    def _intern(self, text: str) -> int:
        return self._strings.setdefault(text, len(self._strings))

    def _begin(self, pid: int, ts: float, ev: dict[str, Any]) -> bool:
        name = ev.get("name")
        if not isinstance(name, str):
            return False
        stack = self._open.setdefault(pid, [])
        kind = 2 if stack else (0 if name.startswith(_NEGOTIATE) else 1)
        if not stack:
            if kind == 0 or not self._negotiated.get(pid, False):
                self._call[pid] = self._call.get(pid, -1) + 1
            self._negotiated[pid] = kind == 0
        op = self.s_op[stack[0]] if stack else self._intern(name.removeprefix(_NEGOTIATE))
        stack.append(len(self.s_pid))
        for column, value in (
            (self.s_pid, pid),
            (self.s_call, self._call[pid]),
            (self.s_kind, kind),
            (self.s_name, self._intern(name)),
            (self.s_op, op),
        ):
            column.append(value)
        self.s_start.append(ts)
        self.s_end.append(math.nan)
        return True

    def _end(self, pid: int, ts: float, ev: dict[str, Any]) -> bool:
        stack = self._open.get(pid)
        if not stack:
            return False
        row = stack.pop()
        self.s_end[row] = max(ts, self.s_start[row])
        args = ev.get("args")
        if self.s_kind[row] == 1 and isinstance(args, dict):
            dtype, shape = args.get("dtype"), args.get("shape")
            self.s_args[row] = (dtype if isinstance(dtype, str) else None, shape if isinstance(shape, str) else None)
        return ts >= self.s_start[row]

    def _ready(self, pid: int, ts: float, ev: dict[str, Any]) -> bool:
        name = ev.get("name")
        if not (isinstance(name, str) and name.isascii() and name.isdigit() and len(name) <= _MAX_RANK_DIGITS):
            return False
        for column, value in (
            (self.r_pid, pid),
            (self.r_call, self._call.get(pid, -1)),
            (self.r_rank, int(name)),
            (self.r_cycle, self.cycle_marks - 1),
        ):
            column.append(value)
        self.r_ts.append(ts)
        return True

    def _tensors(self, pids: np.ndarray) -> list[str]:
        lookup = {int(p): self.names.get(int(p), f"<pid {int(p)}>") for p in np.unique(pids)}
        return [lookup[p] for p in pids.tolist()]

    def _seconds(self, ts: array) -> np.ndarray:
        return (np.frombuffer(ts, dtype=np.float64) + (self.base_us or 0.0)) / 1e6

    def spans(self) -> pd.DataFrame:
        """The spans table (:data:`SPAN_COLUMNS`)."""
        strings = np.array(list(self._strings), dtype=object)
        start, end = self._seconds(self.s_start), self._seconds(self.s_end)
        duration = (np.frombuffer(self.s_end, dtype=np.float64) - np.frombuffer(self.s_start, dtype=np.float64)) / 1e6
        args = [self.s_args.get(i, (None, None)) for i in range(len(self.s_pid))]
        return pd.DataFrame(
            {
                "tensor": _text(self._tensors(np.frombuffer(self.s_pid, dtype=np.int64))),
                "call": np.frombuffer(self.s_call, dtype=np.int64),
                "kind": _text(_KINDS[np.frombuffer(self.s_kind, dtype=np.int64)]),
                "name": _text(strings[np.frombuffer(self.s_name, dtype=np.int64)] if len(strings) else []),
                "operation": _text(strings[np.frombuffer(self.s_op, dtype=np.int64)] if len(strings) else []),
                "start_s": start,
                "end_s": end,
                "duration_s": duration,
                "dtype": _text([a[0] for a in args]),
                "shape": _text([a[1] for a in args]),
            },
            columns=SPAN_COLUMNS,
        )

    def ready(self) -> pd.DataFrame:
        """The readiness markers table (:data:`READY_COLUMNS`)."""
        return pd.DataFrame(
            {
                "tensor": _text(self._tensors(np.frombuffer(self.r_pid, dtype=np.int64))),
                "call": np.frombuffer(self.r_call, dtype=np.int64),
                "rank": np.frombuffer(self.r_rank, dtype=np.int64),
                "time_s": self._seconds(self.r_ts),
                "cycle": np.frombuffer(self.r_cycle, dtype=np.int64),
            },
            columns=READY_COLUMNS,
        )


@dataclass(frozen=True, eq=False)
class HorovodTimeline:
    """One Horovod timeline file, read.

    Attributes:
        spans: every span, :data:`SPAN_COLUMNS`.
        ready: every readiness marker, :data:`READY_COLUMNS`.
        start_time_s: epoch seconds at the timeline's ``ts`` 0 (the times are then epoch seconds); None when the
            file gives none (the times are seconds since the timeline started).
        cycle_marks: how many ``CYCLE_START`` marks the file holds.
        complete: the array ended with its ``]`` (a finished job; a running one's file may lack it).
        records: records read (understood or not).
        skipped: records read but not understood.
        unreadable: stretches of text that were not JSON, skipped.
        cut_off: the file ends inside a record (a running job, a copy taken mid-write), skipped.

    Example:
        >>> import pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "timeline.json"
        >>> _ = p.write_text('[{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.w"}},'
        ...                  '{"ph": "B", "name": "ALLREDUCE", "ts": 5, "pid": 1},{"ph": "E", "ts": 9, "pid": 1}]')
        >>> tl = read_horovod_timeline(p)
        >>> tl.spans[["tensor", "kind", "name", "duration_s"]].values.tolist()
        [['allreduce.w', 'operation', 'ALLREDUCE', 4e-06]]
    """

    spans: pd.DataFrame
    ready: pd.DataFrame
    start_time_s: float | None
    cycle_marks: int
    complete: bool
    records: int
    skipped: int
    unreadable: int
    cut_off: bool

    @property
    def problem(self) -> str | None:
        """What was skipped, in words (None: nothing)."""
        if self.records == self.skipped and (self.unreadable or self.skipped):
            return "not a Horovod timeline: no record could be understood"
        parts = [f"{self.unreadable} unreadable stretch(es)"] if self.unreadable else []
        parts += [f"{self.skipped} record(s) not understood"] if self.skipped else []
        parts += ["the last event, cut off"] if self.cut_off else []
        return "skipped " + ", ".join(parts) if parts else None


def read_horovod_timeline(path: str | os.PathLike[str], chunk_bytes: int = _CHUNK) -> HorovodTimeline:
    """Read a Horovod timeline file, finished or still being written, a chunk of ``chunk_bytes`` at a time.

    Logs one warning when something was skipped (:attr:`HorovodTimeline.problem`).

    Args:
        path: the file ``HOROVOD_TIMELINE`` named.
        chunk_bytes: how much to read at a time (≥ 1).

    Returns:
        The tables, in file order.

    Raises:
        ValueError: ``chunk_bytes`` < 1.
        OSError: the file cannot be opened or read.
    """
    if not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise ValueError(f"chunk_bytes={chunk_bytes!r}: must be an int ≥ 1")
    build = _Builder()
    with open_regular(path) as fh:
        scan = _Scan(fh, chunk_bytes)
        for value in scan.values():
            build.add(value)
    base = build.base_us
    timeline = HorovodTimeline(
        spans=build.spans(),
        ready=build.ready(),
        start_time_s=None if base is None else base / 1e6,
        cycle_marks=build.cycle_marks,
        complete=scan.terminated,
        records=build.records,
        skipped=build.skipped,
        unreadable=scan.unreadable,
        cut_off=scan.cut_off,
    )
    if timeline.problem:
        log.warning("trainspect: Horovod timeline %s: %s", os.fspath(path), timeline.problem)
    return timeline


def negotiations(ready: pd.DataFrame) -> pd.DataFrame:
    """Per negotiation with readiness markers, who was ready first and last, and when.

    Args:
        ready: :attr:`HorovodTimeline.ready` (:data:`READY_COLUMNS`), in file order.

    Returns:
        :data:`NEGOTIATION_COLUMNS`, sorted by ``first_ready_s``.
    """
    if ready.empty:
        return pd.DataFrame(columns=NEGOTIATION_COLUMNS)
    keys = ["tensor", "call"]
    df = ready.reset_index(drop=True)
    grp = df.groupby(keys, sort=False)
    last = {"rank": "last_rank", "time_s": "last_ready_s", "cycle": "lc"}
    out = grp.tail(1).set_index(keys)[list(last)].rename(columns=last)
    first = grp.head(1).set_index(keys)
    prev = df[grp.cumcount(ascending=False) == 1].set_index(keys)[["rank", "cycle"]]
    out = out.join(prev.rename(columns={"rank": "pr", "cycle": "pc"}))
    out["first_rank"], out["first_ready_s"], out["ranks"] = first["rank"], first["time_s"], grp["rank"].nunique()
    has_prev = out["pr"].notna()
    by_cycle = has_prev & (out["lc"] >= 0) & (out["pc"] >= 0)
    out["clear"] = has_prev & np.where(by_cycle, out["lc"] > out["pc"], out["last_rank"] < out["pr"])
    out["wait_s"] = out["last_ready_s"] - out["first_ready_s"]
    return out.reset_index().sort_values("first_ready_s", kind="stable")[NEGOTIATION_COLUMNS].reset_index(drop=True)


def last_ready_counts(ready: pd.DataFrame, world_size: int | None = None) -> pd.DataFrame:
    """How often each rank was the last one ready for a collective: Horovod's own straggler evidence.

    Only negotiations with a marker from every rank count. ``last``: those in which the rank was clearly last;
    ``last_unclear``: those in which its marker came last in the same coordinator cycle as the one before (or
    cannot be told apart: no cycle marks, ranks in ascending order); ``negotiations``: how many counted;
    ``last_percent``: ``last`` in percent of them.

    Args:
        ready: :attr:`HorovodTimeline.ready`.
        world_size: the number of ranks (default: the highest rank with a marker, plus one).

    Returns:
        :data:`LAST_READY_COLUMNS`, one row per rank, the most often clearly last first.

    Raises:
        ValueError: ``world_size`` < 1.
    """
    if world_size is not None and (not isinstance(world_size, int) or world_size < 1):
        raise ValueError(f"world_size={world_size!r}: must be an int ≥ 1 (or None: inferred from the markers)")
    size = world_size if world_size is not None else (int(ready["rank"].max()) + 1 if len(ready) else 0)
    neg = negotiations(ready)
    full = neg[neg["ranks"] == size] if size > 1 else neg.iloc[0:0]
    ranks = pd.Index(range(size), name="rank")
    last = full[full["clear"].astype(bool)]["last_rank"].value_counts().reindex(ranks, fill_value=0)
    unclear = full[~full["clear"].astype(bool)]["last_rank"].value_counts().reindex(ranks, fill_value=0)
    total = len(full)
    out = pd.DataFrame(
        {
            "rank": list(ranks),
            "last": last.to_numpy(dtype=np.int64),
            "last_unclear": unclear.to_numpy(dtype=np.int64),
            "negotiations": total,
        }
    )
    out["last_percent"] = 100.0 * out["last"] / total if total else 0.0
    out = out.sort_values(["last", "last_unclear", "rank"], ascending=[False, False, True], kind="stable")
    return out[LAST_READY_COLUMNS].reset_index(drop=True)


def phase_totals(spans: pd.DataFrame, per_tensor: bool = False) -> pd.DataFrame:
    """Time per span name (``NEGOTIATE_ALLREDUCE``, ``GLOO_ALLREDUCE``…), over all tensors or per tensor.

    Args:
        spans: :attr:`HorovodTimeline.spans`.
        per_tensor: one row per tensor and name instead of per name.

    Returns:
        :data:`PHASE_COLUMNS` (``tensor`` first with ``per_tensor``): ``count`` closed spans, ``open`` ones (no
        end yet), and the ``total_s``, ``mean_s``, ``max_s`` of the closed ones; the largest total first.
    """
    keys = (["tensor"] if per_tensor else []) + ["kind", "name"]
    columns = keys + PHASE_COLUMNS[2:]
    if spans.empty:
        return pd.DataFrame(columns=columns)
    closed = spans["end_s"].notna()
    grp = spans.assign(_closed=closed, _open=~closed).groupby(keys, sort=False)
    out = grp.agg(
        count=("_closed", "sum"),
        open=("_open", "sum"),
        total_s=("duration_s", "sum"),
        mean_s=("duration_s", "mean"),
        max_s=("duration_s", "max"),
    ).reset_index()
    out[["count", "open"]] = out[["count", "open"]].astype(np.int64)
    return out.sort_values("total_s", ascending=False, kind="stable")[columns].reset_index(drop=True)


def tensor_totals(spans: pd.DataFrame) -> pd.DataFrame:
    """Per tensor: its collective, how many calls, its last ``dtype``/``shape``, time negotiating and operating.

    Args:
        spans: :attr:`HorovodTimeline.spans`.

    Returns:
        :data:`TENSOR_COLUMNS`; ``operation_s`` includes the activities inside the operations; the largest
        ``negotiate_s + operation_s`` first.
    """
    if spans.empty:
        return pd.DataFrame(columns=TENSOR_COLUMNS)
    grp = spans.groupby("tensor", sort=False)
    ops = spans[spans["kind"] == "operation"].groupby("tensor", sort=False)
    out = pd.DataFrame({"operation": grp["operation"].first(), "calls": grp["call"].nunique()})
    out = out.join(ops[["dtype", "shape"]].last())
    out["negotiate_s"] = spans[spans["kind"] == "negotiate"].groupby("tensor")["duration_s"].sum()
    out["operation_s"] = ops["duration_s"].sum()
    out[["negotiate_s", "operation_s"]] = out[["negotiate_s", "operation_s"]].fillna(0.0)
    out = out.iloc[np.argsort(-(out["negotiate_s"] + out["operation_s"]).to_numpy(), kind="stable")]
    return out.rename_axis("tensor").reset_index()[TENSOR_COLUMNS]
