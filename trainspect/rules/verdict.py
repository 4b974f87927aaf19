"""Verdicts: what a rule concluded, as a frozen value that serialises to JSON."""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from trainspect._json_safe import NONFINITE_STRINGS, json_safe
from trainspect.exceptions import DamagedFile
from trainspect.store.jsonfile import ListOf, Obj, load_json
from trainspect.store.manifest import write_text_atomic

__all__ = ["Status", "Verdict", "Series", "VERDICT_SCHEMA_VERSION", "write_verdicts", "read_verdicts"]

VERDICT_SCHEMA_VERSION = 1
_FILE_SHAPE = Obj({}, {"verdicts": ListOf(Obj({"rule": str, "status": str}))})


class Status(str, enum.Enum):
    """Outcome of a rule evaluation (DESIGN.md)."""

    IN_PROGRESS = "InProgress"
    NO_ISSUES_FOUND = "NoIssuesFound"
    ISSUES_FOUND = "IssuesFound"
    NO_DATA = "NoData"
    ERROR = "Error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Series:
    """The value a rule watched, for charts: ``x`` are steps (or epoch seconds), ``y`` the values."""

    label: str
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    x_unit: str = "step"
    trigger_x: tuple[float, ...] = ()
    threshold: float | None = None


@dataclass(frozen=True)
class Verdict:
    """What one rule concluded over the data it examined.

    Steps (``first_trigger_step``, ``last_trigger_step``, ``start_step``, ``end_step``) are global steps;
    ``mode`` names the mode(s) of the triggering steps (``"TRAIN"``, ``"EVAL"``, ``"TRAIN+EVAL"``), None without a
    trigger. ``source`` says who evaluated it (``"live"``: the hook during training, ``"offline"``:
    ``trainspect rules`` or ``ts.rules.evaluate``, ``"report"``: the report) and ``evaluated_at`` when (epoch
    seconds; None for a placeholder); ``parameters`` holds the parameters it ran with.

    Example:
        >>> v = Verdict(rule="VanishingGradient", status=Status.NO_ISSUES_FOUND, datapoints=3)
        >>> Verdict.from_dict(v.to_dict()) == v
        True
    """

    rule: str
    status: Status
    message: str = ""
    recommendation: str = ""
    kind: str = "tensor"
    datapoints: int = 0
    triggers: int = 0
    first_trigger_step: int | None = None
    last_trigger_step: int | None = None
    first_trigger_time: float | None = None
    last_trigger_time: float | None = None
    tensors: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    series: tuple[Series, ...] = ()
    start_step: int | None = None
    end_step: int | None = None
    mode: str | None = None
    source: str = ""
    evaluated_at: float | None = None

    @property
    def issues_found(self) -> bool:
        """Whether the rule triggered."""
        return self.status is Status.ISSUES_FOUND

    def with_status(self, status: Status) -> Verdict:
        """Return a copy with another status."""
        return replace(self, status=status)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (non-finite floats become strings)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["status"] = self.status.value
        data["series"] = [{f.name: getattr(s, f.name) for f in fields(s)} for s in self.series]
        return _json_safe(data)  # copies every container, as dataclasses.asdict would

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """Rebuild a verdict from :meth:`to_dict`'s output; unknown keys are ignored."""
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["status"] = Status(kwargs.get("status", Status.ERROR))
        for key in ("tensors", "workers"):
            kwargs[key] = tuple(kwargs.get(key) or ())
        kwargs["series"] = tuple(
            Series(**{**s, **{k: tuple(_unjson(v) for v in s.get(k, ())) for k in ("x", "y", "trigger_x")}})
            for s in kwargs.get("series") or ()
        )
        return cls(**kwargs)


def _json_safe(obj: Any) -> Any:
    """:func:`~trainspect._json_safe.json_safe` as the verdict files spell values: NaN and ±Inf as strings.

    The strings (``"NaN"``, ``"Infinity"``, ``"-Infinity"``) read back as the floats (:meth:`Verdict.from_dict`).
    """
    return json_safe(obj, nonfinite="string")


def _unjson(v: Any) -> Any:
    if isinstance(v, str):
        return NONFINITE_STRINGS.get(v, v)
    return v


def write_verdicts(path: str | os.PathLike[str], verdicts: list[Verdict], **meta: Any) -> None:
    """Write verdicts atomically (a temporary file renamed over the old one), so readers never see half a file.

    Args:
        path: the verdict file, usually ``<run>/rules/verdicts.json``.
        verdicts: the verdicts to write.
        **meta: extra top-level keys (for example ``updated`` or ``final``).
    """
    target = Path(path)
    doc = {"schema_version": VERDICT_SCHEMA_VERSION, **_json_safe(meta), "verdicts": [v.to_dict() for v in verdicts]}
    text = json.dumps(doc)  # no indent: the C encoder (the live runner rewrites this file about once a second)
    write_text_atomic(target, text, prefix="verdicts")


def read_verdicts(path: str | os.PathLike[str]) -> list[Verdict]:
    """Read a verdict file written by :func:`write_verdicts`; a missing file gives an empty list.

    Raises:
        DamagedFile: the file is unreadable, not JSON, or not a verdict file (the message names it).
    """
    target = Path(path)
    if not target.exists():
        return []
    doc = load_json(target, _FILE_SHAPE)
    try:
        return [Verdict.from_dict(v) for v in doc.get("verdicts") or []]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DamagedFile(f"{target}: a verdict of the wrong shape ({type(exc).__name__}: {exc})") from None
