"""What the rules read of a trial: a :class:`~trainspect.store.trial.Trial`, or a trial of the smdebug API.

The rules layer types its trials with these protocols rather than importing the store's classes, so any object
with these methods can be evaluated (smdebug-style trials, test doubles). The ``worker`` keywords are only passed
for runs with several workers. Optional extras that only a
trainspect Trial has (``path``, ``problems``, ``last_complete_step``, ``step_wall_time``, ``incomplete_steps``,
``loaded_all_steps``) are read with ``getattr`` and a default.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["TensorView", "TrialView", "TrialLike", "open_trial"]


class TensorView(Protocol):
    """One tensor's series, as :class:`~trainspect.store.tensor.Tensor` gives it."""

    def steps(self) -> Iterable[int]:
        """The global steps at which the tensor was saved."""
        ...

    def values(self, *, mode: Any = ..., worker: Any = ...) -> Mapping[int, np.ndarray]:
        """``{step: raw value}`` for the steps with a raw value (of one worker, with ``worker``)."""
        ...

    def reduction_values(self, step: int, /, *, worker: Any = ...) -> Mapping[tuple[str, bool], float]:
        """The reductions saved at a step, by ``(name, absolute)``."""
        ...

    def reduction_value(
        self,
        step: int,
        reduction_name: str,
        /,
        *,
        mode: Any = ...,
        abs: bool = ...,  # noqa: A002
        worker: Any = ...,
    ) -> float:
        """One reduction at a step: saved, or computed from the raw value."""
        ...


class TrialView(Protocol):
    """A trial's steps, tensors and collections."""

    def tensor_names(self, *, collection: Any = ...) -> Iterable[str]:
        """The names of the saved tensors (of one collection)."""
        ...

    def steps(self) -> Sequence[int]:
        """The global steps saved."""
        ...

    def mode(self, global_step: int, /) -> Any:
        """The mode of a global step."""
        ...

    def mode_step(self, global_step: int, /) -> int:
        """The step number within its mode of a global step."""
        ...

    def workers(self) -> Iterable[str]:
        """The worker names."""
        ...

    def tensor(self, name: str, /) -> TensorView:
        """One tensor."""
        ...

    def collections(self) -> Mapping[str, Any]:
        """The collections, by name."""
        ...

    def refresh(self) -> None:
        """Read what the job wrote since the last read."""
        ...


TrialLike = TrialView | str | os.PathLike[str]
"""A trial, or the path of a run directory to open as one."""


def open_trial(trial: TrialLike) -> TrialView:
    """Return a Trial for a path (or the Trial itself)."""
    if isinstance(trial, (str, os.PathLike)):
        from trainspect.store.trial import create_trial

        return create_trial(os.fspath(trial))
    return trial
