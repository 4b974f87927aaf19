"""Render a run's report: sections in, one self-contained HTML file out (Jinja2, inlined ECharts)."""

from __future__ import annotations

import json
import logging
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from trainspect._json_safe import json_safe
from trainspect.report import (
    _framework_sections,
    _histogram_section,
    _rule_sections,
    _system_sections,
    _verdict_section,
)
from trainspect.report.context import REQUIREMENT_HINTS, ReportContext
from trainspect.report.sections import Page, Section, SectionRegistry
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import write_text_atomic

__all__ = ["default_registry", "render_report", "write_report", "script_json", "skip_text"]

log = logging.getLogger(__name__)

_VENDOR = Path(__file__).resolve().parent.parent / "_vendor" / "echarts.min.js"


_SECTION_MODULES = (_verdict_section, _system_sections, _histogram_section, _rule_sections, _framework_sections)
"""The built-in sections are the ``Section`` classes these modules export (``__all__``)."""


def builtin_sections() -> list[Section]:
    """One instance of each built-in section, by ``order``: the verdict first, then SageMaker's order."""
    found = [getattr(m, name) for m in _SECTION_MODULES for name in m.__all__]
    classes = [c for c in found if isinstance(c, type) and issubclass(c, Section) and c.id]
    return [c() for c in sorted(classes, key=lambda c: c.order)]


def default_registry(plugins: bool = True) -> SectionRegistry:
    """The built-in sections (:func:`builtin_sections`), then the entry-point plugins."""
    reg = SectionRegistry()
    for section in builtin_sections():
        reg.register(section)
    if plugins:
        reg.load_entry_points()
    return reg


def script_json(obj: Any) -> str:
    r"""JSON safe inside ``<script>``: ``<``, ``>`` and ``&`` are escaped, so ``</script>`` and ``<!--`` cannot occur.

    Example:
        >>> script_json({"a": "</script><!--"})
        '{"a":"\\u003c/script\\u003e\\u003c!--"}'
    """
    text = json.dumps(obj, allow_nan=False, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@lru_cache(maxsize=1)
def _echarts() -> str:
    return _VENDOR.read_text(encoding="utf-8").replace("</script", "<\\/script")


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("trainspect.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def skip_text(ctx: ReportContext, requirement: str) -> str:
    """Why a section is empty: the script's early failure, a job too short for a system sample, or what to enable.

    What to enable (:data:`REQUIREMENT_HINTS`) is wrong advice when the job never reached a step.
    """
    failed = ctx.failed_early()
    if failed and requirement not in ("price", "triggered"):
        return f"Nothing was recorded: {failed}."
    if requirement in ("system", "gpu") and ctx.notes:
        return " ".join(ctx.notes)
    return REQUIREMENT_HINTS[requirement]


def _sections(ctx: ReportContext, registry: SectionRegistry) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out: list[dict[str, Any]] = []
    all_charts: dict[str, Any] = {}
    for section in registry.sections():
        missing = section.missing(ctx)
        entry: dict[str, Any] = {"id": section.id, "title": section.title, "blocks": [], "skipped": []}
        if missing:  # one line: what to enable (the first missing requirement says it)
            entry["skipped"] = [skip_text(ctx, missing[0])]
            out.append(entry)
            continue
        page = Page(prefix=section.id)
        try:
            section.build(ctx, page)
        except Exception as exc:
            log.warning("trainspect report: section %s failed: %s", section.id, exc, exc_info=True)
            page = Page(prefix=section.id)
            page.note(
                f"This section could not be rendered ({type(exc).__name__}: {exc}); the data may be damaged.", warn=True
            )
        entry["blocks"] = page.blocks
        all_charts.update(page.charts)
        out.append(entry)
    return out, all_charts


def render_report(
    ctx: ReportContext | str | os.PathLike[str],
    price_per_hour: float | None = None,
    registry: SectionRegistry | None = None,
    title: str | None = None,
) -> str:
    """Return the report's HTML.

    Args:
        ctx: a loaded :class:`ReportContext`, or a run directory to load.
        price_per_hour: the hourly price per instance (cost section); overrides the context's.
        registry: the sections (default: :func:`default_registry`).
        title: the page title (default: the run directory's name).
    """
    if not isinstance(ctx, ReportContext):
        ctx = ReportContext.load(ctx, price_per_hour=price_per_hour)
    elif price_per_hour is not None:
        ctx.price_per_hour = price_per_hour
    sections, chart_options = _sections(ctx, registry or default_registry())
    from trainspect._version import __version__

    name = title or (ctx.run_dir.name if ctx.run_dir is not None else "run")
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=name,
            run_dir=str(ctx.run_dir),
            generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            version=__version__,
            problems=ctx.problems,
            sections=sections,
            charts_json=script_json(json_safe(chart_options)),
            echarts_js=_echarts(),
        )
    )


def write_report(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    price_per_hour: float | None = None,
    registry: SectionRegistry | None = None,
    context: ReportContext | None = None,
) -> Path:
    """Render the report of a run directory and write it atomically; return its path.

    Args:
        run_dir: the run directory.
        out: the HTML file (default: ``<run_dir>/report.html``).
        price_per_hour: the hourly price per instance, for the cost section.
        registry: the sections (default: :func:`default_registry`).
        context: the run, already loaded (default: ``ReportContext.load(run_dir)``).
    """
    target = Path(out) if out is not None else RunLayout(run_dir).report
    ctx = context or ReportContext.load(run_dir, price_per_hour=price_per_hour)
    html = render_report(ctx, price_per_hour=price_per_hour, registry=registry)
    write_text_atomic(target, html, prefix="report")
    return target
