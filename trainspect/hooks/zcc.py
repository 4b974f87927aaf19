"""Zero script change: ``trainspect.autolog()`` and ``trainspect run`` instrument an unmodified PyTorch or Keras script.

Global module hooks find the model (the first top-level module with parameters that is not a loss) and loss modules;
functional losses (``F.cross_entropy`` …) and the loss ``.backward()`` is called on are recorded by the hook itself
(:mod:`trainspect.hooks.torch_backward`); the optimizer's ``step()`` marks the end of each step. The
hook closes at interpreter exit. Keras is instrumented by :mod:`trainspect.hooks.keras_zcc` (``Model.fit`` …),
patched when keras is imported; each framework is instrumented only when it is installed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from trainspect import env
from trainspect.exceptions import TrainingStopped
from trainspect.hooks._guard import Guarded
from trainspect.hooks.job import _ACTIVE, PyTorchJob, active_hook, join_autolog
from trainspect.hooks.shutdown import CLOSERS
from trainspect.hooks.torch_callbacks import Callback, own_hook_dicts

__all__ = ["autolog", "AutoLogger", "active_hook", "join_autolog"]

log = logging.getLogger(__name__)


class AutoLogger(Guarded, PyTorchJob):
    """Patches installed by :func:`autolog`; :meth:`close` removes them and closes the hook.

    Global module hooks find models and loss modules, but while any global hook exists every module call takes
    PyTorch's slower call path. So a model's forward pass runs without them: the global pre-hook takes them out when
    a known model's forward pass begins, and the model's own ``always_call`` forward hook puts them back. Inside a
    model's forward pass a loss module is recorded through the functional loss it calls (the loss tap's
    ``suspended``, :class:`~trainspect.hooks.torch_backward.LossTap`). A model found this way is registered without
    the hook's own module hooks: these two report its forward passes to the hook (one module hook per model).
    """

    def __init__(
        self, hook: Any, companions: list[Any] | None = None, hook_kwargs: dict[str, Any] | None = None
    ) -> None:
        import torch
        from torch.nn.modules import module as module_mod

        self.hook = hook
        self.hook_kwargs = dict(hook_kwargs or {})
        self.companions = list(companions or [])
        self.disabled = False  # an instance attribute: read at every module call outside a model's forward pass
        self._loss_type = torch.nn.modules.loss._Loss
        self._depth = 0
        self._loss_depth = 0
        self._pre_fn, self._post_fn = self._pre, self._post  # (one bound method each: put back as they were)
        pre = module_mod.register_module_forward_pre_hook(self._pre_fn)
        post = module_mod.register_module_forward_hook(self._post_fn)
        self._handles = [pre, post]
        self._pre_hooks, self._pre_key = module_mod._global_forward_pre_hooks, pre.id
        self._post_hooks, self._post_key = module_mod._global_forward_hooks, post.id
        self._quiet_models: set[int] = set()  # models whose forward passes run without the global hooks
        self._suspended_by: int | None = None  # the id of the model whose forward pass took the global hooks out
        self._settled: set[int] = set()  # quiet models the hook records: their calls need nothing of _top_level
        self._driven: set[int] = set()  # models registered without module hooks: _pre and _resume report their passes
        self._closed = False
        from trainspect.hooks.torch_backward import hold

        self._tap, self._release_tap = hold()

    # The global hooks run at every module call outside a model's forward pass: the guard is inlined.
    def _pre(self, module: Any, args: Any) -> None:
        if self.disabled:
            return
        try:
            key = id(module)
            if self._depth or key not in self._driven:  # else the steady state: a model found before, at top level
                if isinstance(module, self._loss_type):
                    self._loss_depth += 1
                    return
                if self._depth == 0 and key not in self._settled:
                    self._top_level(module, args)
                self._depth += 1
                if key not in self._quiet_models:
                    return
            else:
                self._depth = 1
            self._suspended_by = key  # its submodules run without the global hooks (_suspend, inlined)
            self._tap.suspended = 1
            self._pre_hooks.pop(self._pre_key, None)
            self._post_hooks.pop(self._post_key, None)
            if key in self._driven:
                self.hook._on_top_forward_pre(module, args)
        except TrainingStopped:
            raise
        except Exception as exc:
            self._internal_error("_pre", exc)

    def _top_level(self, module: Any, args: Any) -> None:
        # a model's own submodule called on its own (``model.decode(z)``) is no new model and opens no step
        hook = self.hook
        if not hook.knows(module):
            if not any(True for _ in module.parameters()):
                return
            hook.register_module(module, module_hooks=False)  # its passes reported by _pre and _resume
            self._driven.add(id(module))
        if id(module) not in self._quiet_models:
            self._quiet_models.add(id(module))
            own_hook_dicts(module)
            self._handles.append(module.register_forward_hook(Callback(self._resume), always_call=True))
        if hook.knows(module):
            self._settled.add(id(module))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self.disabled:
            return
        try:
            if isinstance(module, self._loss_type):
                self._loss_depth = max(0, self._loss_depth - 1)
                if self._loss_depth == 0:
                    self.hook.record_loss(f"{type(module).__name__}_output_0", output)
                return
            self._depth = max(0, self._depth - 1)
        except TrainingStopped:
            raise
        except Exception as exc:
            self._internal_error("_post", exc)

    def _resume(self, module: Any, args: Any, output: Any) -> None:
        """A known model's forward pass ended (or raised): the global hooks are back.

        ``_pre`` took them out when the pass began; a model called inside another one's forward pass is not seen by
        the global pre-hook, so its ``_resume`` finds another model's suspension and leaves it.
        """
        key = id(module)
        if self._suspended_by != key:
            return  # a model called inside another one's forward pass (or one that began before autolog)
        self._suspended_by = None
        self._tap.suspended = 0
        if not self._closed:  # the global hooks back (inlined: this runs at every step)
            self._pre_hooks[self._pre_key] = self._pre_fn
            self._post_hooks[self._post_key] = self._post_fn
        if self._depth:
            self._depth -= 1  # the global post-hook missed this module's end
        if key in self._driven:
            self.hook._on_top_forward(module, args, output)

    def adopt(self, hook: Any) -> None:
        """Record with the script's own hook from now on (its settings were merged by :func:`join_autolog`)."""
        previous, self.hook = self.hook, hook
        self._settled.clear()  # the models are new to this hook
        self._driven.clear()
        previous.disabled = True  # it never started: nothing was written
        log.info("trainspect: the script's own hook records this job into %s", hook.out_dir)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until what the hook recorded is on disk (see ``Hook.flush``)."""
        return bool(self.hook.flush(timeout))

    def close(self) -> None:
        """Remove the patches and close the hook."""
        CLOSERS.untrack(self)
        if self._closed:
            return
        self._closed = True
        self._tap.suspended = 0
        self._suspended_by = None
        for handle in self._handles:
            handle.remove()
        for companion in self.companions:
            companion.close()
        self.hook.close()
        self._release_tap()
        if self in _ACTIVE:
            _ACTIVE.remove(self)


def autolog(
    out_dir: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    smdebug: bool | None = None,
    *,
    smdebug_installer: Callable[[], object] | None = None,
    **hook_kwargs: Any,
) -> AutoLogger | None:
    """Instrument PyTorch training in this process; return the patches (None when disabled).

    Args:
        out_dir: the run directory (default: ``TRAINSPECT_OUT_DIR``, else ``runs/<script>-<time>``).
        config: a JSON hook config (default: ``TRAINSPECT_CONFIG``, else ``SMDEBUG_CONFIG_FILE_PATH``).
        smdebug: answer ``import smdebug…`` with trainspect when the real smdebug is not installed (default: under
            ``trainspect run`` or with ``TRAINSPECT_SMDEBUG=1``).
        smdebug_installer: what answers those imports (``trainspect.autolog`` passes
            :func:`trainspect.smdebug_compat.install`, a layer above this module); None: nothing does.
        **hook_kwargs: further ``trainspect.torch.Hook`` arguments.

    Returns:
        The :class:`AutoLogger`, or None when ``TRAINSPECT_DISABLE=1``.
    """
    if env.TRAINSPECT_DISABLE.get():
        log.info("trainspect: disabled by TRAINSPECT_DISABLE=1")
        return None
    if smdebug or (smdebug is None and (env.TRAINSPECT_RUN_ACTIVE.get() or env.TRAINSPECT_SMDEBUG.get())):
        if smdebug_installer is not None:
            smdebug_installer()
    if _ACTIVE:
        return _ACTIVE[0]
    from trainspect.hook_config import config_path, hook_kwargs_from_json
    from trainspect.hooks.keras_zcc import KerasAutoLog

    kwargs: dict[str, Any] = {}
    config = config or config_path()
    if config:
        kwargs.update(hook_kwargs_from_json(config))
    interval = env.TRAINSPECT_PROFILE.get()
    if interval and "profiler_config" not in kwargs:
        from trainspect.profiler.config import ProfilerConfig

        kwargs["profiler_config"] = ProfilerConfig(system_monitor_interval_millis=interval)
    kwargs.update(hook_kwargs)
    kwargs["out_dir"] = out_dir or env.TRAINSPECT_OUT_DIR.get() or kwargs.get("out_dir") or _default_out_dir()
    keras_part = KerasAutoLog.install(dict(kwargs), registry=_ACTIVE)
    keras_only = keras_part is not None and "keras" in sys.modules and "torch" not in sys.modules
    if not keras_only and importlib.util.find_spec("torch") is not None:  # a Keras (TF) script never loads torch
        from trainspect.hooks.torch_hook import Hook

        logger: Any = AutoLogger(Hook(**kwargs), companions=[keras_part] if keras_part else [], hook_kwargs=kwargs)
    elif keras_part is not None:
        logger = keras_part
    else:
        log.warning("trainspect: autolog found neither torch nor keras to instrument")
        return None
    _ACTIVE.append(logger)
    CLOSERS.track(logger)
    log.info("trainspect: recording into %s", kwargs["out_dir"])
    return logger


def __getattr__(name: str) -> Any:
    if name == "FUNCTIONAL_LOSSES":  # now in torch_backward, which imports torch: loaded on first use
        from trainspect.hooks.torch_backward import FUNCTIONAL_LOSSES

        return FUNCTIONAL_LOSSES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _default_out_dir() -> str:
    return os.path.join("runs", time.strftime("run-%Y%m%d-%H%M%S"))
