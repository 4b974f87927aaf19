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
import types
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Callback", "ForwardTap", "HookDict", "own_hook_dicts", "tap_forward", "tappable"]

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


def _unwrapped(callback: Any) -> Any:
    """A :class:`Callback` that binds no arguments as the function it calls (one call less per forward pass)."""
    if isinstance(callback, functools.partial) and not callback.args and not callback.keywords:
        return callback.func
    return callback


class ForwardTap:
    """A registered model's own ``forward``: ``callback(model, args)``, then the forward it stands in for.

    Set in the model's ``__dict__``. A forward pre-hook would do the same, but any hook sends every call of the
    module through the slow path of ``Module.__call__`` (its closure, hook-dict walks and compiler checks): ~11 k
    instructions per forward pass on the training thread, against ~2 k for this tap (docs/architecture.md, "where
    the step's cost goes"). Like a hook it never travels with the model: a pickled or copied model gets its class's
    ``forward`` back (a spawned process gets the tap with its hook's ticket, see the module), and a ``DataParallel``
    replica gets a tap of its own (``_replicate_for_data_parallel`` copies a module's ``__dict__``). It keeps the
    name, documentation and signature of the forward it stands in for (``inspect.signature``: Hugging Face's
    ``Trainer`` reads a model's input columns from it), and the libraries that swap a model's ``forward`` for a
    while (Lightning's strategies, accelerate's mixed precision) put it back as they found it.
    """

    def __init__(self, module: Any, callback: Any, inner: Any = None, own: bool | None = None) -> None:
        self.module, self.callback = module, callback
        self.call = _unwrapped(callback)  # what a call calls (None once removed); ``callback`` is what travels
        self.own = "forward" in module.__dict__ if own is None else own  # the module had a forward of its own
        self.inner = module.forward if inner is None else inner
        functools.update_wrapper(self, self.inner, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The model's forward pass: the callback first (unless removed), then the forward this tap stands in for."""
        call = self.call  # read once: a signal handler may close the hook (and remove this tap) in between
        if call is not None:
            call(self.module, args)
        return self.inner(*args, **kwargs)

    def remove(self) -> None:
        """Stop calling the callback; give the model back the forward it had where this tap is still its own."""
        self.call = self.callback = None
        state = self.module.__dict__
        if state.get("forward") is not self:
            return  # wrapped since (accelerate's mixed precision), or another hook's tap on top: it stays
        target: Any = self
        while isinstance(target, ForwardTap) and target.callback is None:
            target = target.inner if target.own else None
        if target is None:
            del state["forward"]
        else:
            state["forward"] = target
        if not isinstance(target, ForwardTap) and isinstance(state.get("_replicate_for_data_parallel"), _Replicator):
            del state["_replicate_for_data_parallel"]  # no tap left for a replica to rebind

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        if self.callback is not None and _spawning():
            return (type(self), (self.module, self.callback, self.inner, self.own))
        if self.own:
            return (_same, (self.inner,))
        return (getattr, (self.module, "forward"))  # the class's forward, bound to the copy


def _same(obj: Any) -> Any:
    return obj


def _replicate(module: Any) -> Any:
    """``DataParallel``'s copy of a tapped module for another device, with a tap of its own (see ForwardTap)."""
    replica = type(module)._replicate_for_data_parallel(module)
    state = replica.__dict__
    del state["_replicate_for_data_parallel"]
    tap = state.get("forward")
    if isinstance(tap, ForwardTap) and tap.module is module and not tap.own:
        state["forward"] = type(tap)(replica, tap.callback, types.MethodType(type(replica).forward, replica), False)
    return replica


class _Replicator:
    """A tapped module's ``_replicate_for_data_parallel`` (see :func:`_replicate`); copied, the class's own."""

    __slots__ = ("module",)

    def __init__(self, module: Any) -> None:
        self.module = module

    def __call__(self) -> Any:
        return _replicate(self.module)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (getattr, (self.module, "_replicate_for_data_parallel"))


def tappable(module: Any) -> bool:
    """Whether a :class:`ForwardTap` can stand in for a forward pre-hook of ``module``.

    That is where its calls reach its ``forward`` through ``Module.__call__`` and its forward is the only way in: not
    a compiled model's own call, nor TorchScript's methods, nor a ``LightningModule`` (Lightning's strategies call
    its ``training_step`` through the module's call with ``forward`` swapped out, ``_forward_redirection``: only a
    module hook sees that call, the one a spawned process registers the model at).
    """
    import torch

    cls = type(module)
    return (
        cls.__call__ is torch.nn.Module.__call__
        and cls._call_impl is torch.nn.Module._call_impl
        and not isinstance(module, torch.jit.ScriptModule)
        and not any(c.__name__ == "LightningModule" for c in cls.__mro__)
    )


_Tap = TypeVar("_Tap", bound=ForwardTap)


def tap_forward(module: Any, callback: Any, kind: type[_Tap]) -> _Tap:
    """Set a ``kind`` tap (a :class:`ForwardTap`) of ``callback`` as ``module``'s forward; return it.

    Its ``remove`` undoes it.
    """
    tap = kind(module, callback)
    module.__dict__["forward"] = tap
    module.__dict__["_replicate_for_data_parallel"] = _Replicator(module)
    return tap


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
