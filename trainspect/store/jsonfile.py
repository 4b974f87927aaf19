"""Reading the JSON files of a run directory, checked by shape and not only by syntax.

A shape is a Python type (or a tuple of types), :class:`ListOf`, :class:`DictOf` or :class:`Obj`. A file that
cannot be read, is not JSON, or does not have the expected shape raises :class:`~trainspect.exceptions.DamagedFile`
with one line naming the file and what is wrong.

Example:
    >>> check({"rows": [{"name": "mm"}]}, Obj({"rows": ListOf(Obj({"name": str}))}), "operators.json")
    {'rows': [{'name': 'mm'}]}
    >>> check({"rows": 5}, Obj({"rows": ListOf(dict)}), "operators.json")
    Traceback (most recent call last):
    ...
    trainspect.exceptions.DamagedFile: operators.json: rows is an integer, expected a list
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainspect.exceptions import DamagedFile
from trainspect.store.safe_files import JSON_CAP, loads_bounded, read_capped

__all__ = ["ListOf", "DictOf", "Obj", "NUMBER", "check", "load_json"]

NUMBER = (int, float)
"""A JSON number."""


@dataclass(frozen=True)
class ListOf:
    """A JSON array whose items all have ``item``'s shape."""

    item: Any


@dataclass(frozen=True)
class DictOf:
    """A JSON object with any keys whose values all have ``value``'s shape."""

    value: Any


@dataclass(frozen=True)
class Obj:
    """A JSON object with ``required`` keys and ``optional`` ones (``None`` is allowed for optional keys)."""

    required: Mapping[str, Any] = field(default_factory=dict)
    optional: Mapping[str, Any] = field(default_factory=dict)


_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number", bool: "a boolean"}


def _expected(shape: Any) -> str:
    if isinstance(shape, (Obj, DictOf)):
        return "an object"
    if isinstance(shape, ListOf):
        return "a list"
    if isinstance(shape, tuple):
        return " or ".join(_NAMES.get(t, t.__name__) for t in shape)
    return _NAMES.get(shape, getattr(shape, "__name__", str(shape)))


def _fail(where: str, value: Any, shape: Any) -> None:
    found = "null" if value is None else _NAMES.get(type(value), type(value).__name__)
    raise DamagedFile(f"{where or 'the document'} is {found}, expected {_expected(shape)}")


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _check_obj(value: Any, shape: Obj, where: str) -> None:
    if not isinstance(value, dict):
        _fail(where, value, shape)
    for key, sub in shape.required.items():
        if key not in value:
            raise DamagedFile(f"{_key(where, key)} is missing")
        _check(value[key], sub, _key(where, key))
    for key, sub in shape.optional.items():
        if value.get(key) is not None:
            _check(value[key], sub, _key(where, key))


def _check(value: Any, shape: Any, where: str) -> None:
    if isinstance(shape, Obj):
        _check_obj(value, shape, where)
    elif isinstance(shape, DictOf):
        if not isinstance(value, dict):
            _fail(where, value, shape)
        for key, item in value.items():
            _check(item, shape.value, f"{where}[{key!r}]")
    elif isinstance(shape, ListOf):
        if not isinstance(value, list):
            _fail(where, value, shape)
        for i, item in enumerate(value):
            _check(item, shape.item, f"{where}[{i}]")
    elif not isinstance(value, shape) or (isinstance(value, bool) and bool not in _as_tuple(shape)):
        _fail(where, value, shape)


def _as_tuple(shape: Any) -> tuple[Any, ...]:
    return shape if isinstance(shape, tuple) else (shape,)


def check(doc: Any, shape: Any, name: str) -> Any:
    """Return ``doc`` when it has ``shape``.

    Raises:
        DamagedFile: it does not; the message starts with ``name``.
    """
    try:
        _check(doc, shape, "")
    except DamagedFile as exc:
        raise DamagedFile(f"{name}: {exc}") from None
    return doc


def load_json(path: str | os.PathLike[str], shape: Any) -> Any:
    """Read a JSON file and check its shape.

    Raises:
        DamagedFile: the file cannot be read, is not a regular file, is over :data:`JSON_CAP` bytes, is not JSON,
            is nested too deeply, or has the wrong shape; the message names the file.
        FileNotFoundError: it does not exist.
    """
    try:
        text = read_capped(path, JSON_CAP).decode("utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedFile(f"{os.fspath(path)}: cannot be read ({exc})") from None
    try:
        doc = loads_bounded(text)
    except ValueError as exc:
        reason = "empty" if not text.strip() else f"not valid JSON ({exc})"
        raise DamagedFile(f"{os.fspath(path)}: {reason}") from None
    return check(doc, shape, os.fspath(path))
