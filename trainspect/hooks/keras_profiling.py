"""Detailed profiling of a Keras step window with the TensorFlow profiler, summarised as top operators.

``tf.profiler.experimental.start/stop`` write an XSpace (``*.xplane.pb``) under ``RunLayout.detailed_dir(worker)/
tf_<a>-<b>/``; the host plane's events are summed per operator into ``operators_<a>-<b>.json`` (the table
:mod:`trainspect.profiler.detailed` reads) and written as a Chrome trace ``trace_<a>-<b>.json``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import tensorflow as tf

from trainspect.profiler.config import ProfileRange, ProfilerConfig
from trainspect.profiler.detailed import write_table
from trainspect.store.layout import RunLayout

__all__ = ["TFProfilingWindow", "summarise_xspace"]

logger = logging.getLogger(__name__)
_TOP = 100


class TFProfilingWindow:
    """Runs the TensorFlow profiler over the configured detailed window (steps or time).

    Args:
        run_dir: the run directory.
        worker: the worker's name.
        config: the profiler config; without a detailed window nothing is profiled.
    """

    def __init__(self, run_dir: str | os.PathLike[str], worker: str, config: ProfilerConfig | None = None) -> None:
        self.worker = worker
        self.directory = RunLayout(run_dir).detailed_dir(worker)
        params = (config or ProfilerConfig()).framework_profile_params
        self._range: ProfileRange | None = params.detailed if params is not None else None
        self._created = time.time()
        self._first: int | None = None
        self._start: int | None = None
        self._last: int | None = None
        self._done = self._range is None

    def _inside(self, step: int) -> bool:
        assert self._range is not None
        if self._range.is_time_window:
            return self._range.contains_time(time.time(), self._created)
        return self._range.contains_step(step, self._first if self._first is not None else step)

    def on_step_start(self, global_step: int) -> None:
        """A step begins: start the profiler when its window opens here."""
        if self._first is None:
            self._first = global_step
        if not self._done and self._start is None and self._inside(global_step):
            self._guard(self._begin, global_step)

    def on_step_end(self, global_step: int) -> None:
        """A step ended: stop and summarise when the window closes here."""
        if self._start is None:
            return
        self._last = global_step
        assert self._range is not None
        if (self._range.is_time_window and self._range.duration is None) or not self._inside(global_step + 1):
            self._guard(self._finish, global_step + 1)

    def close(self) -> None:
        """Stop and summarise a profiler still running."""
        if self._start is not None:
            self._guard(self._finish, (self._last if self._last is not None else self._start) + 1)

    def _guard(self, fn: Any, step: int) -> None:
        try:
            fn(step)
        except Exception:
            self._done, self._start = True, None
            logger.warning(
                "trainspect: TensorFlow profiling window of %s failed and is off", self.worker, exc_info=True
            )

    def _begin(self, step: int) -> None:
        self._start = step
        self._logdir = self.directory / f"tf_{step}"
        tf.profiler.experimental.start(str(self._logdir))

    def _finish(self, end: int) -> None:
        start, self._start, self._done = self._start, None, True
        tf.profiler.experimental.stop()
        assert start is not None
        planes = sorted(Path(self._logdir).rglob("*.xplane.pb"))
        rows, trace = summarise_xspace(planes[-1]) if planes else ([], {"traceEvents": []})
        (self.directory / f"trace_{start}-{end}.json").write_text(json.dumps(trace), encoding="utf-8")
        write_table(self.directory, "operators", self.worker, start, end, rows)


def summarise_xspace(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Return the top operators (rows of ``operators_*.json``) and a Chrome trace of an XSpace file.

    The host threads' events are summed per name: ``total_time_us`` is their duration, ``self_time_us`` that less
    the events nested inside them on the same thread.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    total: dict[tuple[str, str], float] = defaultdict(float)
    own: dict[tuple[str, str], float] = defaultdict(float)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    events: list[dict[str, Any]] = []
    for pid, plane in enumerate(space.planes):
        names = {k: m.name for k, m in plane.event_metadata.items()}
        for line in plane.lines:
            spans = sorted(
                (e.offset_ps, e.offset_ps + e.duration_ps, names.get(e.metadata_id, "?")) for e in line.events
            )
            _self_times(spans, total, own, calls, plane.name.startswith("/device"))
            base_us = line.timestamp_ns / 1000.0
            events += [
                {"name": n, "ph": "X", "ts": base_us + a / 1e6, "dur": (b - a) / 1e6, "pid": pid, "tid": line.id}
                for a, b, n in spans
            ]
    rows = [
        {
            "device": dev,
            "name": name,
            "calls": calls[(dev, name)],
            "self_time_us": own[(dev, name)],
            "total_time_us": total[(dev, name)],
        }
        for dev, name in sorted(total, key=lambda k: -own[k])[:_TOP]
    ]
    return rows, {"traceEvents": events}


def _self_times(spans: list[tuple[int, int, str]], total: Any, own: Any, calls: Any, gpu: bool) -> None:
    device = "gpu" if gpu else "cpu"
    stack: list[tuple[int, tuple[str, str]]] = []
    for start, end, name in spans:
        while stack and stack[-1][0] <= start:
            stack.pop()
        key = (device, name)
        if stack:
            own[stack[-1][1]] -= (min(end, stack[-1][0]) - start) / 1e6
        stack.append((end, key))
        total[key] += (end - start) / 1e6
        own[key] += (end - start) / 1e6
        calls[key] += 1
