"""One line, not a page, when a hook closes on a full disk or an unwritable run directory.

Closing writes several files (the last steps, the worker manifest, the end marker, verdicts, the report, MLflow's
spool); on a full disk each of them fails with its own warning, some with a traceback. While a hook closes, the
warnings of trainspect's loggers that carry an ``OSError`` are held back and summed up in one line (the background
writer's own "capture disabled" line is the exception: it says when capture stopped). The block is also a close
under way for :data:`~trainspect.hooks.shutdown.CLOSERS`: a second stop signal does not cut it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from trainspect.hooks.shutdown import CLOSERS

__all__ = ["one_line_for_write_errors"]

log = logging.getLogger(__name__)

_PARTS = {  # logger name (last component) -> what it failed to write
    "run_writer": "the end marker",
    "collector": "the end marker",
    "_guard": "the end marker",
    "live": "the verdicts",
    "engine": "the verdicts",
}


def _os_error(record: logging.LogRecord) -> OSError | None:
    candidates = list(record.args) if isinstance(record.args, tuple) else []
    if record.exc_info and record.exc_info[1] is not None:
        candidates.append(record.exc_info[1])
    for value in candidates:
        if isinstance(value, OSError):
            return value
    return None


class _HoldWriteErrors(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.errors: list[tuple[str, OSError]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.endswith(".background"):
            return True  # "capture disabled after a write error" is the one line that says capture stopped
        exc = _os_error(record) if record.levelno >= logging.WARNING else None
        if exc is None:
            return True
        part = _PARTS.get(record.name.rsplit(".", 1)[-1])
        if part is None and isinstance(record.args, tuple) and record.args and isinstance(record.args[0], str):
            part = record.args[0]  # "the report", "MLflow logging"
        self.errors.append((part or record.name, exc))
        return False


@contextmanager
def one_line_for_write_errors(run_dir: str) -> Iterator[None]:
    """Hold back trainspect's write-error warnings inside the block, then log one line naming what was not written."""
    held = _HoldWriteErrors()
    loggers = [
        logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and (name == "trainspect" or name.startswith("trainspect."))
    ]
    for logger in loggers:
        logger.addFilter(held)
    try:
        with CLOSERS.closing(run_dir):
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(held)
        if held.errors:
            parts = list(dict.fromkeys(part for part, _ in held.errors))
            exc = held.errors[0][1]
            log.warning(
                "trainspect: could not finish writing the run in %s (%s: %s); not written: %s; what was written "
                "before stays readable",
                run_dir,
                type(exc).__name__,
                exc.strerror or exc,
                ", ".join(parts),
            )
