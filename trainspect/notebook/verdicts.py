"""``Verdicts``: the run's rule verdicts, a status bar and a table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pandas as pd

from trainspect.notebook._svg import esc, panel, text
from trainspect.notebook._view import Run, RunSource, View, select
from trainspect.rules import load_verdicts
from trainspect.rules.verdict import Status, Verdict

__all__ = ["Verdicts"]

_STATUS_COLOUR = {
    Status.ISSUES_FOUND: "#c62828",
    Status.NO_ISSUES_FOUND: "#2e7d32",
    Status.IN_PROGRESS: "#1565c0",
    Status.NO_DATA: "#9e9e9e",
    Status.ERROR: "#6a1b9a",
}
_COLUMNS = [
    "rule",
    "status",
    "kind",
    "triggers",
    "datapoints",
    "first_trigger_step",
    "last_trigger_step",
    "message",
    "recommendation",
]


def _status_bar(verdicts: Sequence[Verdict], width: int = 600) -> str:
    """One stacked bar: how many rules ended in each status, with a legend."""
    counts = Counter(v.status for v in verdicts)
    total = max(sum(counts.values()), 1)
    parts, x, legend_x = [], 0.0, 0.0
    for status in Status:
        n = counts.get(status, 0)
        if not n:
            continue
        w = n / total * width
        fill = _STATUS_COLOUR[status]
        parts.append(
            f'<rect class="ts-status" data-status="{esc(status.value)}" x="{x:.1f}" y="0" width="{w:.1f}" '
            f'height="14" fill="{fill}"><title>{esc(f"{status.value}: {n}")}</title></rect>'
        )
        parts.append(f'<rect x="{legend_x:.1f}" y="20" width="10" height="10" fill="{fill}"/>')
        parts.append(text(legend_x + 14, 29, f"{status.value} ({n})", size=11))
        x += w
        legend_x += 24 + 7 * len(f"{status.value} ({n})")
    return panel(width, 34, "".join(parts), "rule verdicts by status")


class Verdicts(View):
    """The run's rule verdicts (each rule's latest, live or offline: :func:`trainspect.rules.load_verdicts`).

    Args:
        run: a run directory, or a reader opened on one.
        rules: regular expressions choosing rules by name; default all.
        verdicts: verdicts to show instead of the recorded ones (e.g. ``trainspect.rules.evaluate(...)``'s).

    Raises:
        ValueError: verdicts exist and the selection names none of their rules (the message lists them).
    """

    title = "Rule verdicts"
    empty_message = "no verdicts recorded yet: run `trainspect rules RUN_DIR` or give the hook rules"

    def __init__(self, run: Run, rules: Sequence[str] | None = None, verdicts: Sequence[Verdict] | None = None) -> None:
        self.source = run if isinstance(run, RunSource) else RunSource(run)
        self.rules = rules
        self._given = list(verdicts) if verdicts is not None else None
        self.verdicts: list[Verdict] = []
        self.refresh()

    def _load(self) -> None:
        try:
            found = self._given if self._given is not None else load_verdicts(self.source.path)
        except (OSError, ValueError) as exc:  # a damaged verdict record: say so in place of the table
            self.empty_message = f"could not read the verdicts of {self.source.path}: {exc}"
            found = []
        chosen = set(select([v.rule for v in found], self.rules, "rule"))
        self.verdicts = sorted((v for v in found if v.rule in chosen), key=lambda v: (v.status.value, v.rule))

    def figure(self) -> pd.DataFrame:
        """One row per verdict, as a DataFrame.

        Columns ``rule, status, kind, triggers, datapoints, first_trigger_step, last_trigger_step, message,
        recommendation``.
        """
        rows = [
            [
                v.rule,
                v.status.value,
                v.kind,
                v.triggers,
                v.datapoints,
                v.first_trigger_step,
                v.last_trigger_step,
                v.message,
                v.recommendation,
            ]
            for v in self.verdicts
        ]
        return pd.DataFrame(rows, columns=_COLUMNS)

    def _body(self) -> str | None:
        if not self.verdicts:
            return None
        head = "".join(
            f"<th>{esc(c)}</th>" for c in ("rule", "status", "triggers", "first step", "message", "recommendation")
        )
        rows = []
        for v in self.verdicts:
            colour = _STATUS_COLOUR.get(v.status, "#333")
            first = "" if v.first_trigger_step is None else v.first_trigger_step
            rows.append(
                f'<tr data-rule="{esc(v.rule)}"><td>{esc(v.rule)}</td>'
                f'<td style="color:{colour};font-weight:600">{esc(v.status.value)}</td>'
                f"<td>{esc(v.triggers)}</td><td>{esc(first)}</td><td>{esc(v.message)}</td>"
                f"<td>{esc(v.recommendation)}</td></tr>"
            )
        return f"{_status_bar(self.verdicts)}<table><tr>{head}</tr>{''.join(rows)}</table>"
