"""Calling back after a module is imported: patches that must wait until the script imports a framework.

``autolog()`` starts before the script imports keras, Lightning or transformers; an :class:`ImportWatcher` on
``sys.meta_path`` finds the watched modules through the other finders, lets their real loader run, then calls back.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

__all__ = ["ImportWatcher"]


class _Loader(importlib.abc.Loader):
    """Runs a watched module's real loader, then tells its watcher."""

    def __init__(self, loader: Any, watcher: ImportWatcher) -> None:
        self._loader, self._watcher = loader, watcher

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._watcher.depth += 1
        try:
            self._loader.exec_module(module)
        finally:
            self._watcher.depth -= 1
        if self._watcher.depth == 0:  # a watched module imported by another watched one waits for the outer
            self._watcher.loaded(module)


class ImportWatcher(importlib.abc.MetaPathFinder):
    """A meta-path finder that calls ``loaded(module)`` once one of ``names`` has been imported.

    When one watched module imports another (keras with the torch backend imports torch), ``loaded`` is called once
    the outermost of them is loaded, with that module.

    Args:
        names: the full module names to watch.
        loaded: called with the module after its real loader ran.
    """

    def __init__(self, names: Collection[str], loaded: Callable[[ModuleType], None]) -> None:
        self._names, self.loaded, self._busy = frozenset(names), loaded, False
        self.depth = 0  # watched imports under way

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        """The watched module's spec from the other finders, with its loader wrapped (None for any other)."""
        if fullname not in self._names or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, self)
        return spec
