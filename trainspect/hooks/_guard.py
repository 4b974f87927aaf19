"""The one guard every public hook entry goes through: trainspect's own failures never reach training."""

from __future__ import annotations

import ast
import functools
import inspect
import logging
import textwrap
from collections.abc import Callable
from typing import Any, TypeVar, cast

from trainspect import env
from trainspect.exceptions import TrainingStopped

__all__ = ["guarded", "Guarded"]

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class Guarded:
    """Mixin with the state the guard uses: ``disabled`` and the first failure."""

    disabled: bool = False
    failure: BaseException | None = None

    def _internal_error(self, where: str, exc: Exception) -> None:
        """Handle a failure as ``guarded`` does (for hot paths that inline the guard to save a call per event)."""
        if env.TRAINSPECT_TESTING.get():
            raise exc
        self._fail(where, exc)

    def _fail(self, where: str, exc: BaseException) -> None:
        self.disabled = True
        if self.failure is None:
            self.failure = exc
            log.warning(
                "trainspect: internal error in %s.%s; this hook is disabled for the rest of the run, training goes on "
                "and the data written so far stays readable",
                type(self).__name__,
                where,
                exc_info=exc,
            )


def _misuse(exc: Exception) -> bool:
    """Whether ``exc`` is a TypeError raised by the call itself (bad arguments), not by the code it called."""
    tb = exc.__traceback__
    return isinstance(exc, TypeError) and tb is not None and tb.tb_next is None


_FIXED = """\
def {name}(self, {params}):
    if self.disabled:
        return _g_default
    try:
        return _g_fn(self, {params})
    except TrainingStopped:
        raise
    except Exception as exc:
        self._internal_error(_g_name, exc)
        return _g_default
"""
"""A guard with the entry's own parameters: ``*args, **kwargs`` cost a tuple and a dict per call (hooks run per
module call and per step); a call with wrong arguments fails at the wrapper, as Python raises it."""


def _fixed_wrapper(fn: Callable[..., Any], default: Any) -> Callable[..., Any] | None:
    """The guard of ``fn`` as a function of ``fn``'s parameters, or None when they are not plain positional ones."""
    code = fn.__code__
    params = code.co_varnames[1 : code.co_argcount]
    if (
        code.co_flags & 0x0C  # CO_VARARGS | CO_VARKEYWORDS
        or code.co_kwonlyargcount
        or code.co_posonlyargcount
        or fn.__defaults__
        or code.co_varnames[:1] != ("self",)
        or any(name.startswith("_g_") or name in ("exc", "TrainingStopped") for name in params)
    ):
        return None
    scope = {"_g_fn": fn, "_g_default": default, "_g_name": fn.__name__, "TrainingStopped": TrainingStopped}
    exec(_FIXED.format(name=fn.__name__, params=", ".join(params)), scope)  # noqa: S102  # a fixed template
    return cast(Callable[..., Any], scope[fn.__name__])


_INLINE = """\
def _g_make(_g_default, _g_stop):
    def _g_fn(self):
        if self.disabled:
            return _g_default
        try:
            pass
        except _g_stop:
            raise
        except Exception as _g_exc:
            self._internal_error(_g_name, _g_exc)
            return _g_default
    return _g_fn
"""
"""The guard written around an entry's own body: one function, so a call costs one frame, not two."""


def _inline_wrapper(fn: Callable[..., Any], default: Any) -> Callable[..., Any] | None:
    """``fn`` compiled again with the guard around its body (:data:`_INLINE`), or None when that cannot be done.

    Its source must be at hand and it must be a plain method of fixed parameters that refers to nothing of an
    enclosing function (``super()`` does) and is no generator; line numbers and file stay the source's.
    """
    code = fn.__code__
    if code.co_freevars or code.co_flags & 0x2C or code.co_varnames[:1] != ("self",):  # *args, **kw, generator
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    own = tree.body[0]
    names = code.co_names + code.co_varnames
    if not isinstance(own, ast.FunctionDef) or fn.__name__ in names or any(n.startswith("_g_") for n in names):
        return None
    ast.increment_lineno(tree, first - 1)
    make = ast.parse(_INLINE.replace("_g_name", repr(fn.__name__)).replace("_g_fn", fn.__name__))
    outer = make.body[0]
    assert isinstance(outer, ast.FunctionDef)
    inner = outer.body[0]
    assert isinstance(inner, ast.FunctionDef)
    body = own.body[1:] if ast.get_docstring(own) is not None else own.body
    if not body:
        return None
    for arg in (*own.args.posonlyargs, *own.args.args, *own.args.kwonlyargs):
        arg.annotation = None  # annotations stay the original's (``__annotations__``, copied by ``wraps``)
    inner.args = own.args
    guard = inner.body[1]
    assert isinstance(guard, ast.Try)
    guard.body = body
    kept = set(ast.walk(own))
    for node in ast.walk(make):  # the guard's own lines are the def's
        if node not in kept and hasattr(node, "lineno"):
            node.lineno = node.end_lineno = own.lineno  # type: ignore[attr-defined]
    scope: dict[str, Any] = {}
    exec(compile(make, code.co_filename, "exec"), fn.__globals__, scope)  # noqa: S102  # the entry's own source
    return cast(Callable[..., Any], scope["_g_make"](default, TrainingStopped))


def guarded(default: Any = None, *, inline: bool = False) -> Callable[[F], F]:
    """Wrap a hook entry: on an internal error, warn once, disable the hook, return ``default``.

    ``TrainingStopped`` (asked for by the user) and a call with arguments the entry does not take (the user's
    mistake, raised as Python raises it; the hook stays enabled) pass through. With ``TRAINSPECT_TESTING=1``
    errors re-raise so that the test suite sees them. ``inline``: the guard is compiled into the entry itself (the
    framework events of every step: a wrapper's frame costs each of them about half a microsecond), when its source
    is at hand; else it wraps it.
    """

    def decorate(fn: F) -> F:
        own = _inline_wrapper(fn, default) if inline else None
        if own is not None:
            return cast(F, functools.wraps(fn)(own))
        fixed = _fixed_wrapper(fn, default)
        if fixed is not None:
            return cast(F, functools.wraps(fn)(fixed))

        @functools.wraps(fn)
        def wrapper(self: Guarded, *args: Any, **kwargs: Any) -> Any:
            if self.disabled:
                return default
            try:
                return fn(self, *args, **kwargs)
            except TrainingStopped:
                raise
            except Exception as exc:
                if _misuse(exc):
                    raise  # the caller's own mistake (a wrong keyword or argument count), as Python raises it
                self._internal_error(fn.__name__, exc)
                return default

        return cast(F, wrapper)

    return decorate
