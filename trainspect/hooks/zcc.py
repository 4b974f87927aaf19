"""Zero script change: ``trainspect.autolog()`` and ``trainspect run`` instrument an unmodified PyTorch or Keras script.

Global module hooks find the model (the first top-level module with parameters that is not a loss) and loss modules;
functional losses (``F.cross_entropy`` …) are wrapped; the optimizer's ``step()`` marks the end of each step. The
hook closes at interpreter exit. Keras is instrumented by :mod:`trainspect.hooks.keras_zcc` (``Model.fit`` …),
patched when keras is imported; each framework is instrumented only when it is installed.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import time
from typing import Any

from trainspect import env
from trainspect.hooks._guard import Guarded, guarded
from trainspect.hooks.shutdown import CLOSERS

__all__ = ["autolog", "AutoLogger", "FUNCTIONAL_LOSSES"]

log = logging.getLogger(__name__)

FUNCTIONAL_LOSSES = {
    "cross_entropy": "CrossEntropyLoss",
    "nll_loss": "NLLLoss",
    "mse_loss": "MSELoss",
    "l1_loss": "L1Loss",
    "smooth_l1_loss": "SmoothL1Loss",
    "huber_loss": "HuberLoss",
    "binary_cross_entropy": "BCELoss",
    "binary_cross_entropy_with_logits": "BCEWithLogitsLoss",
    "kl_div": "KLDivLoss",
    "cosine_embedding_loss": "CosineEmbeddingLoss",
    "margin_ranking_loss": "MarginRankingLoss",
    "hinge_embedding_loss": "HingeEmbeddingLoss",
    "poisson_nll_loss": "PoissonNLLLoss",
    "gaussian_nll_loss": "GaussianNLLLoss",
    "triplet_margin_loss": "TripletMarginLoss",
    "soft_margin_loss": "SoftMarginLoss",
    "multilabel_soft_margin_loss": "MultiLabelSoftMarginLoss",
    "multi_margin_loss": "MultiMarginLoss",
    "ctc_loss": "CTCLoss",
}

_ACTIVE: list[AutoLogger] = []


class AutoLogger(Guarded):
    """Patches installed by :func:`autolog`; :meth:`close` removes them and closes the hook."""

    def __init__(self, hook: Any, companions: list[Any] | None = None) -> None:
        import torch
        from torch.nn.modules import module as module_mod

        self.hook = hook
        self.companions = list(companions or [])
        self._torch = torch
        self._depth = 0
        self._loss_depth = 0
        self._handles = [
            module_mod.register_module_forward_pre_hook(self._pre),
            module_mod.register_module_forward_hook(self._post),
        ]
        self._originals: dict[str, Any] = {}
        self._patch_functionals()
        self._closed = False

    def _patch_functionals(self) -> None:
        import torch.nn.functional as F  # noqa: N812

        for fname, cls_name in FUNCTIONAL_LOSSES.items():
            original = getattr(F, fname, None)
            if original is None:
                continue
            self._originals[fname] = original
            setattr(F, fname, self._wrap_loss(original, f"{cls_name}_output_0"))

    def _wrap_loss(self, fn: Any, name: str) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if self._loss_depth == 0 and not self._closed:
                self.hook.record_loss(name, out)
            return out

        return wrapper

    def _is_loss(self, module: Any) -> bool:
        return isinstance(module, self._torch.nn.modules.loss._Loss)

    @guarded()
    def _pre(self, module: Any, args: Any) -> None:
        if self._is_loss(module):
            self._loss_depth += 1
            return
        if self._depth == 0 and id(module) not in self.hook._top and any(True for _ in module.parameters()):
            self.hook.register_module(module)
            self.hook._on_top_forward_pre(module, args)
        self._depth += 1

    @guarded()
    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._is_loss(module):
            self._loss_depth = max(0, self._loss_depth - 1)
            if self._loss_depth == 0:
                self.hook.record_loss(f"{type(module).__name__}_output_0", output)
            return
        self._depth = max(0, self._depth - 1)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until what the hook recorded is on disk (see ``Hook.flush``)."""
        return bool(self.hook.flush(timeout))

    def close(self) -> None:
        """Remove the patches and close the hook."""
        CLOSERS.untrack(self)
        if self._closed:
            return
        self._closed = True
        import torch.nn.functional as F  # noqa: N812

        for fname, original in self._originals.items():
            setattr(F, fname, original)
        for handle in self._handles:
            handle.remove()
        for companion in self.companions:
            companion.close()
        self.hook.close()
        if self in _ACTIVE:
            _ACTIVE.remove(self)


def autolog(
    out_dir: str | os.PathLike[str] | None = None, config: str | os.PathLike[str] | None = None, **hook_kwargs: Any
) -> AutoLogger | None:
    """Instrument PyTorch training in this process; return the patches (None when disabled).

    Args:
        out_dir: the run directory (default: ``TRAINSPECT_OUT_DIR``, else ``runs/<script>-<time>``).
        config: a JSON hook config (default: ``TRAINSPECT_CONFIG`` when set).
        **hook_kwargs: further ``trainspect.torch.Hook`` arguments.

    Returns:
        The :class:`AutoLogger`, or None when ``TRAINSPECT_DISABLE=1``.
    """
    if env.TRAINSPECT_DISABLE.get():
        log.info("trainspect: disabled by TRAINSPECT_DISABLE=1")
        return None
    if _ACTIVE:
        return _ACTIVE[0]
    from trainspect.hook_config import hook_kwargs_from_json
    from trainspect.hooks.keras_zcc import KerasAutoLog

    kwargs: dict[str, Any] = {}
    config = config or env.TRAINSPECT_CONFIG.get()
    if config:
        kwargs.update(hook_kwargs_from_json(config))
    interval = env.TRAINSPECT_PROFILE.get()
    if interval and "profiler_config" not in kwargs:
        from trainspect.profiler.config import ProfilerConfig

        kwargs["profiler_config"] = ProfilerConfig(system_monitor_interval_millis=interval)
    kwargs.update(hook_kwargs)
    kwargs["out_dir"] = out_dir or env.TRAINSPECT_OUT_DIR.get() or kwargs.get("out_dir") or _default_out_dir()
    keras_part = KerasAutoLog.install(dict(kwargs), registry=_ACTIVE)
    if importlib.util.find_spec("torch") is not None:
        from trainspect.hooks.torch_hook import Hook

        logger: Any = AutoLogger(Hook(**kwargs), companions=[keras_part] if keras_part else [])
    elif keras_part is not None:
        logger = keras_part
    else:
        log.warning("trainspect: autolog found neither torch nor keras to instrument")
        return None
    _ACTIVE.append(logger)
    CLOSERS.track(logger)
    log.info("trainspect: recording into %s", kwargs["out_dir"])
    return logger


def _default_out_dir() -> str:
    return os.path.join("runs", time.strftime("run-%Y%m%d-%H%M%S"))
