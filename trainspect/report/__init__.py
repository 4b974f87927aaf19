"""The HTML report and run comparison: analyses in, one self-contained HTML file out.

Example:
    >>> import tempfile
    >>> "trainspect" in render_report(tempfile.mkdtemp())
    True
"""

from trainspect.report.compare import compare_runs, compare_table, render_compare, summary_for
from trainspect.report.context import REQUIREMENT_HINTS, ReportContext
from trainspect.report.render import default_registry, render_report, script_json, write_report
from trainspect.report.sections import Page, Section, SectionRegistry
from trainspect.report.summary import RunSummary, cost_of, summarize

__all__ = [
    "REQUIREMENT_HINTS",
    "Page",
    "ReportContext",
    "RunSummary",
    "Section",
    "SectionRegistry",
    "compare_runs",
    "compare_table",
    "cost_of",
    "default_registry",
    "render_compare",
    "render_report",
    "script_json",
    "summarize",
    "summary_for",
    "write_report",
]
