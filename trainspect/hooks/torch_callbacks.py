"""Hook callbacks that never travel with a model: ``torch.save``, ``copy.deepcopy`` and pickle leave them behind.

A forward hook is stored in the module's ``_forward_hooks`` dict, so pickling or copying a hooked model would pickle
the trainspect hook and its open files (``TypeError: cannot pickle '_io.BufferedWriter'``). trainspect's callbacks
are :class:`Callback` objects, and the hook dicts of a module that trainspect hooks are :class:`HookDict` objects,
whose pickled form leaves trainspect's callbacks out: the copy has the user's own hooks and none of trainspect's.
A dict that already held hooks of the user's when trainspect arrived is left as it is (their removable handles point
to it); there a copied callback becomes a no-op.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["Callback", "HookDict", "own_hook_dicts"]

_DICTS = ("_forward_hooks", "_forward_pre_hooks")


def _inert(*args: Any, **kwargs: Any) -> None:
    return None


def _inert_callback() -> Callable[..., None]:
    return _inert


class Callback(functools.partial):  # type: ignore[type-arg]
    """A callback (called as fast as the function itself) whose pickled or copied form is a no-op."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_inert_callback, ())


class HookDict(OrderedDict):  # type: ignore[type-arg]
    """A module's hook dict whose pickled or copied form leaves out trainspect's callbacks."""

    def __reduce__(self) -> tuple[Any, ...]:
        kept = [(k, v) for k, v in self.items() if not isinstance(v, Callback)]
        return (OrderedDict, (), None, None, iter(kept))


def own_hook_dicts(module: Any) -> None:
    """Make a module's forward (pre-)hook dicts :class:`HookDict` objects where no hook is registered yet."""
    state = module.__dict__
    for name in _DICTS:
        hooks = state.get(name)
        if isinstance(hooks, OrderedDict) and not isinstance(hooks, HookDict) and not hooks:
            state[name] = HookDict()
