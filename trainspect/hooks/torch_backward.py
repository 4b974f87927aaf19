"""The loss that was backpropagated: ``Tensor.backward`` and ``torch.autograd.backward`` tapped while a hook listens.

While at least one PyTorch hook is started, ``torch.autograd.backward`` is wrapped (``Tensor.backward`` calls it):
a backward pass on a one-element tensor hands that tensor to the listening hooks (recorded as ``loss``). Functional
losses (``F.mse_loss`` …, :data:`FUNCTIONAL_LOSSES`) called outside a loss module are handed over too (recorded as
``MSELoss_output_0`` …, in every mode). The profiler's backward timers (:mod:`trainspect.hooks.torch_sync_timer`)
are called around each outermost backward pass. The wrappers are removed when the last hook closes.

Helpers that change the loss before its backward pass are wrapped, so that the loss recorded is the one the script
computed:

* ``torch.amp.GradScaler.scale``: the scaled loss maps back to the unscaled one; ``GradScaler.step`` tells the
  hooks when an optimizer step was skipped (inf/NaN gradients), which still ends the training step;
* the trainers' own, through :mod:`trainspect.hooks.integrations` (Hugging Face's ``Trainer`` gets the
  ``TrainerCallback`` that drives its steps, accelerate's ``Accelerator.backward`` its accumulation divisor),
  patched when the tap is installed, or, while it is, when the script imports them (an
  :class:`~trainspect.hooks.import_watch.ImportWatcher` on ``sys.meta_path``).

The patches are process-wide, so their state is too: one :class:`LossTap` per process, owned by the patched
``torch.autograd.backward`` (its ``trainspect_tap`` attribute: :meth:`LossTap.current`), made by the first hook that
starts and gone with the last. Nothing is installed at import.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.modules.loss import _Loss

from trainspect import env
from trainspect.exceptions import TrainingStopped
from trainspect.hooks.import_watch import ImportWatcher
from trainspect.hooks.integrations import PATCHED_ON_IMPORT
from trainspect.hooks.torch_callbacks import ForwardTap, tap_forward, tappable

__all__ = [
    "BackwardTap",
    "FUNCTIONAL_LOSSES",
    "LossOutputTap",
    "LossTap",
    "hold",
    "micro_batches_name",
    "optimizer_holds",
    "optimizers_of",
    "watch_loss_module",
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

Target = tuple[Any, str, Callable[[Any], Any]]
"""(owner, attribute, wrapper factory) of one patch."""


class LossTap:
    """The process's patches and who listens to them (see the module); :meth:`current` finds it.

    Attributes:
        listeners: hooks with ``_on_backward(loss)``, ``_on_functional_loss(name, value)``, ``record_loss(name,
            value)`` and ``_on_scaler_step(scaler, optimizer)`` (a tuple, replaced on change: the wrappers iterate it).
        timers: backward-pass timers with ``backward_start(tensors)`` and ``backward_end()``, called around every
            outermost backward pass (they hold the patches with :func:`hold` and never raise).
        derived: a loss a helper rescaled, by ``id``: (the rescaled tensor, the script's tensor or None, a factor).
        factor: the divisor of the backward pass running now (accelerate's gradient accumulation), else 1.
        suspended: nesting of model forward passes running without ``autolog``'s global module hooks (see
            ``AutoLogger``): there a loss module is recorded through the functional loss it calls.
    """

    def __init__(self) -> None:
        self.listeners: tuple[Any, ...] = ()
        self.timers: tuple[Any, ...] = ()
        self.originals: dict[tuple[Any, str], Any] = {}
        self.depth = 0
        self.functional_depth = 0
        self.holds = 0
        self.derived: dict[int, tuple[torch.Tensor, torch.Tensor | None, float]] = {}
        self.factor = 1.0
        self.suspended = 0
        self.loss_forwards: dict[Any, bool] = {}
        """Whether a caller's code (of a functional loss) is a loss module's ``forward``, by code object."""
        self._finder = ImportWatcher(PATCHED_ON_IMPORT, self._framework_imported)

    @staticmethod
    def current() -> LossTap | None:
        """The tap of this process, while its patches are installed."""
        return getattr(torch.autograd.backward, "trainspect_tap", None)

    @classmethod
    def acquire(cls) -> LossTap:
        """The tap of this process, installed now if it was not."""
        tap = cls.current()
        if tap is None:
            tap = cls()
            tap.install()
        return tap

    # --- patches --------------------------------------------------------------------------------------------
    def _targets(self) -> list[Target]:
        """(owner, attribute, wrapper factory) of everything patched, for the frameworks imported so far."""
        targets: list[Target] = [
            (torch.autograd, "backward", functools.partial(_wrap_backward, tap=self)),  # Tensor.backward calls it
            (torch.amp.GradScaler, "scale", functools.partial(_wrap_scale, tap=self)),
            (torch.amp.GradScaler, "step", functools.partial(_wrap_scaler_step, tap=self)),
        ]
        for fname, cls_name in FUNCTIONAL_LOSSES.items():
            targets.append((F, fname, functools.partial(_wrap_functional, name=f"{cls_name}_output_0", tap=self)))
        for module_name, integration in PATCHED_ON_IMPORT.items():
            if module_name in sys.modules:
                targets += importlib.import_module(integration).targets(self, sys.modules[module_name])
        return targets

    def install(self) -> None:
        """Patch what is not patched yet (the frameworks imported since too)."""
        if self._finder not in sys.meta_path:
            sys.meta_path.insert(0, self._finder)
        for owner, attr, wrap in self._targets():
            key = (owner, attr)
            if key in self.originals or attr not in vars(owner):
                continue
            original = vars(owner)[attr]
            self.originals[key] = original
            setattr(owner, attr, wrap(original))

    def _framework_imported(self, module: ModuleType) -> None:
        if self.originals:
            self.install()

    def _release_if_unused(self) -> None:
        if self.listeners or self.holds:
            return
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        for (owner, attr), original in self.originals.items():
            setattr(owner, attr, original)
        self.originals.clear()
        self.derived.clear()

    def failed(self, where: str, exc: Exception) -> None:
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
        self.listeners = ()

    # --- subscriptions ------------------------------------------------------------------------------------
    def add_timer(self, timer: Any) -> None:
        """Call ``timer`` around every outermost backward pass."""
        self.timers += (timer,)

    def remove_timer(self, timer: Any) -> None:
        """Stop calling ``timer``."""
        self.timers = tuple(t for t in self.timers if t is not timer)

    def loss_of(self, tensor: torch.Tensor) -> tuple[torch.Tensor, float]:
        """The loss the script computed for ``tensor`` (before scaling or normalising), and a factor to apply."""
        factor, derived = self.factor, self.derived
        for _ in range(4):
            entry = derived.pop(id(tensor), None)
            if entry is None or entry[0] is not tensor:
                break
            if entry[1] is not None:
                tensor = entry[1]
            factor *= entry[2]
        return tensor, factor

    def functional_loss(self, name: str, out: Any, frame: Any) -> None:
        """A functional loss returned ``out`` to ``frame``: recorded as that loss module's output, or as ``name``.

        In a loss module's ``forward`` it is that module's output: recorded here only while ``autolog``'s global hooks
        are suspended (a registered module's :class:`LossOutputTap` records it, and lets its functional loss pass).
        """
        code = frame.f_code
        in_loss = self.loss_forwards.get(code)
        if in_loss is None:  # asked once per caller (f_locals costs a dict)
            in_loss = code.co_name == "forward" and isinstance(frame.f_locals.get("self"), _Loss)
            if len(self.loss_forwards) < 1024:
                self.loss_forwards[code] = in_loss
        if not in_loss:
            for listener in self.listeners:
                listener._on_functional_loss(name, out)
        elif self.suspended:  # no global hook sees the loss module: record its output from here
            for listener in self.listeners:
                listener.record_loss(f"{type(frame.f_locals['self']).__name__}_output_0", out)

    def notify(self, tensors: Any) -> None:
        """A backward pass begins on ``tensors``: a one-element tensor goes to the listeners as the step's loss."""
        if not isinstance(tensors, torch.Tensor):
            if not isinstance(tensors, (list, tuple)) or len(tensors) != 1 or not isinstance(tensors[0], torch.Tensor):
                return
            tensors = tensors[0]
        if tensors.numel() != 1:
            return
        loss = tensors
        if self.derived or self.factor != 1.0:  # a loss a helper scaled or normalised (else: the tensor itself)
            loss, factor = self.loss_of(tensors)
            self.derived.clear()
            if factor != 1.0:
                loss = loss.detach() * factor
        for listener in self.listeners:
            listener._on_backward(loss)


def _wrap_backward(original: Any, tap: LossTap) -> Any:
    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if tap.depth or not (tap.listeners or tap.timers):  # a backward pass inside one (or nobody listens)
            return original(tensors, *args, **kwargs)
        try:
            if tap.listeners:
                tap.notify(tensors)
        except TrainingStopped:
            raise  # a StopTraining action: a backward pass outside any step began one
        except Exception as exc:
            tap.failed("backward", exc)
        timers = tap.timers
        for timer in timers:
            timer.backward_start(tensors)
        tap.depth = 1
        try:
            return original(tensors, *args, **kwargs)
        finally:
            tap.depth = 0
            for timer in timers:
                timer.backward_end()

    backward.trainspect_tap = tap  # type: ignore[attr-defined]
    return backward


def _wrap_functional(original: Any, name: str, tap: LossTap) -> Any:
    @functools.wraps(original)
    def loss(*args: Any, **kwargs: Any) -> Any:
        if tap.functional_depth or not tap.listeners:  # inside another functional loss (or nobody listens)
            return original(*args, **kwargs)
        tap.functional_depth = 1
        try:
            out = original(*args, **kwargs)
        finally:
            tap.functional_depth = 0
        try:
            tap.functional_loss(name, out, sys._getframe(1))
        except TrainingStopped:
            raise  # a StopTraining action at the step this loss began
        except Exception as exc:
            tap.failed(name, exc)
        return out

    return loss


def _wrap_scale(original: Any, tap: LossTap) -> Any:
    @functools.wraps(original)
    def scale(self: Any, outputs: Any) -> Any:
        out = original(self, outputs)
        if isinstance(out, torch.Tensor) and isinstance(outputs, torch.Tensor) and out is not outputs:
            tap.derived[id(out)] = (out, outputs, 1.0)
        return out

    return scale


def _wrap_scaler_step(original: Any, tap: LossTap) -> Any:
    @functools.wraps(original)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, optimizer, *args, **kwargs)
        try:
            for listener in tap.listeners:
                listener._on_scaler_step(self, optimizer)
        except Exception as exc:
            tap.failed("GradScaler.step", exc)
        return out

    return step


class BackwardTap:
    """A hook's subscription to backward passes, functional losses and GradScaler steps; :meth:`remove` ends it.

    Args:
        hook: an object with ``_on_backward(loss)``, ``_on_functional_loss(name, value)``, ``record_loss(name,
            value)`` and ``_on_scaler_step(scaler, optimizer)``.
    """

    def __init__(self, hook: Any) -> None:
        self._hook = hook
        self.tap = LossTap.acquire()
        self.tap.listeners += (hook,)

    @staticmethod
    def refresh() -> None:
        """Patch the frameworks imported since the tap was installed."""
        tap = LossTap.current()
        if tap is not None:
            tap.install()

    def remove(self) -> None:
        """Stop listening; the last subscriber's removal restores the originals."""
        tap = self.tap
        if self._hook in tap.listeners:
            tap.listeners = tuple(h for h in tap.listeners if h is not self._hook)
        tap._release_if_unused()


class LossOutputTap(ForwardTap):
    """A registered loss module's own ``forward``: the forward it stands in for, then ``callback(output)``.

    Set in the module's ``__dict__`` like a model's :class:`~trainspect.hooks.torch_callbacks.ForwardTap` (and, like
    it, never carried by a copy, a pickle or a ``DataParallel`` replica). While it runs, the functional loss inside
    (``nn.MSELoss`` calls ``F.mse_loss``) passes straight through its wrapper: its value is this output, recorded
    here.
    """

    def __init__(self, module: Any, callback: Any, inner: Any = None, own: bool | None = None) -> None:
        super().__init__(module, callback, inner, own)
        self.tap = LossTap.current()  # None in a spawned process's copy: found at a call once its hook started

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The loss module's forward pass, then the callback with its output (unless removed)."""
        call = self.call  # read once: a signal handler may close the hook in between
        if call is None:
            return self.inner(*args, **kwargs)
        tap = self.tap
        if tap is None:
            tap = self.tap = LossTap.current()
        if tap is None:  # no wrapper to pass through
            out = self.inner(*args, **kwargs)
        else:
            depth = tap.functional_depth
            tap.functional_depth = 1
            try:
                out = self.inner(*args, **kwargs)
            finally:
                tap.functional_depth = depth
        call(out)
        return out


def watch_loss_module(module: torch.nn.Module, callback: Any) -> LossOutputTap | None:
    """Call ``callback(output)`` with each output of ``module`` through a :class:`LossOutputTap` of its own.

    Only for PyTorch's own loss classes (``torch.nn.modules.loss``) called through ``Module.__call__``, while the tap
    is installed: no module hook is needed (any hook sends every call through the slow path of ``Module.__call__``,
    which costs more than the loss's recording). ``callback`` is a
    :class:`~trainspect.hooks.torch_callbacks.Callback` (a spawned process gets its own hook's). Returns the tap (its
    ``remove`` undoes it), or None (use a forward hook).
    """
    if LossTap.current() is None or type(module).__module__ != "torch.nn.modules.loss" or not tappable(module):
        return None
    return tap_forward(module, callback, LossOutputTap)


def hold() -> tuple[LossTap, Callable[[], None]]:
    """Install the patches now, before any hook listens, until the returned function is called.

    ``autolog()`` holds them from its start: ``F.cross_entropy(model(x), y)`` looks ``F.cross_entropy`` up before the
    model's first forward pass registers the model (and starts the hook). Returns the tap and the release.
    """
    tap = LossTap.acquire()
    tap.holds += 1
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            tap.holds -= 1
            tap._release_if_unused()

    return tap, release


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
