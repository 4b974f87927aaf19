"""``SystemTail``: the system samples written since the last call, per node, at a cost proportional to new data.

Reads the run directory's ``profiler/system/<node>/*.tsys`` frames incrementally (the format of docs/profiler.md),
so a logger polling once a second stays cheap however long the job runs.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np

from trainspect.profiler import schema
from trainspect.profiler._files import TailedFile
from trainspect.profiler.arrays import aggregate_buckets
from trainspect.profiler.metrics import CATALOGUE
from trainspect.store.layout import RunLayout

__all__ = ["SystemTail"]

log = logging.getLogger(__name__)


class _File:
    def __init__(self, path: Path) -> None:
        self.tail = TailedFile(path)
        self.keys: tuple[str, ...] = ()
        self.encodings: tuple[str, ...] = ()

    def new_rows(self) -> list[tuple[np.ndarray, np.ndarray, tuple[str, ...]]]:
        out = []
        for frame in self.tail.poll():
            try:
                if frame.kind == schema.KIND_SCHEMA:
                    head = schema.decode_json(frame.payload)
                    self.keys = tuple(str(k) for k, _e in head["metrics"])
                    self.encodings = tuple(str(e) for _k, e in head["metrics"])
                elif frame.kind == schema.KIND_SYSTEM and self.keys:
                    times, values = schema.decode_system_chunk(frame.payload, self.encodings)
                    out.append((times, values, self.keys))
            except (ValueError, KeyError, TypeError) as exc:
                log.debug("trainspect: skipping a bad system frame in %s: %s", self.tail, exc)
        return out


class SystemTail:
    """New system samples of every node of a run directory.

    Args:
        run_dir: the run directory.
        nodes: only these nodes (default: all).

    Example:
        >>> import tempfile
        >>> SystemTail(tempfile.mkdtemp()).poll()
        {}
    """

    def __init__(self, run_dir: str | os.PathLike[str], nodes: set[str] | None = None) -> None:
        self.system_dir = RunLayout(run_dir).profiler_dir / "system"
        self.nodes = nodes
        self._files: dict[Path, _File] = {}

    def poll(self) -> dict[str, tuple[float, dict[str, float]]]:
        """Per node with new samples: (time of the newest sample, each metric over the new samples).

        A metric's new samples are averaged, or combined as the metric catalogue declares (``Metric.aggregate``).
        """
        if not self.system_dir.is_dir():
            return {}
        out: dict[str, tuple[float, dict[str, float]]] = {}
        for node_dir in sorted(d for d in self.system_dir.iterdir() if d.is_dir()):
            if self.nodes is not None and node_dir.name not in self.nodes:
                continue
            chunks: dict[str, list[np.ndarray]] = {}
            last = -1.0
            for path in sorted(node_dir.glob(f"*{schema.SYSTEM_SUFFIX}")):
                for times, values, keys in self._files.setdefault(path, _File(path)).new_rows():
                    for j, key in enumerate(keys):
                        chunks.setdefault(key, []).append(values[:, j])
                    last = max(last, float(times[-1]) / 1000.0) if len(times) else last
            combined = {k: _aggregate(k, np.concatenate(c)) for k, c in chunks.items()}
            combined = {k: v for k, v in combined.items() if math.isfinite(v)}
            if combined:
                out[node_dir.name] = (last, combined)
        return out


def _aggregate(key: str, values: np.ndarray) -> float:
    """One metric's new samples combined as the catalogue says (NaN when none is finite)."""
    how = CATALOGUE.describe(key).aggregate
    return float(aggregate_buckets(values[:, None], np.zeros(1, dtype=np.int64), [how])[0, 0])
