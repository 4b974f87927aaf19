"""Hook callbacks that never travel with a model: ``torch.save``, ``copy.deepcopy`` and pickle leave them behind.

A forward hook is stored in the module's ``_forward_hooks`` dict, so pickling or copying a hooked model would pickle
the trainspect hook and its open files (``TypeError: cannot pickle '_io.BufferedWriter'``). trainspect's callbacks
are :class:`Callback` objects, and the hook dicts of a module that trainspect hooks are :class:`HookDict` objects,
whose pickled form leaves trainspect's callbacks out: the copy has the user's own hooks and none of trainspect's.
A dict that already held hooks of the user's when trainspect arrived is left as it is (their removable handles point
to it); there a copied callback becomes a no-op.

One exception: a model pickled for a process that ``multiprocessing`` spawns (Lightning's ``ddp_spawn``,
``torch.multiprocessing.spawn``) is the same training continued in another process. There each callback travels as
its hook's :meth:`~trainspect.hooks.hook_api.HookAPI.spawn_ticket`, and the child process builds one hook from it
(per hook of the parent), which registers the model at its first forward pass and joins the job as its rank.
"""

from __future__ import annotations

import functools
import importlib
import multiprocessing.context
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["Callback", "HookDict", "own_hook_dicts"]

_DICTS = ("_forward_hooks", "_forward_pre_hooks")
_TOP = ("_on_top_forward_pre", "_on_top_forward")  # the callbacks of a registered model: they register it first


def _inert(*args: Any, **kwargs: Any) -> None:
    return None


def _inert_callback() -> Callable[..., None]:
    return _inert


def _spawning() -> bool:
    """Whether ``multiprocessing`` is pickling a process object for a child it spawns (not ``torch.save``)."""
    return multiprocessing.context.get_spawning_popen() is not None


class Callback(functools.partial):  # type: ignore[type-arg]
    """A callback (called as fast as the function itself) whose pickled or copied form is a no-op.

    Pickled for a spawned process, a callback of a hook's method travels as its hook's ticket (see the module).
    """

    def __reduce__(self) -> tuple[Any, ...]:
        owner: Any = getattr(self.func, "__self__", None)
        name = getattr(self.func, "__name__", None)
        ticket = owner.spawn_ticket() if _spawning() and hasattr(owner, "spawn_ticket") else None
        if ticket is None or not name:
            return (_inert_callback, ())
        return (_rejoin, (ticket, name, self.args))


class HookDict(OrderedDict):  # type: ignore[type-arg]
    """A module's hook dict whose pickled or copied form leaves out trainspect's callbacks (kept for a spawn)."""

    def __reduce__(self) -> tuple[Any, ...]:
        spawning = _spawning()
        kept = [(k, v) for k, v in self.items() if spawning or not isinstance(v, Callback)]
        return (OrderedDict, (), None, None, iter(kept))


def own_hook_dicts(module: Any) -> None:
    """Make a module's forward (pre-)hook dicts :class:`HookDict` objects where no hook is registered yet."""
    state = module.__dict__
    for name in _DICTS:
        hooks = state.get(name)
        if isinstance(hooks, OrderedDict) and not isinstance(hooks, HookDict) and not hooks:
            state[name] = HookDict()


_REJOINED: dict[str, Any] = {}
"""The hooks this spawned process built from tickets, by ticket key: one per hook of the parent."""


def _rejoin(ticket: tuple[str, str, dict[str, Any]], name: str, args: tuple[Any, ...]) -> Callable[..., Any]:
    """In a spawned process: the callback ``name`` of the hook built from ``ticket`` (built at the first call)."""
    key, where, settings = ticket
    hook = _REJOINED.get(key)
    if hook is None:
        try:
            module_name, _, qualname = where.partition(":")
            cls: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            hook = _REJOINED[key] = cls(**settings)
        except Exception as exc:  # the child trains on, unrecorded
            import logging

            logging.getLogger(__name__).warning("trainspect: the spawned process records nothing: %s", exc)
            return _inert
    method = getattr(hook, name)
    if name not in _TOP:
        return Callback(method, *args)
    return Callback(_registering, hook, method)


def _registering(hook: Any, method: Callable[..., Any], module: Any, *rest: Any) -> Any:
    """Register ``module`` with a spawned process's hook at its first forward pass, then call ``method``."""
    if not hook.knows(module):
        hook.register_module(module, module_hooks=False)
    return method(module, *rest)
