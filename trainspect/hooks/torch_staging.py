"""One PyTorch step's host copies on their way to the collector, and the losses recorded in it.

:class:`StepStaging` collects the step's staged tensors (:func:`~trainspect.hooks.torch_tensors.stage`) and hands
them to the collector when the step ends. With ``defer`` (the default configuration: nothing else reads the step's
record), copies still in flight from a CUDA device are not waited for: an event per CUDA stream is recorded after them,
and they are read when the next step ends (or at close), joining their own step's record — the training thread does
not wait for the GPU to record a loss. :class:`StepLosses` keeps the step's loss values (one per micro-batch).

A tensor that cannot be staged (a tensor subclass trainspect cannot copy, a sharded parameter whose engine metadata
cannot be read) is skipped with one warning naming it; the rest of the step, its losses included, is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from trainspect import env
from trainspect.hooks import torch_tensors
from trainspect.hooks.collector import Collector, StepKey
from trainspect.hooks.save_plan import SavePlanner, TensorPlan
from trainspect.hooks.torch_backward import micro_batches_name
from trainspect.hooks.torch_loss_series import series_name
from trainspect.hooks.torch_placements import Unrecordable
from trainspect.hooks.torch_tensors import (
    HostScalar,
    Staged,
    batchable,
    combine,
    materialize,
    partials_dict,
    record_fence,
    stage,
    stage_batch,
)
from trainspect.shard import Shard
from trainspect.step import Scalar, collection_atoms

__all__ = ["StepStaging", "StepLosses", "SkipLog", "first_closure_losses"]

log = logging.getLogger(__name__)


class SkipLog:
    """The tensors a hook could not read: one warning per name (they are tried again at later saving steps)."""

    __slots__ = ("warned",)

    def __init__(self) -> None:
        self.warned: set[str] = set()

    def warn(self, name: str, why: str) -> None:
        """Warn, once per ``name``, that tensor ``name`` is not recorded, and why."""
        if name not in self.warned:
            self.warned.add(name)
            log.warning("trainspect: %s is not recorded: %s", name, why)

    def failed(self, name: str, exc: Exception) -> None:
        """Staging ``name`` raised: warn (under TRAINSPECT_TESTING, an error that is no data problem re-raises)."""
        if env.TRAINSPECT_TESTING.get() and not isinstance(exc, (Unrecordable, AttributeError)):
            raise exc
        self.warn(name, f"{type(exc).__name__}: {exc}")


_LOSSES = ("losses",)
_MICRO_BATCHES = TensorPlan(True, (), False, frozenset())


class StepStaging:
    """The open step's staged tensors (gradients keyed by name: the last accumulation wins) and late copies."""

    __slots__ = ("collector", "staged", "grads", "late", "skips")

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.staged: list[Staged] = []
        self.grads: dict[str, Staged] = {}
        self.late: tuple[StepKey, list[Staged], list[Any]] | None = None
        """The copies a finished step left in flight (its key, the staged tensors, their devices' events)."""
        self.skips = SkipLog()

    def _stage(self, name: str, tensor: Any, plan: TensorPlan, shard: Shard | None) -> Staged | None:
        try:
            return stage(name, tensor, plan, shard)
        except Exception as exc:
            self.skips.failed(name, exc)
            return None

    def stage(self, name: str, tensor: Any, plan: TensorPlan, shard: Shard | None = None) -> None:
        """Start the host copy of what ``plan`` asks of ``tensor`` (nothing when it asks nothing).

        ``shard``: ``tensor`` is this rank's piece of a sharded tensor.
        """
        if plan.raw or plan.reductions:
            staged = self._stage(name, tensor, plan, shard)
            if staged is not None:
                self.staged.append(staged)

    def stage_gradient(self, name: str, grad: torch.Tensor, plan: TensorPlan, shard: Shard | None = None) -> None:
        """Stage a gradient (accumulated: a later one replaces an earlier one of the same step)."""
        staged = self._stage(name, grad, plan, shard)
        if staged is not None:
            self.grads[name] = staged

    def stage_read(self, name: str, read: Callable[[], Any], plan: TensorPlan, gradient: bool = False) -> None:
        """Stage the ``(tensor, shard)`` piece ``read()`` returns (None: nothing to record); a failing read warns."""
        piece = self._read(name, read, plan)
        if piece is not None:
            (self.stage_gradient if gradient else self.stage)(name, piece[0], plan, piece[1])

    def _read(self, name: str, read: Callable[[], Any], plan: TensorPlan) -> Any:
        """The piece ``read()`` returns, or None: nothing to record, or a failing read (warned)."""
        if not (plan.raw or plan.reductions):
            return None
        try:
            return read()
        except Exception as exc:
            self.skips.failed(name, exc)
            return None

    def stage_reads(self, reads: list[tuple[str, Callable[[], Any], TensorPlan]], gradient: bool = False) -> None:
        """:meth:`stage_read` of each ``(name, read, plan)``, in order.

        Plain CPU tensors saved raw are copied together (:func:`~trainspect.hooks.torch_tensors.stage_batch`: a
        saving step's weights, or its gradients).
        """
        staged: list[Staged | None] = []
        batch: list[tuple[str, torch.Tensor, TensorPlan]] = []
        at: list[int] = []  # where each batched tensor goes in ``staged``
        for name, read, plan in reads:
            piece = self._read(name, read, plan)
            if piece is None:
                continue
            if batchable(piece[0], plan, piece[1]):
                at.append(len(staged))
                staged.append(None)
                batch.append((name, piece[0], plan))
            else:
                staged.append(self._stage(name, piece[0], plan, piece[1]))
        for i, s in zip(at, self._stage_batch(batch) if batch else (), strict=True):
            staged[i] = s
        self._keep([s for s in staged if s is not None], gradient)

    def _stage_batch(self, batch: list[tuple[str, torch.Tensor, TensorPlan]]) -> list[Staged | None]:
        """:func:`~trainspect.hooks.torch_tensors.stage_batch`; should it fail, each tensor is staged on its own."""
        try:
            return list(stage_batch(batch))
        except Exception:
            if env.TRAINSPECT_TESTING.get():
                raise
            return [self._stage(name, tensor, plan, None) for name, tensor, plan in batch]

    def _keep(self, staged: list[Staged], gradient: bool) -> None:
        if not gradient:
            self.staged += staged
            return
        grads = self.grads
        for s in staged:
            grads[s.name] = s

    def commit(self, defer: bool) -> None:
        """Add the staged tensors to the collector's open step; with ``defer``, CUDA copies in flight join it later.

        The previous step's late copies are read first (their event was recorded a step ago).
        """
        if self.late is not None:
            self.complete_late()
        staged = self.staged
        if self.grads:
            staged += self.grads.values()
            self.grads = {}
        if not staged:
            return
        self.staged = []
        if defer:
            fence = record_fence(staged)
            if fence:
                step = self.collector.open_step()
                if step is not None:
                    self.late = (step, [s for s in staged if s.stream is not None], fence)
                    staged = [s for s in staged if s.stream is None]
        add = self.collector.add
        for s, value, reds in materialize(staged):
            add(s.name, s.plan, value, reds, s.shape, s.shard, partials_dict(s))

    def complete_late(self) -> None:
        """Read the copies a past step left in flight (waiting for their devices' events) and add them to it."""
        late, self.late = self.late, None
        if late is not None:
            step, staged, fence = late
            done = materialize(staged, fence)
            self.collector.add_late(
                step, [(s.name, s.plan, value, reds, s.shape, s.shard, partials_dict(s)) for s, value, reds in done]
            )


class StepLosses:
    """The losses recorded in the open step: per name, one value per micro-batch, each taken when recorded.

    A tensor recorded under two names (the backward loss that is a loss module's output) is copied once; one recorded
    twice under one name (a loss module the script registered and ``trainspect run`` also records) counts once.
    """

    __slots__ = (
        "values",
        "_more",
        "_last",
        "_last_names",
        "_planner",
        "_plans",
        "_scalars",
        "_generation",
        "frozen",
        "held",
    )

    def __init__(self, planner: SavePlanner) -> None:
        self._planner = planner  # the collector's: what each loss saves
        self.values: dict[str, HostScalar | torch.Tensor] = {}
        """The first value of each loss recorded in the open step."""
        self._more: dict[str, list[HostScalar | torch.Tensor]] = {}
        """Losses recorded more than once in the open step (gradient accumulation): all their values, in order."""
        self._last: tuple[torch.Tensor, HostScalar | torch.Tensor] | None = None
        # the names the last tensor was recorded under: a tuple (one or two names; a set per step cost ~0.5 us in place:
        # sets have no free list, tuples do)
        self._last_names: tuple[str, ...] = ()
        self._plans: dict[str, TensorPlan] = {}  # the planner's plans of the losses, for one planner generation
        self._scalars: dict[str, tuple[str, ...]] = {}  # losses saved raw only: their collections (same generation)
        self._generation = -1
        self.frozen = False
        """The open step takes no more losses (an optimizer's closure called again: LBFGS's line search)."""
        self.held: list[tuple[str, HostScalar | torch.Tensor]] = []
        """Losses recorded between steps, for the next step (their values taken when recorded)."""

    def hold(self, name: str, value: torch.Tensor) -> None:
        """Keep a loss recorded between steps for the next step (dropped at the next optimizer step, or at close)."""
        if len(self.held) < 64:
            self.held.append((name, torch_tensors.snapshot(value)))

    def take_held(self) -> list[str]:
        """A step begins: the losses held for it join it (before its own); return their names."""
        held, self.held = self.held, []
        for name, snap in held:
            self._add_snapshot(name, snap)
        return [name for name, _ in held]

    def add(self, name: str, value: torch.Tensor) -> None:
        """Record ``value`` now (whatever the script does to the tensor later)."""
        if self.frozen:
            return
        last = self._last
        if last is not None and last[0] is value:
            if name in self._last_names:
                return  # the same tensor again under the same name: no second micro-batch
            self._last_names += (name,)
            snap = last[1]
        else:
            snap = torch_tensors.snapshot(value)  # looked up here: tests fake a device at this boundary
            self._last = (value, snap)
            self._last_names = (name,)
        values = self.values
        if name in values:
            self._add_snapshot(name, snap)  # a further micro-batch
        else:
            values[name] = snap

    def _add_snapshot(self, name: str, snap: HostScalar | torch.Tensor) -> None:
        values = self.values
        if name not in values:
            values[name] = snap
        else:  # gradient accumulation: one value per micro-batch
            more = self._more.get(name)
            if more is None:
                self._more[name] = [values[name], snap]
            else:
                more.append(snap)

    def times_micro_batches(self, name: str) -> None:
        """Multiply each value of loss ``name`` in the open step by the number of its micro-batches.

        Hugging Face's ``Trainer`` divides each micro-batch's loss by that number before its backward pass.
        """
        more = self._more.get(name)
        if name not in self.values or more is None:
            return  # one micro-batch: divided by 1
        k = len(more)
        self._more[name] = [_times(v, k) for v in more]
        self.values[name] = self._more[name][0]

    def rename(self, owner: str) -> list[str]:
        """Put the open step's losses in ``owner``'s series (``loss/<owner>``…); return their new names."""
        self.values = {series_name(name, owner): value for name, value in self.values.items()}
        if self._more:
            self._more = {series_name(name, owner): values for name, values in self._more.items()}
        self._last_names = ()
        return list(self.values)

    def recorded(self, value: torch.Tensor) -> bool:
        """Whether ``value`` is the tensor recorded last in the open step (under any name)."""
        return self._last is not None and self._last[0] is value

    def flush(self, staging: StepStaging, quiet: bool) -> tuple[list[Scalar], bool]:
        """Stage the step's losses: one value each, the mean of its micro-batches' (also saved as ``*_micro_batches``).

        ``quiet``: nothing reads the step's record, so a plain scalar loss skips NumPy: those are returned, for
        ``Collector.end_step``, with whether each was returned so before (its name is known to the collector).
        """
        losses, self.values, self._last, self.frozen = self.values, {}, None, False
        more = self._more
        generation = self._planner.generation
        if generation != self._generation:
            self._plans, self._scalars, self._generation = {}, {}, generation
        scalars: list[Scalar] = []
        if more:
            self._more = {}
        elif quiet:  # the common step: one host scalar per loss, each saved as it is and as it was before
            raw_only = self._scalars
            for name, value in losses.items():
                colls = raw_only.get(name)
                if colls is None or type(value) is not tuple:
                    break
                scalars.append((name, value[0], value[1], colls))
            else:
                return scalars, True
            scalars = []
        for name, value in losses.items():
            self._flush_one(staging, name, more.get(name) or [value], quiet, scalars)
        return scalars, False

    def _flush_one(
        self,
        staging: StepStaging,
        name: str,
        values: list[HostScalar | torch.Tensor],
        quiet: bool,
        scalars: list[Scalar],
    ) -> None:
        plan = self._plans.get(name)
        if plan is None:
            plan = self._plans[name] = self._planner.plan(name, _LOSSES)
            if plan.raw and not plan.reductions:
                self._scalars[name] = collection_atoms(plan.collections)
        value, micro = (values[0], None) if len(values) == 1 else combine(values)
        if micro is not None and (plan.raw or plan.reductions):
            staging.stage(micro_batches_name(name), micro, _MICRO_BATCHES)
        if isinstance(value, tuple):
            if plan.raw and not plan.reductions and quiet:
                scalars.append((name, value[0], value[1], self._scalars[name]))  # no NumPy on this thread
                return
            value = torch.from_numpy(np.array(value[0], dtype=value[1]))
        staging.stage(name, value, plan)


def _times(value: HostScalar | torch.Tensor, k: int) -> HostScalar | torch.Tensor:
    """A loss snapshot times ``k`` (a host scalar stays one)."""
    if isinstance(value, tuple):
        return (value[0] * k, value[1])
    return value * k


def first_closure_losses(losses: StepLosses, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``optimizer.step(closure)`` begins: the step's losses are those of the closure's first call.

    LBFGS calls its closure up to ``max_iter`` times per step (a line search): the step's loss is the loss at the
    step's weights, not the mean of the search's evaluations. Returns the optimizer pre-hook's ``(args, kwargs)``
    with the closure wrapped (None: no closure).
    """
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # args[0]: the optimizer itself
    if not callable(closure):
        return None

    def first_call_counts() -> Any:
        try:
            return closure()
        finally:
            losses.frozen = True  # until the step's losses are flushed

    if "closure" in kwargs:
        return args, {**kwargs, "closure": first_call_counts}
    return (args[0], first_call_counts, *args[2:]), kwargs
