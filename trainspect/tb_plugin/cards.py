"""Profiler-tab cards and their registry (the TensorBoard side of the report's ``SectionRegistry``).

A :class:`Card` declares a route (``/<id>`` below ``/data/plugin/trainspect``), its typed query arguments and the
view it serves: a function of the run's :class:`~trainspect.profiler.data.ProfilerData` and the parsed arguments,
usually a thin wrapper over the same :mod:`trainspect.profiler.analysis` function the report section renders. A
card that declares ``columns`` is drawn by the generic JavaScript card (``static/cards.js``) as a table; one
without is drawn by its own script (the heatmap, the time series). Built-in cards are registered explicitly, then
those of the ``trainspect.tb_cards`` entry-point group; a broken plugin is skipped with a warning.

Every card route takes ``run`` (a run name of the log directory) and answers 400 with a message naming the argument
when one is malformed, 404 when the run or its data does not exist.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from tensorboard import errors

from trainspect._entry_points import load_entry_points
from trainspect.profiler import analysis
from trainspect.profiler.data import ProfilerData
from trainspect.tb_plugin.histogram_view import MAX_BINS, histogram_rows
from trainspect.tb_plugin.profiler_view import (
    MAX_COLUMNS,
    MAX_POINTS,
    heatmap_view,
    records,
    timeseries_view,
    utilization_rows,
)

__all__ = ["Arg", "Column", "Card", "CardRegistry", "default_cards", "ENTRY_POINT_GROUP", "RESERVED"]

ENTRY_POINT_GROUP = "trainspect.tb_cards"
RESERVED = frozenset({"index.js", "static", "vendor", "runs", "profiler", "rules", "rule", "trace", "cards"})
"""Route names the plugin serves itself."""
_ID = re.compile(r"^[a-z][a-z0-9_]*$")
_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number"}
_INT = re.compile(r"-?[0-9]{1,18}")
_FLOAT = re.compile(
    r"[+-]?(?:(?:[0-9]{1,32}(?:\.[0-9]{0,32})?|\.[0-9]{1,32})(?:[eE][+-]?[0-9]{1,4})?"
    r"|inf|infinity|nan)",
    re.IGNORECASE,
)
"""The numbers an argument may be written as: ASCII only (``int()`` and ``float()`` also take "١٢", "１２", "1_000",
" 12 " and 4,000 digits), at most 18 digits for an integer."""
_SHAPES = {int: _INT, float: _FLOAT}


@dataclass(frozen=True)
class Arg:
    """A typed query argument of a card's route.

    Example:
        >>> Arg("points", int, default=500, min=1, max=2000).parse("20")
        20
        >>> Arg("points", int, default=500, min=1, max=2000).parse("0")
        Traceback (most recent call last):
        ...
        tensorboard.errors.InvalidArgumentError: Invalid argument: points=0 is outside 1..2000
    """

    name: str
    type: type = str
    default: Any = None
    min: float | None = None
    max: float | None = None

    def parse(self, raw: str | None) -> Any:
        """The value of the argument (``default`` when absent or empty).

        Raises:
            InvalidArgumentError: not a number of the declared type (ASCII digits: at most 18 for an integer), not
                finite, or out of bounds.
        """
        if raw is None or raw == "":
            return self.default
        if self.type is str:
            return raw
        shape = _SHAPES.get(self.type)
        try:
            if shape is not None and not shape.fullmatch(raw):
                raise ValueError(raw)
            value = self.type(raw)
        except ValueError:
            raise errors.InvalidArgumentError(f"{self.name}={_shown(raw)} is not {_article(self.type)}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise errors.InvalidArgumentError(f"{self.name}={_shown(raw)} is not a finite number")
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise errors.InvalidArgumentError(f"{self.name}={value} is outside {_num(self.min)}..{_num(self.max)}")
        return value

    def to_json(self) -> dict[str, Any]:
        """The argument as the JavaScript card sees it."""
        return {"name": self.name, "type": _TYPES.get(self.type, "string"), "default": self.default}


def _shown(raw: str) -> str:
    """The argument as an error message quotes it (a long one cut)."""
    return repr(raw) if len(raw) <= 40 else f"{raw[:40]!r}… ({len(raw):,} characters)"


def _article(kind: type) -> str:
    return "an integer" if kind is int else "a number"


def _num(bound: float | None) -> str:
    return "" if bound is None else f"{bound:g}"


@dataclass(frozen=True)
class Column:
    """A column of a generic table card: the row field ``key`` under ``label``.

    ``unit`` is how the JavaScript formats the value: ``text``, or a unit of the metric catalogue (``percent``,
    ``bytes``, ``s``, ``count``…, empty for a plain number); ``unit_from`` names a row field holding the unit.
    """

    key: str
    label: str
    unit: str = ""
    unit_from: str = ""

    def to_json(self) -> dict[str, str]:
        """The column as the JavaScript card sees it."""
        return {"key": self.key, "label": self.label, "unit": self.unit, "unit_from": self.unit_from}


@dataclass(frozen=True)
class Card:
    """One Profiler-tab card: route, arguments, view and (for a generic card) its table.

    Args:
        id: the route name (``/<id>``) and the card's id in the page.
        title: the card's heading.
        view: ``view(data, **args) -> data``: a dict, a list of row dicts or a DataFrame (rows), JSON-ready.
        args: the route's query arguments besides ``run``.
        columns: the table of the generic card; empty for a card drawn by its own script.
        empty: what the generic card says when there is no row.
    """

    id: str
    title: str
    view: Callable[..., Any]
    args: tuple[Arg, ...] = ()
    columns: tuple[Column, ...] = ()
    empty: str = "Nothing recorded."

    def parse(self, query: Mapping[str, str]) -> dict[str, Any]:
        """The typed arguments of a request (``run`` excluded)."""
        return {a.name: a.parse(query.get(a.name)) for a in self.args}

    def serve(self, data: ProfilerData, args: Mapping[str, Any]) -> Any:
        """The view's answer; rows (a DataFrame or a list) come back as ``{"rows": [...]}``."""
        out = self.view(data, **args)
        if isinstance(out, pd.DataFrame):
            out = records(out)
        return {"rows": out} if isinstance(out, list) else out

    def to_json(self) -> dict[str, Any]:
        """The declaration the generic JavaScript card reads (``/cards``)."""
        return {
            "id": self.id,
            "title": self.title,
            "args": [a.to_json() for a in self.args],
            "columns": [c.to_json() for c in self.columns],
            "empty": self.empty,
        }


class CardRegistry:
    """Ordered Profiler-tab cards by id.

    Example:
        >>> reg = CardRegistry()
        >>> reg.register(Card("steps", "Steps", lambda data: analysis.step_statistics(data)))
        >>> [c.id for c in reg.cards()]
        ['steps']
    """

    def __init__(self) -> None:
        self._cards: dict[str, Card] = {}

    def __len__(self) -> int:
        return len(self._cards)

    def register(self, card: Card) -> None:
        """Add a card (after the existing ones).

        Raises:
            ValueError: a malformed or taken id, a route the plugin serves itself, no title, or an argument named
                ``run`` or given twice.
        """
        if not _ID.match(card.id or "") or not card.title:
            raise ValueError(f"card {card.id!r}: the id must match {_ID.pattern} and the title must be set")
        if card.id in RESERVED or card.id in self._cards:
            raise ValueError(f"card id {card.id!r} is taken; reserved: {sorted(RESERVED)}")
        names = [a.name for a in card.args]
        if "run" in names or len(set(names)) != len(names):
            raise ValueError(f"card {card.id!r}: arguments {names} must be distinct and not 'run'")
        self._cards[card.id] = card

    def cards(self) -> list[Card]:
        """The cards in order."""
        return list(self._cards.values())

    def load_entry_points(self) -> None:
        """Register the cards of installed plugins (``trainspect.tb_cards``: a Card, or a callable returning one).

        A broken plugin is skipped with one warning (:func:`~trainspect._entry_points.load_entry_points`).
        """
        load_entry_points(
            ENTRY_POINT_GROUP,
            lambda obj: self.register(obj() if callable(obj) and not isinstance(obj, Card) else obj),
            "TensorBoard card",
        )


def _python(data: ProfilerData) -> list[dict[str, Any]]:
    rows = records(analysis.python_hotspots(data, n=15))
    for row in rows:
        row["location"] = "/".join(str(row["filename"]).replace("\\", "/").split("/")[-2:]) + f":{row['line']}"
    return rows


_RANGE = (Arg("node"), Arg("start", float), Arg("end", float))


def default_cards(plugins: bool = True) -> CardRegistry:
    """The built-in cards (heatmap, series, utilisation, hotspots, dataloader, GPU memory, histograms), then plugins."""
    reg = CardRegistry()
    for card in (
        Card(
            "heatmap",
            "CPU cores and GPUs — utilisation over time",
            heatmap_view,
            (*_RANGE, Arg("columns", int, 400, 1, MAX_COLUMNS)),
        ),
        Card(
            "timeseries",
            "Memory, GPU memory, I/O and network",
            timeseries_view,
            (*_RANGE, Arg("points", int, 500, 1, MAX_POINTS)),
        ),
        Card(
            "utilization",
            "Utilisation statistics",
            utilization_rows,
            (Arg("node"),),
            (
                Column("label", "metric", "text"),
                *(Column(c, c, unit_from="unit") for c in ("min", "p50", "p95", "p99", "max")),
                Column("samples", "samples", "count"),
            ),
            "No system metrics were recorded for this node.",
        ),
        Card(
            "python_hotspots",
            "Python hotspots (own time in the Python-profiled steps)",
            _python,
            (),
            (
                Column("worker", "worker", "text"),
                Column("function", "function", "text"),
                Column("location", "file", "text"),
                Column("calls", "calls", "count"),
                Column("total_time_s", "own time", "s"),
                Column("cumulative_time_s", "cumulative", "s"),
            ),
            "No Python profile: set framework_profile_params=ts.profiler.FrameworkProfile() to run cProfile over "
            "a few steps.",
        ),
        Card(
            "dataloader",
            "Dataloader",
            analysis.dataloader_statistics,
            (),
            (
                Column("worker", "worker", "text"),
                Column("num_workers", "loader workers"),
                Column("count", "waits", "count"),
                Column("mean_s", "mean", "s"),
                Column("p95_s", "p95", "s"),
                Column("loop_percent", "% of loop"),
            ),
            "No dataloader waits recorded.",
        ),
        Card(
            "cuda_memory",
            "GPU memory of the training job (PyTorch allocator)",
            analysis.cuda_memory_statistics,
            (),
            (
                Column("worker", "worker", "text"),
                Column("device", "device", "text"),
                Column("steps", "steps", "count"),
                Column("allocated_last_bytes", "allocated, last", "bytes"),
                Column("allocated_max_bytes", "allocated, max", "bytes"),
                Column("reserved_max_bytes", "reserved, max", "bytes"),
                Column("peak_bytes", "peak", "bytes"),
                Column("growth_bytes", "growth", "bytes"),
            ),
            "No GPU memory of the job recorded (read from PyTorch's CUDA allocator when the job uses CUDA).",
        ),
        Card(
            "utilisation_histograms",
            "Utilisation histograms (CPU, cores, GPUs)",
            histogram_rows,
            (*_RANGE, Arg("bins", int, 20, 1, MAX_BINS)),
            (
                Column("node", "node", "text"),
                Column("device", "device", "text"),
                Column("samples", "samples", "count"),
                Column("mean", "mean", "percent"),
                Column("distribution", "distribution, 0 → 100 %", "text"),
            ),
            "No CPU or GPU utilisation was recorded for this node.",
        ),
    ):
        reg.register(card)
    if plugins:
        reg.load_entry_points()
    return reg
