"""A command whose reader goes away (``trainspect rules DIR | head -1``) ends quietly, not with a traceback."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["quiet_broken_pipe", "EXIT_BROKEN_PIPE"]

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader went away


def quiet_broken_pipe(command: Callable[[], int]) -> int:
    """Run a command; when its reader goes away (``trainspect rules DIR | head -1``), end quietly.

    Python's recipe (docs "Note on SIGPIPE"): stdout is pointed at devnull, so that the flush at exit does not raise
    again, and the command ends with the shell's status for SIGPIPE instead of a traceback.
    """
    try:
        code = command()
        sys.stdout.flush()  # inside the guard: a reader that left shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
