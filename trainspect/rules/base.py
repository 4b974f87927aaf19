"""The rule contract: a rule declares its name, parameters and inputs, and judges data into a Verdict.

A rule does no I/O. The engine gathers the inputs for all rules once, calls :meth:`Rule.evaluate`, and
records the verdicts. Tensor rules (``kind = "tensor"``) receive a tensor view of a trial; profiler rules
(``kind = "profiler"``) receive a profiler view of a run directory. Parameters arrive as Python values or,
from JSON configs and the CLI, as strings; :class:`Param` parses both and validates type and range.
"""

from __future__ import annotations

import abc
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from trainspect.exceptions import ConfigError
from trainspect.rules.actions import Action, parse_actions
from trainspect.rules.verdict import Verdict

__all__ = ["Param", "Requirement", "Rule"]

_MISSING = object()


@dataclass(frozen=True)
class Param:
    """One declared rule parameter.

    Args:
        name: the parameter's name, as in smdebug.
        type: ``float``, ``int``, ``bool``, ``str`` or ``list`` (a list of strings; a comma-separated
            string is split).
        default: the default value (``None`` allowed).
        doc: one line on what it means.
        min: smallest allowed value (numbers), inclusive.
        max: largest allowed value (numbers), inclusive.
        choices: the allowed values, when the set is closed.

    Example:
        >>> Param("threshold", float, 1e-7, min=0).parse("0.5")
        0.5
    """

    name: str
    type: type
    default: Any
    doc: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] | None = None

    def parse(self, value: Any) -> Any:
        """Convert and validate a value.

        Raises:
            ConfigError: the value has the wrong type or lies outside the allowed range (one line naming the
                parameter, the value and what is allowed; the rule prefixes its name).
        """
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
            return None
        try:
            parsed = self._convert(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int from Infinity
            raise ConfigError(
                f"parameter {self.name}={value!r}: expected {self.type.__name__}{self._allowed()}"
            ) from None
        self._check(parsed, value)
        return parsed

    def _convert(self, value: Any) -> Any:
        if self.type is bool:
            return _to_bool(value)
        if self.type is list:
            return _to_list(value)
        if self.type in (int, float) and isinstance(value, bool):
            raise TypeError(value)
        if self.type is int:
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, float) and not number.is_integer():
                raise ValueError(value)  # "1.5" is no whole number of steps, not 1
            return int(number)
        if self.type is float:
            return float(value)
        if self.type is str and isinstance(value, enum.Enum):
            return value.name  # ModeKeys.TRAIN: "TRAIN"
        if self.type is str and not isinstance(value, str):
            raise TypeError(value)  # 5 is no name: str(5) would hide a misplaced value
        return self.type(value)

    def _check(self, parsed: Any, raw: Any) -> None:
        bad = False
        if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
            if isinstance(parsed, float) and not math.isfinite(parsed):
                raise ConfigError(f"parameter {self.name}={raw!r}: expected a finite number{self._allowed()}")
            if self.min is not None and parsed < self.min:
                bad = True
            if self.max is not None and parsed > self.max:
                bad = True
        if self.choices is not None and parsed not in self.choices:
            bad = True
        if bad:
            raise ConfigError(f"parameter {self.name}={raw!r} is out of range; allowed: {self._allowed().strip()}")

    def _allowed(self) -> str:
        if self.choices is not None:
            return " one of " + ", ".join(map(repr, self.choices))
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min}")
        if self.max is not None:
            parts.append(f"<= {self.max}")
        return (" " + " and ".join(parts)) if parts else ""


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        low = value.strip().lower()
        if low not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(value)
        return low in ("true", "1", "yes")
    if not isinstance(value, (bool, int)):
        raise TypeError(value)
    return bool(value)


def _to_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    raise TypeError(value)


@dataclass(frozen=True)
class Requirement:
    """What a rule needs recorded; a hook given the rule records it without further configuration.

    Args:
        collection: the collection to record (a built-in name, or a new one defined by the fields below).
        include_regex: regexes of tensor names added to the collection.
        module_types: class names of modules (``"ReLU"``, ``"Sigmoid"``) whose inputs/outputs join it.
        module_inputs: with ``module_types``, record the modules' inputs.
        module_outputs: with ``module_types``, record the modules' outputs.
        save_interval: how often the rule needs the data (``None``: keep the collection's own setting).
        modes: the modes it needs (``None``: every mode).
        reductions: reductions the rule reads (``"mean"``, ``"abs_mean"``, ``"l2"``, ``"variance"``…); the
            hook saves them even when the raw tensor is not saved.
        raw: whether the rule needs the full tensor values.
        end_step: the rule needs the data only before this step (``None``: always).
    """

    collection: str
    include_regex: tuple[str, ...] = ()
    module_types: tuple[str, ...] = ()
    module_inputs: bool = False
    module_outputs: bool = False
    save_interval: int | None = None
    modes: tuple[str, ...] | None = None
    reductions: tuple[str, ...] = ()
    raw: bool = True
    end_step: int | None = None


class Rule(abc.ABC):
    """Base class of every rule.

    Subclasses declare ``parameters`` (a tuple of :class:`Param`), a ``recommendation`` and their ``kind``,
    and implement :meth:`evaluate`. Construction validates the parameters (unknown names raise
    :class:`ConfigError` listing the valid ones) and sets each as an attribute: ``Param("max_norm", ...)`` is
    read as ``self.max_norm``. Annotate it in the class body (``max_norm: float``) for type checkers; built-in
    rules do. ``self.params`` is every parameter's value by name. A parameter named like an attribute of the class
    (a method) is not set over it, and is read from ``self.params`` only. ``actions`` (names such as
    ``"StopTraining"``, dicts, callables or :class:`~trainspect.rules.actions.Action` objects) are parsed into
    ``self.actions``, which the engine runs when the verdict says ``IssuesFound``.

    Example:
        >>> class Big(Rule):
        ...     parameters = (Param("limit", float, 1.0, min=0),)
        ...     limit: float
        ...     def evaluate(self, data):
        ...         raise NotImplementedError
        >>> Big(limit="2.5").limit, Big().params
        (2.5, {'limit': 1.0})
    """

    kind: ClassVar[str] = "tensor"
    parameters: ClassVar[tuple[Param, ...]] = ()
    recommendation: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def __init__(self, actions: Any = None, **params: Any) -> None:
        declared = {p.name: p for p in self.parameters}
        unknown = sorted(set(params) - set(declared))
        if unknown:
            raise ConfigError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(declared) or '(none)'}"
            )
        try:
            values = {name: p.parse(params[name]) if name in params else p.default for name, p in declared.items()}
        except ConfigError as exc:
            raise ConfigError(f"{self.name}: {exc}") from None
        self._shadowed: dict[str, Any] = {}
        for name, value in values.items():
            if hasattr(type(self), name):
                self._shadowed[name] = value  # a method of the same name keeps its name
            else:
                setattr(self, name, value)
        self.actions: list[Action] = parse_actions(actions)
        self.validate()

    @property
    def params(self) -> dict[str, Any]:
        """Every parameter's current value, by name (a new dict; set a parameter as ``self.<name> = value``)."""
        return {
            p.name: self._shadowed[p.name] if p.name in self._shadowed else getattr(self, p.name)
            for p in self.parameters
        }

    @property
    def name(self) -> str:
        """The rule's name (its class name, as in smdebug)."""
        return type(self).__name__

    def requirements(self) -> list[Requirement]:
        """What this rule needs recorded (default: nothing beyond what the user records)."""
        return []

    def validate(self) -> None:
        """Check combinations of parameters; override to add checks (raise :class:`ConfigError`)."""

    def explain(self, verdict: Verdict, origins: list[dict[str, Any]]) -> Verdict:
        """Add what the hook found about the run to a verdict (ExplodingTensor: where NaN/Inf came from).

        ``origins``: the run's NaN/Inf findings (:func:`trainspect.store.nan_origins.read_origins`).
        """
        return verdict

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.name}({args})"

    @abc.abstractmethod
    def evaluate(self, data: Any) -> Verdict:
        """Judge the data the engine gathered for this rule and return a verdict (no I/O)."""
