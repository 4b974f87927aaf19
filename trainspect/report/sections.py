"""Report sections and their registry.

A section declares the data it ``requires`` (keys of :data:`~trainspect.report.context.REQUIREMENT_HINTS`) and
builds a list of blocks (paragraphs, tables, charts) from a :class:`~trainspect.report.context.ReportContext`. The
report skips a section whose data is missing and says what to enable instead. Built-in sections are registered
explicitly, then those of the ``trainspect.report_sections`` entry-point group; a broken plugin is skipped with a
warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from trainspect._entry_points import load_entry_points
from trainspect.report.context import REQUIREMENT_HINTS, ReportContext

__all__ = ["Section", "Page", "SectionRegistry", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "trainspect.report_sections"


@dataclass
class Page:
    """What sections add to: blocks per section and the charts' ECharts options (by chart id).

    Blocks are dicts with a ``kind``: ``p`` (``text``), ``note`` / ``warn`` (``text``), ``kv`` (``rows`` of
    (label, value)), ``table`` (``columns``, ``rows``, optional ``caption``), ``chart`` (``id``, ``height``),
    ``h3`` (``text``), ``verdict`` (``text``, ``state``). All text is escaped by the template.
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

    def table(
        self,
        columns: list[str],
        rows: Iterable[Iterable[Any]],
        caption: str = "",
        css: str = "",
        num: list[bool] | None = None,
    ) -> None:
        """Add a table (values formatted for display; numeric columns right-aligned and never wrapped)."""
        raw = [list(r) for r in rows]
        numeric = num or [bool(raw) and all(_is_num(r[i]) for r in raw if i < len(r)) for i in range(len(columns))]
        self.blocks.append(
            {
                "kind": "table",
                "columns": columns,
                "rows": [[_fmt(v) for v in r] for r in raw],
                "caption": caption,
                "num": numeric,
                "css": css,
            }
        )

    def verdict(self, text: str, ok: bool | None) -> None:
        """Add the one-line verdict banner (``ok``: green, ``False``: red, ``None``: grey)."""
        self.blocks.append({"kind": "verdict", "text": text, "state": "none" if ok is None else "ok" if ok else "bad"})

    def chart(self, option: dict[str, Any], height: int = 320) -> str:
        """Add a chart from an ECharts option; return its id."""
        chart_id = f"{self.prefix}-{len(self.charts)}"
        self.charts[chart_id] = option
        self.blocks.append({"kind": "chart", "id": chart_id, "height": int(height)})
        return chart_id


def _is_num(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool))


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, np.floating):
        v = float(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, float):
        return sig(v)
    return str(v)


def sig(v: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits (thousands separated; exponent form below 1e-3 or over 1e9).

    Example:
        >>> [sig(x) for x in (0.009688, 0.01, 148022768.0, 1495.0, 2.0, 1e-7, float("nan"))]
        ['0.00969', '0.01', '148,022,768', '1,495', '2', '1e-7', '–']
    """
    if v != v or v in (float("inf"), float("-inf")):
        return "–" if v != v else ("Inf" if v > 0 else "-Inf")
    if v == 0:
        return "0"
    a = abs(v)
    if a < 1e-3 or a >= 1e12:
        return f"{v:.{digits - 1}e}".replace("e-0", "e-").replace(".00e", "e").replace("0e", "e")
    if a >= 10 ** (digits - 1):
        return f"{v:,.0f}"
    return f"{float(f'{v:.{digits}g}'):g}"


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
    order: ClassVar[float] = 1000.0
    """Place among the built-in sections (ascending); plugins' sections follow the built-in ones."""
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
        """Register the sections of installed plugins (``trainspect.report_sections``: a Section or its class).

        A broken plugin is skipped with one warning (:func:`~trainspect._entry_points.load_entry_points`).
        """
        load_entry_points(
            ENTRY_POINT_GROUP, lambda obj: self.register(obj() if isinstance(obj, type) else obj), "report section"
        )
