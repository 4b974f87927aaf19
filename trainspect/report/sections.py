"""Report sections and their registry.

A section declares the data it ``requires`` (keys of :data:`~trainspect.report.context.REQUIREMENT_HINTS`) and
builds a list of blocks (paragraphs, tables, charts) from a :class:`~trainspect.report.context.ReportContext`. The
report skips a section whose data is missing and says what to enable instead. Built-in sections are registered
explicitly, then those of the ``trainspect.report_sections`` entry-point group; a broken plugin only warns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar

from trainspect.report.context import REQUIREMENT_HINTS, ReportContext

__all__ = ["Section", "Page", "SectionRegistry", "ENTRY_POINT_GROUP"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "trainspect.report_sections"


@dataclass
class Page:
    """What sections add to: blocks per section and the charts' ECharts options (by chart id).

    Blocks are dicts with a ``kind``: ``p`` (``text``), ``note`` / ``warn`` (``text``), ``kv`` (``rows`` of
    (label, value)), ``table`` (``columns``, ``rows``, optional ``caption``), ``chart`` (``id``, ``height``),
    ``h3`` (``text``). All text is escaped by the template.
    """

    prefix: str = "c"
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocks: list[dict[str, Any]] = field(default_factory=list)

    def p(self, text: str) -> None:
        """Add a paragraph."""
        self.blocks.append({"kind": "p", "text": text})

    def h3(self, text: str) -> None:
        """Add a sub-heading."""
        self.blocks.append({"kind": "h3", "text": text})

    def note(self, text: str, warn: bool = False) -> None:
        """Add a highlighted note (``warn``: a recommendation or a problem)."""
        self.blocks.append({"kind": "warn" if warn else "note", "text": text})

    def kv(self, rows: Iterable[tuple[str, Any]]) -> None:
        """Add a two-column table of labels and values."""
        self.blocks.append({"kind": "kv", "rows": [(str(k), _fmt(v)) for k, v in rows]})

    def table(self, columns: list[str], rows: Iterable[Iterable[Any]], caption: str = "") -> None:
        """Add a table (values formatted for display)."""
        self.blocks.append(
            {"kind": "table", "columns": columns, "rows": [[_fmt(v) for v in r] for r in rows], "caption": caption}
        )

    def chart(self, option: dict[str, Any], height: int = 320) -> str:
        """Add a chart from an ECharts option; return its id."""
        chart_id = f"{self.prefix}-{len(self.charts)}"
        self.charts[chart_id] = option
        self.blocks.append({"kind": "chart", "id": chart_id, "height": int(height)})
        return chart_id


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:  # NaN
            return "–"
        if abs(v) >= 1000 or v == int(v):
            return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}"
        return f"{v:.4g}" if abs(v) < 0.01 else f"{v:.2f}"
    return str(v)


class Section:
    """One report section. Subclasses set ``id``, ``title``, ``requires`` and implement :meth:`build`.

    Example:
        >>> class Hello(Section):
        ...     id, title = "hello", "Hello"
        ...     def build(self, ctx, page):
        ...         page.p("hi")
        >>> Hello().missing(ReportContext(run_dir=None, profiler=None))
        []
    """

    id: ClassVar[str] = ""
    title: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()
    """Data the section needs; any missing one skips it with its hint."""

    def missing(self, ctx: ReportContext) -> list[str]:
        """The requirements the context lacks."""
        return [r for r in self.requires if not ctx.has(r)]

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add this section's blocks and charts to ``page``."""
        raise NotImplementedError


class SectionRegistry:
    """Ordered report sections by id.

    Example:
        >>> reg = SectionRegistry()
        >>> len(reg)
        0
    """

    def __init__(self) -> None:
        self._sections: dict[str, Section] = {}

    def __len__(self) -> int:
        return len(self._sections)

    def register(self, section: Section) -> None:
        """Add a section (after the existing ones).

        Raises:
            ValueError: the section has no id or title, the id is taken, or it requires unknown data.
        """
        if not section.id or not section.title:
            raise ValueError(f"report section {type(section).__name__} must set id and title")
        if section.id in self._sections:
            raise ValueError(f"report section id {section.id!r} is already registered")
        unknown = [r for r in section.requires if r not in REQUIREMENT_HINTS]
        if unknown:
            raise ValueError(
                f"report section {section.id!r} requires unknown data {unknown}; known: {list(REQUIREMENT_HINTS)}"
            )
        self._sections[section.id] = section

    def sections(self) -> list[Section]:
        """The sections in order."""
        return list(self._sections.values())

    def load_entry_points(self) -> None:
        """Register the sections of installed plugins (``trainspect.report_sections``); a broken one warns."""
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                obj = ep.load()
                self.register(obj() if isinstance(obj, type) else obj)
            except Exception as exc:
                log.warning("trainspect report: section plugin %s could not be loaded: %s", ep.name, exc)
