"""The loss that was backpropagated: ``Tensor.backward`` and ``torch.autograd.backward`` tapped while a hook listens.

While at least one PyTorch hook is started, ``torch.autograd.backward`` is wrapped (``Tensor.backward`` calls it):
a backward pass on a one-element tensor hands that tensor to the listening hooks (recorded as ``loss``). Functional
losses (``F.mse_loss`` …, :data:`FUNCTIONAL_LOSSES`) called outside a loss module are handed
over too (recorded as ``MSELoss_output_0`` …, in every mode). The profiler's backward timers (``STATE.timers``,
:mod:`trainspect.hooks.torch_sync_timer`) are called around each outermost backward pass. The wrappers are removed
when the last hook closes.
Helpers that change the loss before its backward pass are wrapped, so that the loss recorded is the one the script
computed (the frameworks' in :mod:`trainspect.hooks.torch_frameworks`):

* ``torch.amp.GradScaler.scale``: the scaled loss maps back to the unscaled one; ``GradScaler.step`` tells the
  hooks when an optimizer step was skipped (inf/NaN gradients), which still ends the training step;
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.modules.loss import _Loss

from trainspect import env
from trainspect.exceptions import TrainingStopped
from trainspect.modes import ModeKeys

__all__ = [
    "BackwardTap",
    "FUNCTIONAL_LOSSES",
    "STATE",
    "register_adapter",
    "hold",
    "micro_batches_name",
    "optimizer_holds",
    "optimizers_of",
]

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
"""Functional losses recorded as the loss module of the same name (``F.mse_loss`` → ``MSELoss_output_0``)."""


class _State:
    """Process-wide state of the tap (the patches are process-wide too)."""

    def __init__(self) -> None:
        self.listeners: tuple[Any, ...] = ()
        """Hooks with ``_on_backward(loss)``, ``_on_functional_loss(name, value)`` and
        ``_on_scaler_step(scaler, optimizer)`` (a tuple, replaced on change: the wrappers iterate it, not a copy)."""
        self.originals: dict[tuple[Any, str], Any] = {}
        self.depth = 0
        self.functional_depth = 0
        self.holds = 0
        self.derived: dict[int, tuple[torch.Tensor, torch.Tensor | None, float]] = {}
        self.factor = 1.0
        self.mode: ModeKeys | None = None
        """A mode a framework's loop imposes (Lightning's predict loop: PREDICT); None: follow the model."""
        self.timers: tuple[Any, ...] = ()
        """Backward-pass timers with ``backward_start(tensors)`` and ``backward_end()``, called around every outermost
        backward pass (the profiler's synchronisation timer, :mod:`trainspect.hooks.torch_sync_timer`; they hold the
        patches with :func:`hold` and never raise)."""
        self.suspended = 0
        """Nesting of model forward passes running without ``autolog``'s global module hooks (see ``AutoLogger``):
        there a loss module is recorded through the functional loss it calls."""


STATE = _State()

Target = tuple[Any, str, Callable[[Any], Any]]
"""(owner, attribute, wrapper factory) of one patch."""

ADAPTERS: list[tuple[Callable[[], list[Target]], Any]] = []
"""Framework adapters, registered by their modules at import (:mod:`trainspect.hooks.torch_frameworks`, imported
with the PyTorch hook): a function giving the patches of the frameworks imported so far, and a ``sys.meta_path``
finder installed with the tap (it patches those frameworks when the script imports them)."""


def register_adapter(targets: Callable[[], list[Target]], finder: Any) -> None:
    """Patch a framework's loss helpers with the tap (once per adapter)."""
    if all(existing is not targets for existing, _ in ADAPTERS):
        ADAPTERS.append((targets, finder))


def _loss_of(tensor: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The loss the script computed for ``tensor`` (before scaling or normalising), and a factor to apply."""
    factor, derived = STATE.factor, STATE.derived
    for _ in range(4):
        entry = derived.pop(id(tensor), None)
        if entry is None or entry[0] is not tensor:
            break
        if entry[1] is not None:
            tensor = entry[1]
        factor *= entry[2]
    return tensor, factor


def _failed(where: str, exc: Exception) -> None:
    """An internal error in a wrapper: the tap stops listening, with one warning; training goes on."""
    if env.TRAINSPECT_TESTING.get():
        raise exc
    log.warning(
        "trainspect: recording losses failed in %s (%s: %s); losses of backward passes and functional "
        "losses are no longer recorded",
        where,
        type(exc).__name__,
        exc,
    )
    STATE.listeners = ()


def _notify(tensors: Any) -> None:
    if not isinstance(tensors, torch.Tensor):
        if not isinstance(tensors, (list, tuple)) or len(tensors) != 1 or not isinstance(tensors[0], torch.Tensor):
            return
        tensors = tensors[0]
    if tensors.numel() != 1:
        return
    loss = tensors
    state = STATE
    if state.derived or state.factor != 1.0:  # a loss a framework scaled or normalised (else: the tensor itself)
        loss, factor = _loss_of(tensors)
        state.derived.clear()
        if factor != 1.0:
            loss = loss.detach() * factor
    for listener in state.listeners:
        listener._on_backward(loss)


def _wrap_backward(original: Any) -> Any:
    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        state = STATE
        if state.depth or not (state.listeners or state.timers):  # a backward pass inside one (or nobody listens)
            return original(tensors, *args, **kwargs)
        try:
            if state.listeners:
                _notify(tensors)
        except TrainingStopped:
            raise  # a StopTraining action: a backward pass outside any step began one
        except Exception as exc:
            _failed("backward", exc)
        timers = state.timers
        for timer in timers:
            timer.backward_start(tensors)
        state.depth = 1
        try:
            return original(tensors, *args, **kwargs)
        finally:
            state.depth = 0
            for timer in timers:
                timer.backward_end()

    return backward


def _wrap_functional(original: Any, name: str) -> Any:
    @functools.wraps(original)
    def loss(*args: Any, **kwargs: Any) -> Any:
        state = STATE
        if state.functional_depth or not state.listeners:  # inside another functional loss (or nobody listens)
            return original(*args, **kwargs)
        state.functional_depth = 1
        try:
            out = original(*args, **kwargs)
        finally:
            state.functional_depth = 0
        try:
            frame = sys._getframe(1)  # a loss module's forward: recorded as that module (f_locals costs a dict)
            if frame.f_code.co_name != "forward" or not isinstance(frame.f_locals.get("self"), _Loss):
                for listener in state.listeners:
                    listener._on_functional_loss(name, out)
            elif state.suspended:  # no global hook sees the loss module: record its output from here
                for listener in state.listeners:
                    listener.record_loss(f"{type(frame.f_locals['self']).__name__}_output_0", out)
        except Exception as exc:
            _failed(name, exc)
        return out

    return loss


def _wrap_scale(original: Any) -> Any:
    @functools.wraps(original)
    def scale(self: Any, outputs: Any) -> Any:
        out = original(self, outputs)
        if isinstance(out, torch.Tensor) and isinstance(outputs, torch.Tensor) and out is not outputs:
            STATE.derived[id(out)] = (out, outputs, 1.0)
        return out

    return scale


def _wrap_scaler_step(original: Any) -> Any:
    @functools.wraps(original)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, optimizer, *args, **kwargs)
        try:
            for listener in STATE.listeners:
                listener._on_scaler_step(self, optimizer)
        except Exception as exc:
            _failed("GradScaler.step", exc)
        return out

    return step


def _targets() -> list[Target]:
    """(owner, attribute, wrapper factory) of everything patched, for the frameworks imported so far."""
    targets: list[Target] = [
        (torch.autograd, "backward", _wrap_backward),  # Tensor.backward calls it (looked up at every call)
        (torch.amp.GradScaler, "scale", _wrap_scale),
        (torch.amp.GradScaler, "step", _wrap_scaler_step),
    ]
    for fname, cls_name in FUNCTIONAL_LOSSES.items():
        targets.append((F, fname, functools.partial(_wrap_functional, name=f"{cls_name}_output_0")))
    for adapter_targets, _ in ADAPTERS:
        targets += adapter_targets()
    return targets


def _install() -> None:
    for _, finder in ADAPTERS:
        if finder not in sys.meta_path:
            sys.meta_path.insert(0, finder)
    for owner, attr, wrap in _targets():
        key = (owner, attr)
        if key in STATE.originals or attr not in vars(owner):
            continue
        original = vars(owner)[attr]
        STATE.originals[key] = original
        setattr(owner, attr, wrap(original))


def _uninstall() -> None:
    for _, finder in ADAPTERS:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
    for (owner, attr), original in STATE.originals.items():
        setattr(owner, attr, original)
    STATE.originals.clear()
    STATE.derived.clear()


class BackwardTap:
    """A hook's subscription to backward passes, functional losses and GradScaler steps; :meth:`remove` ends it.

    Args:
        hook: an object with ``_on_backward(loss)``, ``_on_functional_loss(name, value)`` and
            ``_on_scaler_step(scaler, optimizer)``.
    """

    def __init__(self, hook: Any) -> None:
        self._hook = hook
        STATE.listeners += (hook,)
        _install()

    @staticmethod
    def refresh() -> None:
        """Patch the frameworks imported since the tap was installed (Lightning, transformers)."""
        if STATE.listeners:
            _install()

    def remove(self) -> None:
        """Stop listening; the last subscriber's removal restores the originals."""
        if self._hook in STATE.listeners:
            STATE.listeners = tuple(h for h in STATE.listeners if h is not self._hook)
        if not STATE.listeners and not STATE.holds:
            _uninstall()


def hold() -> Callable[[], None]:
    """Install the patches now, before any hook listens, until the returned function is called.

    ``autolog()`` holds them from its start: ``F.cross_entropy(model(x), y)`` looks ``F.cross_entropy`` up before the
    model's first forward pass registers the model (and starts the hook).
    """
    STATE.holds += 1
    _install()
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            STATE.holds -= 1
            if not STATE.listeners and not STATE.holds:
                _uninstall()

    return release


def _subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def optimizer_holds(params: list[torch.nn.Parameter]) -> bool:
    """Whether a ``torch.optim`` optimizer exists that updates any of ``params`` (a one-time heap scan).

    An optimizer's constructor marks its class's ``step`` as ``hooked``; without such a class no heap scan is needed.
    """
    return bool(optimizers_of(params, first_only=True))


def optimizers_of(params: list[torch.nn.Parameter], first_only: bool = False) -> list[torch.optim.Optimizer]:
    """The ``torch.optim`` optimizers that update any of ``params`` (a heap scan: done once per run by callers)."""
    import gc

    classes = _subclasses(torch.optim.Optimizer)
    if not any(getattr(c.__dict__.get("step"), "hooked", False) for c in classes):
        return []
    ids, kinds, found = {id(p) for p in params}, set(classes), []
    for obj in gc.get_objects():
        if type(obj) in kinds:  # not isinstance: that would read a proxy's __class__ (deprecation warnings)
            if any(id(p) in ids for group in obj.param_groups for p in group["params"]):
                found.append(obj)
                if first_only:
                    break
    return found


def micro_batches_name(loss_name: str) -> str:
    """The name of a loss's micro-batch values (``loss_micro_batches``, ``MSELoss_micro_batches``).

    ``loss`` → ``loss_micro_batches``, ``MSELoss_output_0`` → ``MSELoss_micro_batches``:
    outside the losses collection's regex, so rules read only the step's value (the mean).
    """
    base = loss_name[: -len("_output_0")] if loss_name.endswith("_output_0") else loss_name
    return f"{base}_micro_batches"
