"""``import smdebug.pytorch as smd`` and friends, answered by trainspect when the real smdebug is not installed.

SageMaker Debugger scripts run unchanged under ``trainspect run`` (or after ``trainspect.autolog(smdebug=True)`` or
:func:`install`): a meta-path finder answers ``smdebug`` and its public modules with modules built from trainspect's
own classes (see :mod:`trainspect.smdebug_compat.surface` and docs/smdebug.md). Nothing named ``smdebug`` is shipped
or written to disk, and when the real smdebug is importable it is left alone.

A public name trainspect does not implement raises ``NotImplementedError`` naming the call and the nearest trainspect
equivalent, never an ``AttributeError`` deep inside.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from trainspect.exceptions import SmdebugNotSupported

__all__ = ["install", "uninstall", "installed", "SmdebugNotSupported"]


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``smdebug`` and ``smdebug.<module>`` imports with modules built by :mod:`.surface`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "smdebug" and not fullname.startswith("smdebug."):
            return None
        from trainspect.smdebug_compat.surface import MODULES

        if fullname not in MODULES:
            return None  # ModuleNotFoundError, as for any missing module
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        from trainspect.smdebug_compat.surface import build

        build(module)


_FINDER = _Finder()


def installed() -> bool:
    """Whether ``smdebug`` imports are answered by trainspect in this process."""
    return _FINDER in sys.meta_path


def install() -> bool:
    """Answer ``smdebug`` imports with trainspect, unless the real smdebug is importable; return whether it was done."""
    if installed():
        return True
    if "smdebug" in sys.modules or importlib.util.find_spec("smdebug") is not None:
        return False  # the real smdebug wins
    sys.meta_path.append(_FINDER)
    return True


def uninstall() -> None:
    """Stop answering ``smdebug`` imports and forget the modules built so far."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if (name == "smdebug" or name.startswith("smdebug.")) and getattr(spec, "loader", None) is _FINDER:
            del sys.modules[name]
