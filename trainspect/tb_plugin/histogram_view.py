"""The Profiler tab's utilisation-histogram card: per node and device, the counts of the report's histogram section.

Each row carries the bin ``edges`` and ``counts`` (what :func:`~trainspect.profiler.histograms.
utilisation_histograms` returns) and a ``distribution`` in block characters, which the generic table card draws.
"""

from __future__ import annotations

from typing import Any

from tensorboard import errors

from trainspect.profiler.data import ProfilerData
from trainspect.profiler.histograms import DEFAULT_BINS, utilisation_histograms

__all__ = ["histogram_rows", "sparkline", "MAX_BINS"]

MAX_BINS = 100
"""The most bins one request may ask for (1 % each)."""
_BLOCKS = "·▁▂▃▄▅▆▇█"


def sparkline(counts: list[int] | tuple[int, ...]) -> str:
    """The counts as one block character each, scaled to the largest (``·``: none).

    Example:
        >>> sparkline([0, 1, 4, 8])
        '·▁▄█'
    """
    top = max(counts, default=0)
    if top <= 0:
        return _BLOCKS[0] * len(counts)
    return "".join(_BLOCKS[0] if c <= 0 else _BLOCKS[max(1, -(-8 * c // top))] for c in counts)


def histogram_rows(
    data: ProfilerData,
    node: str | None = None,
    start: float | None = None,
    end: float | None = None,
    bins: int = DEFAULT_BINS,
) -> list[dict[str, Any]]:
    """One row per node and device of the utilisation histograms.

    Rows hold ``node``, ``device``, ``samples``, ``mean``, ``edges``, ``counts`` and ``distribution`` (the counts in
    block characters).

    Args:
        data: the run's profiler data.
        node: only this node (every node's when ``None``).
        start: the first epoch second counted (default: the first sample).
        end: the last epoch second counted (default: the last sample).
        bins: equal bins over 0-100 %.

    Raises:
        NotFoundError: ``node`` is not a node of the run.
        InvalidArgumentError: ``end`` is before ``start``.
    """
    if node is not None and data.system and node not in data.system:
        raise errors.NotFoundError(f"no node named {node!r} in this run")
    if start is not None and end is not None and end < start:
        raise errors.InvalidArgumentError(f"end {end} is before start {start}")
    system = {node: data.system[node]} if node is not None and data.system else data.system
    rows = []
    for hists in utilisation_histograms(system, bins=bins, start=start, end=end).values():
        for h in hists.values():
            rows.append({**h.to_dict(), "distribution": sparkline(h.counts)})
    return rows
