"""``MetricsHistogram``: utilisation histograms per CPU core and per GPU, per node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainspect.notebook._svg import bars, colour, esc
from trainspect.notebook._view import Run, RunSource, View, select
from trainspect.profiler.histograms import DEFAULT_BINS, UtilisationHistogram, utilisation_histograms

__all__ = ["MetricsHistogram"]


class MetricsHistogram(View):
    """How often each CPU core and each GPU of each node sat at each utilisation level.

    A distribution centred at 80-90 % is good use; one piled up near 0 % an idle device; GPUs of one node with
    dissimilar distributions mean the work is poorly spread over them.

    Args:
        run: a run directory, a SageMaker profiler-output folder, or a ``SystemMetricsReader``.
        devices: regular expressions choosing devices (``cpu_total``, ``cpu3``, ``gpu0``, ``gpu_total``);
            default all.
        nodes: regular expressions choosing nodes; default all.
        bins: the number of bins over 0-100 %, or explicit edges.
        start: first epoch second counted (default: the first sample).
        end: last epoch second counted (default: the last sample, followed while the job runs).

    Raises:
        ValueError: devices or nodes exist and the selection names none of them (the message lists them).

    Example:
        >>> import tempfile
        >>> "no system metrics" in MetricsHistogram(tempfile.mkdtemp()).html()
        True
    """

    title = "Utilisation histograms"
    empty_message = "no system metrics recorded yet (profile the run with a ProfilerConfig)"

    def __init__(
        self,
        run: Run,
        devices: Sequence[str] | None = None,
        nodes: Sequence[str] | None = None,
        bins: int | Sequence[float] = DEFAULT_BINS,
        start: float | None = None,
        end: float | None = None,
    ) -> None:
        self.source = run if isinstance(run, RunSource) else RunSource(run)
        self.devices, self.nodes, self.bins = devices, nodes, bins
        self.start, self.end = start, end
        self.histograms: dict[str, dict[str, UtilisationHistogram]] = {}
        self.refresh()

    def _load(self) -> None:
        found = utilisation_histograms(self.source.system(), self.bins, self.start, self.end)
        nodes = select(found, self.nodes, "node")
        devices = self._chosen([d for n in nodes for d in found[n]])
        self.histograms = {n: {d: h for d, h in found[n].items() if d in devices} for n in nodes}

    def _chosen(self, devices: list[str]) -> list[str]:
        """The devices of ``devices`` (every node's, in order) that the selection names."""
        return select(devices, self.devices, "device")

    def figure(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{node: {device: {"edges", "counts", "samples", "mean", …}}}``, plain lists and numbers."""
        return {n: {d: h.to_dict() for d, h in devs.items()} for n, devs in self.histograms.items()}

    def _note(self) -> str:
        return "Centred at 80-90 %: good use. Near 0 %: idle. Dissimilar GPUs: poorly spread load."

    def _body(self) -> str | None:
        if not any(self.histograms.values()):
            return None
        out = []
        for node, devs in self.histograms.items():
            panels = [bars(h.edges, h.counts, _label(h), "utilisation %", colour(_family(d))) for d, h in devs.items()]
            out.append(
                f'<div class="ts-node" data-node="{esc(node)}"><h4>node {esc(node)}</h4>'
                f'<div class="ts-grid">{"".join(panels)}</div></div>'
            )
        return "".join(out)


def _family(device: str) -> int:
    return 1 if device.startswith("gpu") else 0


def _label(h: UtilisationHistogram) -> str:
    mean = "" if h.samples == 0 else f", mean {h.mean:.0f} %"
    return f"{h.device} ({h.samples} samples{mean})"
