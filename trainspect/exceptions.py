"""Errors trainspect raises, with smdebug's names where smdebug has one."""

from __future__ import annotations

__all__ = [
    "TrainspectError",
    "SmdebugNotSupported",
    "ConfigError",
    "TrainingStopped",
    "TensorUnavailable",
    "TensorUnavailableForStep",
    "StepUnavailable",
    "StepNotYetAvailable",
    "NoMoreData",
    "RunDirectoryInUse",
    "NotARunDirectory",
    "DamagedFile",
    "mode_name",
]


class TrainspectError(Exception):
    """Base class of trainspect's own errors."""


class ConfigError(TrainspectError, ValueError):
    """A configuration value is invalid; the message names the key, the value and what is allowed."""


class TrainingStopped(TrainspectError):
    """Raised into the training loop, at a step boundary, by a ``StopTraining`` action the user asked for."""

    def __init__(self, rule: str, step: int | None, message: str = "") -> None:
        self.rule = rule
        self.step = step
        text = f"training stopped by trainspect: rule {rule} found issues"
        if step is not None:
            text += f" at step {step}"
        if message:
            text += f": {message}"
        super().__init__(text)


class RunDirectoryInUse(TrainspectError):
    """Another job already writes into this run directory."""


class NotARunDirectory(TrainspectError, ValueError):
    """The path is not a run directory: a regular file, or a directory that holds no run (nothing was recorded)."""


class DamagedFile(TrainspectError, ValueError):
    """A file of a run directory cannot be used (unreadable, not JSON, or JSON of the wrong shape); names the file."""


class TensorUnavailable(TrainspectError, KeyError):
    """The tensor was never saved."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"tensor {name!r} was never saved")

    def __str__(self) -> str:
        return str(self.args[0])


def mode_name(mode: object) -> str:
    """A mode's name for messages (``GLOBAL``, never ``4``), whatever spelling it comes in.

    Example:
        >>> mode_name(4), mode_name("eval"), mode_name(None)
        ('GLOBAL', 'EVAL', 'any')
    """
    if mode is None:
        return "any"
    from trainspect.modes import parse_mode

    try:
        return parse_mode(mode).name  # type: ignore[arg-type]
    except (ValueError, TypeError, KeyError):
        return str(mode)


class TensorUnavailableForStep(TrainspectError, KeyError):
    """The tensor exists, but not at this step (and never will).

    ``detail`` says why, when there is more to say (a sharded tensor whose pieces do not make the full tensor).
    """

    def __init__(
        self, name: str, step: int, mode: object = None, has_reductions: bool = False, detail: str = ""
    ) -> None:
        self.name, self.step, self.mode, self.has_reductions, self.detail = name, step, mode, has_reductions, detail
        text = f"tensor {name!r} is not available at step {step}"
        if mode is not None:
            text += f" (mode {mode_name(mode)})"
        if has_reductions:
            text += "; only reductions were saved: use reduction_value()"
        if detail:
            text += f"; {detail}"
        super().__init__(text)

    def __str__(self) -> str:
        return str(self.args[0])


class StepUnavailable(TrainspectError):
    """The step was skipped or not saved, and never will be."""

    def __init__(self, step: int, mode: object = None) -> None:
        self.step, self.mode = step, mode
        super().__init__(f"step {step} is not available (mode {mode_name(mode)})")


class StepNotYetAvailable(TrainspectError):
    """The step has not been written yet; it may appear later."""

    def __init__(self, step: int, mode: object = None) -> None:
        self.step, self.mode = step, mode
        super().__init__(f"step {step} is not yet available (mode {mode_name(mode)})")


class NoMoreData(TrainspectError):
    """The job ended and the step lies beyond its last step."""

    def __init__(self, step: int, mode: object = None, last_step: int | None = None) -> None:
        self.step, self.mode, self.last_step = step, mode, last_step
        super().__init__(f"no more data: the job ended at step {last_step}, step {step} will never exist")


class SmdebugNotSupported(NotImplementedError):
    """An smdebug call that trainspect does not implement (the message names the nearest equivalent)."""
