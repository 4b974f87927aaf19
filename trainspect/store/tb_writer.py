"""TensorBoard summaries (scalars and histograms) written with TensorBoard's own protos; no TensorFlow needed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from trainspect.modes import ModeKeys

__all__ = ["TensorBoardWriter", "tb_tag"]

_BINS = 30


def tb_tag(name: str, mode: ModeKeys) -> str:
    """Return the TensorBoard tag of a tensor: its name, prefixed by the mode outside training."""
    if mode in (ModeKeys.TRAIN, ModeKeys.GLOBAL):
        return name
    return f"{mode.name.lower()}/{name}"


class TensorBoardWriter:
    """Writes ``events.out.tfevents.*`` into one folder through TensorBoard's ``EventFileWriter``."""

    def __init__(self, folder: Path, filename_suffix: str = "") -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        folder.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(folder), max_queue_size=1000, flush_secs=1, filename_suffix=filename_suffix)

    def _emit(self, value: object, step: int, wall_time: float) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(value=[value])
        self._writer.add_event(event_pb2.Event(summary=summary, step=step, wall_time=wall_time))

    def scalar(self, tag: str, value: float, step: int, wall_time: float) -> None:
        """Add one scalar point."""
        from tensorboard.compat.proto import summary_pb2

        self._emit(summary_pb2.Summary.Value(tag=tag, simple_value=float(value)), step, wall_time)

    def histogram(self, tag: str, values: np.ndarray, step: int, wall_time: float) -> None:
        """Add one histogram of the finite values (no point when there are none)."""
        from tensorboard.compat.proto import summary_pb2

        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return
        lo, hi = float(flat.min()), float(flat.max())
        if lo == hi:
            edges = np.array([lo - 0.5, hi + 0.5]) if lo == 0 else np.array([lo - abs(lo) * 0.01, hi + abs(hi) * 0.01])
        else:
            edges = np.linspace(lo, hi, _BINS + 1)
        counts, edges = np.histogram(flat, bins=edges)
        histo = summary_pb2.HistogramProto(
            min=lo,
            max=hi,
            num=float(flat.size),
            sum=float(flat.sum()),
            sum_squares=float(np.dot(flat, flat)),
            bucket_limit=[float(e) for e in edges[1:]],
            bucket=[float(c) for c in counts],
        )
        self._emit(summary_pb2.Summary.Value(tag=tag, histo=histo), step, wall_time)

    def flush(self) -> None:
        """Flush the event file."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close."""
        self._writer.close()


def finite(value: float) -> bool:
    """Return whether a float is finite (TensorBoard shows NaN scalars as gaps)."""
    return math.isfinite(value)
