"""Utilisation histograms: how often each CPU core, each GPU and the CPU as a whole sat at each utilisation level.

A distribution centred at 80-90 % is good use of a device; one piled up near zero is an idle device; GPUs of one
node with dissimilar distributions mean the work is poorly spread over them. The notebook's ``MetricsHistogram``
draws these counts; the report and TensorBoard read the same function.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.data import ProfilerData

__all__ = ["UtilisationHistogram", "utilisation_histograms", "histogram_edges", "DEFAULT_BINS"]

DEFAULT_BINS = 20
"""Bins over 0-100 % by default: 5 % each."""


@dataclass(frozen=True)
class UtilisationHistogram:
    """The utilisation distribution of one device of one node.

    Attributes:
        node: the node's name.
        device: ``cpu_total`` (mean over the cores per sample), ``cpu<i>``, ``gpu<i>`` or ``gpu_total``.
        edges: bin edges in percent, ascending (``len(counts) + 1`` values from 0 to 100).
        counts: samples per bin; a bin holds ``edges[i] <= v < edges[i + 1]``, the last one also 100.
        samples: the finite samples counted (``sum(counts)``); values outside 0-100 are clipped into the end bins.
        mean: their mean utilisation in percent (NaN without samples).
    """

    node: str
    device: str
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    samples: int
    mean: float

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready form: ``{"node", "device", "edges", "counts", "samples", "mean"}`` (mean None if NaN)."""
        return {
            "node": self.node,
            "device": self.device,
            "edges": list(self.edges),
            "counts": list(self.counts),
            "samples": self.samples,
            "mean": None if np.isnan(self.mean) else self.mean,
        }


def histogram_edges(bins: int | Sequence[float] = DEFAULT_BINS) -> np.ndarray:
    """Bin edges in percent: ``bins`` equal bins over 0-100, or the given ascending edges.

    Raises:
        ValueError: fewer than one bin, or edges not strictly ascending.

    Example:
        >>> histogram_edges(4).tolist()
        [0.0, 25.0, 50.0, 75.0, 100.0]
    """
    if isinstance(bins, int | np.integer):
        if int(bins) < 1:
            raise ValueError(f"bins={bins}: need at least one bin")
        return np.linspace(0.0, 100.0, int(bins) + 1)
    edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or len(edges) < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bins={list(bins)!r}: give a number of bins or at least two strictly ascending edges")
    return edges


def _device_series(arrays: SystemArrays) -> dict[str, np.ndarray]:
    """``cpu_total``, each ``cpu<i>``, each ``gpu<i>`` and ``gpu_total`` of one node, as float64 samples."""
    out: dict[str, np.ndarray] = {}
    if arrays.cpu_cores or arrays.column("cpu_utilization_percent") is not None:
        out["cpu_total"] = arrays.cpu_total()
    for i in arrays.cpu_cores:
        out[f"cpu{i}"] = np.asarray(arrays.column(f"cpu{i}_utilization_percent"), dtype=np.float64)
    gpus = arrays.matrix([f"gpu{g}_utilization_percent" for g in arrays.gpus]).astype(np.float64)
    for j, g in enumerate(arrays.gpus):
        out[f"gpu{g}"] = gpus[:, j]
    if arrays.gpus:
        out["gpu_total"] = _aligned_mean(gpus)
    return out


def _aligned_mean(columns: np.ndarray) -> np.ndarray:
    """Per row with a sample of any column, the mean over the columns of each one's latest sample so far.

    Devices sampled at different moments (SageMaker writes each GPU's sample on a row of its own) are averaged at
    the same time, not one at a time: a row holding GPU 0 alone would otherwise count GPU 0's value as the total.

    Example:
        >>> _aligned_mean(np.array([[10.0, np.nan], [np.nan, 30.0], [20.0, np.nan], [np.nan, np.nan]]))
        array([10., 20., 25., nan])
    """
    rows = np.arange(columns.shape[0])[:, None]
    seen = np.isfinite(columns)
    latest = np.maximum.accumulate(np.where(seen, rows, -1), axis=0)
    filled = np.where(latest >= 0, columns[np.maximum(latest, 0), np.arange(columns.shape[1])], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rows before any sample are NaN
        total = np.nanmean(filled, axis=1)
    return np.where(seen.any(axis=1), total, np.nan)


def _histogram(node: str, device: str, values: np.ndarray, edges: np.ndarray) -> UtilisationHistogram:
    finite = values[np.isfinite(values)]
    clipped = np.clip(finite, edges[0], edges[-1])
    counts, _ = np.histogram(clipped, bins=edges)
    mean = float(finite.mean()) if len(finite) else float("nan")
    return UtilisationHistogram(
        node, device, tuple(float(e) for e in edges), tuple(int(c) for c in counts), int(len(finite)), mean
    )


def _nodes(system_data: ProfilerData | Mapping[str, SystemArrays] | SystemArrays) -> dict[str, SystemArrays]:
    if isinstance(system_data, SystemArrays):
        return {system_data.node: system_data}
    if isinstance(system_data, ProfilerData):
        return dict(system_data.system)
    return dict(system_data)


def utilisation_histograms(
    system_data: ProfilerData | Mapping[str, SystemArrays] | SystemArrays,
    bins: int | Sequence[float] = DEFAULT_BINS,
    start: float | None = None,
    end: float | None = None,
) -> dict[str, dict[str, UtilisationHistogram]]:
    """Count each node's utilisation samples per device into bins over 0-100 %.

    Args:
        system_data: a run's :class:`~trainspect.profiler.data.ProfilerData`, ``{node: SystemArrays}`` (what
            ``SystemMetricsReader.read_arrays()`` returns) or one node's arrays.
        bins: the number of equal bins over 0-100 %, or explicit ascending edges in percent.
        start: first epoch second counted (default: from the first sample).
        end: last epoch second counted (default: to the last sample).

    Returns:
        ``{node: {device: UtilisationHistogram}}``, nodes sorted by name; devices in the order ``cpu_total``,
        ``cpu0`` … (ascending core index), ``gpu0`` …, ``gpu_total``; a node without utilisation columns has no
        devices. Samples that are NaN (not sampled) are not counted.

    Example:
        >>> a = SystemArrays("n", np.array([0.0, 1.0]), ("cpu0_utilization_percent",), np.array([[10.0], [90.0]]))
        >>> h = utilisation_histograms(a, bins=2)["n"]["cpu0"]
        >>> h.counts, h.samples, h.mean
        ((1, 1), 2, 50.0)
    """
    edges = histogram_edges(bins)
    out: dict[str, dict[str, UtilisationHistogram]] = {}
    for node, arrays in sorted(_nodes(system_data).items()):
        part = arrays.slice(start, end) if (start is not None or end is not None) else arrays
        out[node] = {dev: _histogram(node, dev, v, edges) for dev, v in _device_series(part).items()}
    return out
