"""pandas DataFrames of a run, in one place: tensors, system and framework metrics, time windows and verdicts.

========================================  ==================================================================
``trial.dataframe(names, collection,      tensors, long (``step, mode, mode_step, worker, name, value`` or one
mode, reductions, workers, wide)``        column per reduction); :func:`wide` pivots it
``SystemMetricsReader(run).dataframe(     system samples of ``[start, end)`` (long or wide), reading only the
start, end, metrics, node, wide)``        files that hold them
``FrameworkMetricsReader(run).dataframe(  ``steps`` (with their phases' and data-loader waits' seconds), ``spans``,
table, start, end)``                      ``phases``, ``step_metrics``, ``operators``, ``python``
:func:`window` ``(run, t0, t1)``          a :class:`Window`: what system and framework did in ``[t0, t1)``
:func:`verdicts_frame` ``(run)``          one row per rule
========================================  ==================================================================

Asking for a tensor, metric, node, worker or collection the run did not record raises :class:`NotRecorded` (a
``KeyError``) naming what it did record; a run that has recorded nothing yet gives empty frames with the right
columns and dtypes.

Example:
    >>> import tempfile
    >>> verdicts_frame(tempfile.mkdtemp()).columns.tolist()[:4]
    ['rule', 'status', 'message', 'kind']
"""

from trainspect.profiler.frames import PHASE_COLUMNS, SPAN_COLUMNS, STEP_COLUMNS, SYSTEM_COLUMNS
from trainspect.profiler.window import Window, window, window_of
from trainspect.rules.verdict_table import VERDICT_COLUMNS, verdicts_frame
from trainspect.store.frame_tools import NotRecorded
from trainspect.store.frames import TENSOR_COLUMNS, tensor_frame, wide

__all__ = [
    "NotRecorded",
    "PHASE_COLUMNS",
    "SPAN_COLUMNS",
    "STEP_COLUMNS",
    "SYSTEM_COLUMNS",
    "TENSOR_COLUMNS",
    "VERDICT_COLUMNS",
    "Window",
    "tensor_frame",
    "verdicts_frame",
    "wide",
    "window",
    "window_of",
]
