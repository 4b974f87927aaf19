"""``Heatmap``: CPU cores and GPUs as rows over time, with the framework's step starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainspect.notebook._svg import esc, heat_cells
from trainspect.notebook._view import Run, RunSource, View, select
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.heatmap import heatmap
from trainspect.report.charts import elapsed_labels

__all__ = ["Heatmap"]


class Heatmap(View):
    """Utilisation of every CPU core and GPU (rows) over time (columns, bucket means), per node.

    Orange lines mark step starts (when at most ``max_marks`` buckets hold one): stripes of idle GPU between
    steps, or one busy core beside idle ones, show where the job waits.

    Args:
        run: a run directory, a SageMaker profiler-output folder, or a ``SystemMetricsReader``.
        framework_reader: the reader of the steps (default: one opened on the same path).
        rows: regular expressions choosing rows (``cpu0`` … ``gpu0`` …); default all.
        nodes: regular expressions choosing nodes; default all.
        start: first epoch second (default: the first sample).
        end: last epoch second (default: the last sample, followed while the job runs).
        max_columns: the most time buckets.
        max_marks: the most step-start lines drawn.

    Raises:
        ValueError: rows or nodes exist and the selection names none of them (the message lists them).
    """

    title = "Utilisation heatmap"
    empty_message = "no CPU or GPU utilisation recorded yet (profile the run with a ProfilerConfig)"

    def __init__(
        self,
        run: Run,
        framework_reader: Any = None,
        rows: Sequence[str] | None = None,
        nodes: Sequence[str] | None = None,
        start: float | None = None,
        end: float | None = None,
        max_columns: int = 200,
        max_marks: int = 100,
    ) -> None:
        self.source = run if isinstance(run, RunSource) else RunSource(run, framework_reader)
        self.rows, self.nodes = rows, nodes
        self.start, self.end = start, end
        self.max_columns, self.max_marks = max_columns, max_marks
        self.maps: dict[str, dict[str, Any]] = {}
        self.refresh()

    def _load(self) -> None:
        data = ProfilerData(path=self.source.path, system=self.source.system(), framework=self.source.framework())
        found = {n: heatmap(data, self.start, self.end, self.max_columns, node=n) for n in sorted(data.system)}
        found = {n: hm for n, hm in found.items() if hm["rows"]}
        nodes = select(found, self.nodes, "node")
        rows = self._chosen([r for n in nodes for r in found[n]["rows"]])
        self.maps = {}
        for n in nodes:
            hm = found[n]
            keep = [i for i, r in enumerate(hm["rows"]) if r in rows]
            if keep:
                self.maps[n] = {**hm, "rows": [hm["rows"][i] for i in keep], "values": [hm["values"][i] for i in keep]}

    def _chosen(self, rows: list[str]) -> list[str]:
        """The row names of ``rows`` (every node's, in order) that the selection names."""
        return select(rows, self.rows, "row")

    def figure(self) -> dict[str, dict[str, Any]]:
        """Per node, the heatmap as :func:`trainspect.profiler.heatmap` returns it.

        ``{node: {"rows", "times" (bucket starts, epoch s), "bucket_s", "values" (rows x buckets, % or None),
        "step_boundaries"}}``.
        """
        return self.maps

    def _body(self) -> str | None:
        if not self.maps:
            return None
        out = []
        for node, hm in self.maps.items():
            times = list(hm["times"])
            labels = elapsed_labels([t - times[0] for t in times]) if times else []
            width = float(hm["bucket_s"] or 1.0)
            cols = len(times)
            marks = sorted({min(int((b - times[0]) / width), cols - 1) for b in hm["step_boundaries"]}) if cols else []
            marks = marks if len(marks) <= self.max_marks else []
            title = f"node {node}: % utilisation, {width:.3g} s per column" + (", orange: step starts" if marks else "")
            out.append(
                f'<div class="ts-node" data-node="{esc(node)}">'
                f"{heat_cells(hm['rows'], hm['values'], labels, marks, title)}</div>"
            )
        return "".join(out)
