"""Notebook views of a run: self-contained HTML (inline SVG, no script, nothing fetched) in Jupyter.

Each view reads a run directory (or a SageMaker profiler-output folder, or a reader opened on one), renders with
``_repr_html_``, follows a running job with ``.refresh()`` and returns what it plots with ``.figure()``::

    import trainspect.notebook as tsnb
    tsnb.MetricsHistogram("runs/exp1")            # in a notebook cell: the histograms
    tsnb.StepHistogram("runs/exp1").figure()      # the data behind the chart

smdebug's notebook classes (``smdebug.profiler.analysis.notebook_utils``) answer with :mod:`.compat`.
"""

from trainspect.notebook.heatmap import Heatmap
from trainspect.notebook.metrics_histogram import MetricsHistogram
from trainspect.notebook.step_histogram import StepHistogram
from trainspect.notebook.timeline import Timeline
from trainspect.notebook.verdicts import Verdicts

__all__ = ["MetricsHistogram", "StepHistogram", "Heatmap", "Timeline", "Verdicts"]
