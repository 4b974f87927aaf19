"""A run's verdicts as a pandas DataFrame, one row per rule: :func:`verdicts_frame`.

Example:
    >>> from trainspect.rules.verdict import Status, Verdict
    >>> df = verdicts_frame([Verdict("LossNotDecreasing", Status.ISSUES_FOUND, triggers=2, first_trigger_step=40)])
    >>> df[["rule", "status", "triggers", "first_trigger_step"]].to_dict("records")
    [{'rule': 'LossNotDecreasing', 'status': 'IssuesFound', 'triggers': 2, 'first_trigger_step': 40}]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd

from trainspect.rules.engine import load_verdicts
from trainspect.rules.verdict import Verdict

__all__ = ["VERDICT_COLUMNS", "verdicts_frame"]

VERDICT_COLUMNS = {
    "rule": "str",
    "status": "str",
    "message": "str",
    "kind": "str",
    "datapoints": "int64",
    "triggers": "int64",
    "first_trigger_step": "Int64",
    "last_trigger_step": "Int64",
    "first_trigger_time": "float64",
    "last_trigger_time": "float64",
    "mode": "str",
    "workers": "str",
    "tensors": "str",
    "start_step": "Int64",
    "end_step": "Int64",
    "source": "str",
    "evaluated_at": "float64",
    "recommendation": "str",
}
"""The columns and dtypes of :func:`verdicts_frame`: steps are nullable integers (``<NA>`` without a trigger), times
epoch seconds (NaN when unknown), ``workers`` and ``tensors`` comma-separated, ``mode`` empty without a trigger."""
_JOINED = ("workers", "tensors")


def verdicts_frame(verdicts: str | os.PathLike[str] | Sequence[Verdict]) -> pd.DataFrame:
    """One row per verdict (:data:`VERDICT_COLUMNS`), in the order recorded.

    Args:
        verdicts: a run directory or verdict file (its current verdicts, as :func:`~trainspect.rules.load_verdicts`
            reads them), or the verdicts themselves.

    Raises:
        DamagedFile: the verdict file cannot be read.
    """
    found = load_verdicts(verdicts) if isinstance(verdicts, (str, os.PathLike)) else list(verdicts)
    rows = [_row(v) for v in found]
    frame = pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))
    return frame.astype(VERDICT_COLUMNS)


def _row(verdict: Verdict) -> dict[str, object]:
    row: dict[str, object] = {c: getattr(verdict, c) for c in VERDICT_COLUMNS}
    row["status"] = verdict.status.value
    row["mode"] = verdict.mode or ""
    for column in _JOINED:
        row[column] = ", ".join(getattr(verdict, column))
    for column in ("first_trigger_time", "last_trigger_time", "evaluated_at"):
        row[column] = float("nan") if row[column] is None else row[column]
    return row
