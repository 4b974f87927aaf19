"""When a job began: the process start for a script's first hook, the hook's start in a notebook or for a later run.

A script's job starts with its process (imports, data preparation and model building are its initialization, as
SageMaker counts them from the container's start). A notebook kernel may have been idle for hours before the hook,
and a second hook in one process (the demo's fixed run, a sweep in one script) would count the earlier runs as
its initialization: those jobs start when their hook does. The process start stays recorded as its own figure.
"""

from __future__ import annotations

import sys
import threading

__all__ = ["job_start", "interactive"]

_lock = threading.Lock()
_process_claimed: list[float] = []  # the process-wide fact "a job of this process already began", and when


def interactive() -> bool:
    """Whether this process is an interactive session (a Jupyter/IPython kernel, ``python -i``, the REPL)."""
    return "ipykernel" in sys.modules or hasattr(sys, "ps1") or bool(sys.flags.interactive)


def job_start(process_start: float, hook_start: float) -> tuple[float, str]:
    """When the job began, and why: the process start for a script's first job, else the hook's start.

    Returns ``(process_start, "process")``, ``(hook_start, "interactive")`` or
    ``(hook_start, "later run in the process")``.

    Example:
        >>> import time
        >>> now = time.time()
        >>> job_start(now - 5, now)[1] in ("process", "interactive", "later run in the process")
        True
    """
    with _lock:
        first = not _process_claimed
        _process_claimed.append(hook_start)
    if interactive():
        return hook_start, "interactive"
    if not first:
        return hook_start, "later run in the process"
    return min(process_start, hook_start), "process"
