"""One NVML session: every call under one lock, an orderly shutdown, and error classification.

The sampling thread reads through :meth:`NvmlSession.call`; :meth:`NvmlSession.close` takes the same lock, so
NVML is never shut down while the thread is inside an NVML call, and no call reaches NVML after the shutdown
(it raises :class:`NvmlClosed`). NVML counts ``nvmlInit``/``nvmlShutdown`` pairs, so other users of NVML in the
process (PyTorch, another monitor) are not affected by this session's shutdown.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["NvmlSession", "NvmlClosed", "ErrorKind", "classify", "FailureCounter"]

logger = logging.getLogger(__name__)

# NVML return codes (nvml.h); pynvml's NVMLError carries one as ``.value``.
_UNINITIALIZED = 1
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16


class NvmlClosed(RuntimeError):
    """The session was shut down; nothing may call NVML any more."""


class ErrorKind(enum.Enum):
    """What an NVML error means for the metric that raised it."""

    UNSUPPORTED = "unsupported"  # the device or driver cannot give this metric: stop asking, quietly
    LOST = "lost"  # the device is gone (GPU is lost, reset required): stop the whole device, one warning
    NO_SAMPLES = "no_samples"  # nvmlDeviceGetSamples has nothing newer than the timestamp
    TRANSIENT = "transient"  # anything else: retried at the next sample


def classify(exc: BaseException) -> ErrorKind:
    """The kind of an exception raised by an NVML call (pynvml's ``NVMLError`` or any other)."""
    code = getattr(exc, "value", None)
    if code in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND) or isinstance(exc, (AttributeError, NotImplementedError)):
        return ErrorKind.UNSUPPORTED
    if code in (_GPU_IS_LOST, _RESET_REQUIRED, _UNINITIALIZED):
        return ErrorKind.LOST
    if code == _NOT_FOUND:
        return ErrorKind.NO_SAMPLES
    return ErrorKind.TRANSIENT


class NvmlSession:
    """``nvmlInit`` at construction, ``nvmlShutdown`` once at :meth:`close`, every call in between locked.

    Args:
        nvml: the ``pynvml`` module (or a stand-in with the same functions).

    Raises:
        Exception: whatever ``nvmlInit`` raises (nothing to shut down then).
    """

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._lock = threading.Lock()
        self._closed = False
        nvml.nvmlInit()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    def call(self, name: str, *args: Any) -> Any:
        """``pynvml.<name>(*args)`` under the session lock.

        Raises:
            NvmlClosed: the session was shut down.
            AttributeError: this pynvml has no such function (classified as unsupported).
        """
        fn: Callable[..., Any] = getattr(self.nvml, name)
        with self._lock:
            if self._closed:
                raise NvmlClosed("NVML was shut down")
            return fn(*args)

    def const(self, name: str, default: int) -> int:
        """A pynvml constant, or ``default`` when this pynvml lacks it."""
        return int(getattr(self.nvml, name, default))

    def close(self, wait_s: float = 5.0) -> None:
        """Shut NVML down once, after any call in progress returns (idempotent).

        A call that has not returned after ``wait_s`` (a hung driver) is not waited for longer: no further call
        is made, and NVML is left initialised rather than shut down under it.
        """
        if not self._lock.acquire(timeout=wait_s):
            self._closed = True
            logger.warning("trainspect: an NVML call did not return within %.0f s; NVML is left initialised", wait_s)
            return
        try:
            if self._closed:
                return
            self._closed = True
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # already shut down by someone else, or the driver went away
                pass
        finally:
            self._lock.release()


class FailureCounter:
    """Consecutive failures per key: a metric is given up after ``limit`` failures in a row.

    Example:
        >>> c = FailureCounter(limit=2)
        >>> c.failed("k"), c.failed("k")
        (False, True)
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._count: dict[Any, int] = {}

    def ok(self, key: Any) -> None:
        """A success resets the key's count."""
        self._count.pop(key, None)

    def failed(self, key: Any) -> bool:
        """Count one failure; ``True`` when the key just reached the limit."""
        n = self._count.get(key, 0) + 1
        self._count[key] = n
        return n == self.limit
