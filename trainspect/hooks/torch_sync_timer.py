"""The backward pass's wait for the other ranks: from the rank's last local gradient to the end of ``backward()``.

Under synchronous data parallelism (DDP, DeepSpeed ZeRO-1/2, Horovod's ``DistributedOptimizer``) every rank's
``backward()`` returns only once the gradient all-reduce of every rank is done, so step times are equal and hide the
slow rank. The rank's own work ends when its last gradient is accumulated locally (then the last all-reduce is
launched); what follows until ``backward()`` returns is the wait for the others (and the last bucket's transfer).
:class:`SyncTimer` records that wait as a ``backward_sync`` span of the framework metrics (docs/profiler.md), so a
rank's compute time is its step time less the wait.

How it stays cheap (a few Python calls per backward pass, no collective):

* The first backward pass it sees walks the autograd graph from the backpropagated tensors to its leaves
  (``AccumulateGrad`` nodes) and puts a post-accumulate-grad hook on each, for that pass only: they note the order
  in which the leaves' gradients arrive.
* After that pass only the last :attr:`SyncTimer.keep` leaves to arrive keep a hook, which notes the time; at the end
  of each ``backward()`` (the backward tap, :mod:`trainspect.hooks.torch_backward`) the span from the latest of
  those times to now is recorded, with the open step's global step.
* A backward pass in which none of the watched leaves got a gradient (another model, another loss) makes the next one
  learn again, at most :attr:`SyncTimer.max_learns` times; the watched leaves of every learned graph are kept.

The times are host times, as all framework spans: on CUDA with NCCL the host does not wait in ``backward()``
(DDP's final wait only orders streams), so there the span measures the host side only.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import torch

from trainspect import env
from trainspect.hooks.framework_metrics import FrameworkRecorder
from trainspect.hooks.torch_backward import LossTap, hold

__all__ = ["SyncTimer"]

log = logging.getLogger(__name__)


def graph_leaves(tensors: Any) -> list[torch.Tensor]:
    """The leaves whose gradients a backward pass from ``tensors`` accumulates (its ``AccumulateGrad`` nodes)."""
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors or ())
    todo: list[Any] = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen: set[int] = set()
    leaves: list[torch.Tensor] = []
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
        todo.extend(fn for fn, _ in node.next_functions)
    return leaves


class SyncTimer:
    """Records, per backward pass, the wait from the rank's last local gradient to the end of ``backward()``.

    Args:
        recorder: the framework recorder the ``backward_sync`` spans go to.
        keep: leaves watched per learned graph (the last ones whose gradients arrive).
        max_learns: how many times a graph is learned before the timer stops learning.

    Example:
        >>> import tempfile
        >>> from trainspect.profiler import FrameworkMetricsReader
        >>> run = tempfile.mkdtemp(); rec = FrameworkRecorder(run, "worker_0"); rec.start()
        >>> timer = SyncTimer(rec); timer.start()
        >>> w = torch.ones(2, requires_grad=True); (w * 2).sum().backward()
        >>> timer.close(); rec.close()
        >>> FrameworkMetricsReader(run).read_tables()["worker_0"].spans_df()["kind"].tolist()
        ['backward_sync']
    """

    def __init__(self, recorder: FrameworkRecorder, keep: int = 2, max_learns: int = 4) -> None:
        self.recorder = recorder
        self.keep = keep
        self.max_learns = max_learns
        self._watched: dict[int, Any] = {}  # id(leaf) -> hook handle
        self._last = 0.0
        self._learning: list[torch.Tensor] | None = None
        self._learn_handles: list[Any] = []
        self._arrivals: list[int] = []
        self._learns = 0
        self._need_learn = True
        self._release: Any = None
        self._tap: LossTap | None = None

    def start(self) -> None:
        """Listen to backward passes (idempotent)."""
        if self._release is None:
            self._tap, self._release = hold()
            self._tap.add_timer(self)

    def close(self) -> None:
        """Stop listening and remove every gradient hook (idempotent)."""
        if self._tap is not None:
            self._tap.remove_timer(self)
        for handle in [*self._watched.values(), *self._learn_handles]:
            handle.remove()
        self._watched.clear()
        self._learn_handles.clear()
        self._learning = None
        if self._release is not None:
            self._release()
            self._release = None

    # --- called by the backward tap --------------------------------------------------------------------------
    def backward_start(self, tensors: Any) -> None:
        """A backward pass from ``tensors`` begins (learns the graph's last leaves when due)."""
        self._last = 0.0
        if self._need_learn:
            self._guard(self._learn, tensors)

    def backward_end(self) -> None:
        """The backward pass returned: record the wait since the last watched gradient."""
        end, last = time.time(), self._last
        if self._learning is not None:
            self._guard(self._finish_learning)
        if last > 0.0:
            self._guard(self._record, last, end)
        elif self._learns < self.max_learns:
            self._need_learn = True

    # --- gradient hooks ----------------------------------------------------------------------------------------
    def _arrived(self, _leaf: torch.Tensor) -> None:
        self._last = time.time()

    def _arrived_learning(self, index: int, _leaf: torch.Tensor) -> None:
        self._last = time.time()
        self._arrivals.append(index)

    # --- internals ---------------------------------------------------------------------------------------------
    def _learn(self, tensors: Any) -> None:
        self._need_learn = False
        leaves = graph_leaves(tensors)
        if not leaves:
            return
        self._learns += 1
        self._learning, self._arrivals = leaves, []
        self._learn_handles = [
            leaf.register_post_accumulate_grad_hook(functools.partial(self._arrived_learning, i))
            for i, leaf in enumerate(leaves)
        ]

    def _finish_learning(self) -> None:
        leaves, self._learning = self._learning or [], None
        for handle in self._learn_handles:
            handle.remove()
        self._learn_handles = []
        last: list[int] = []
        for index in reversed(self._arrivals):  # the last distinct leaves to arrive, latest first
            if index not in last:
                last.append(index)
            if len(last) == self.keep:
                break
        for index in last:
            leaf = leaves[index]
            if id(leaf) not in self._watched:
                self._watched[id(leaf)] = leaf.register_post_accumulate_grad_hook(self._arrived)
        self._arrivals = []

    def _record(self, last: float, end: float) -> None:
        self.recorder.record_span("backward_sync", last, end, self.recorder.open_step)

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            if env.TRAINSPECT_TESTING.get():
                raise
            log.warning(
                "trainspect: timing the backward pass's synchronisation failed (%s: %s); it is no longer "
                "recorded, training goes on",
                type(exc).__name__,
                exc,
            )
            self.close()
