"""The sampler contract."""

from __future__ import annotations

import abc

__all__ = ["Sampler", "RateSampler"]


class Sampler(abc.ABC):
    """One source of system metrics.

    ``collect()`` reads the counters now; ``aggregate()`` returns the metrics since the last ``reset()``
    (percentages averaged, byte counters as rates); ``reset()`` starts a new sample period.
    """

    @abc.abstractmethod
    def collect(self) -> None:
        """Read the counters now."""

    @abc.abstractmethod
    def aggregate(self) -> dict[str, float]:
        """Metric key (snake_case, unit suffix) -> value for the period since the last reset."""

    def reset(self) -> None:
        """Start a new period (default: nothing to forget)."""

    def close(self) -> None:
        """Release resources (default: none)."""


class RateSampler(Sampler):
    """A sampler of monotonically increasing counters, reported as per-second rates.

    Subclasses implement :meth:`_read` (counter name -> cumulative value).
    """

    def __init__(self) -> None:
        self._prev: tuple[float, dict[str, float]] | None = None
        self._last: dict[str, float] = {}

    @abc.abstractmethod
    def _read(self) -> tuple[float, dict[str, float]]:
        """(monotonic time, key -> cumulative counter)."""

    def collect(self) -> None:
        """Read the counters and compute rates against the previous reading."""
        now, counters = self._read()
        if self._prev is not None:
            then, before = self._prev
            dt = max(now - then, 1e-9)
            self._last = {k: max(v - before.get(k, v), 0.0) / dt for k, v in counters.items()}
        else:
            self._last = {k: 0.0 for k in counters}
        self._prev = (now, counters)

    def aggregate(self) -> dict[str, float]:
        """The rates of the last period."""
        return dict(self._last)
