"""Loaded by every Python process that ``trainspect run`` starts (this folder is put first on PYTHONPATH).

It turns on :func:`trainspect.autolog` when ``TRAINSPECT_RUN_ACTIVE=1``, then runs the ``sitecustomize`` that
would have run without it, if any.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == _here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_trainspect_chained_sitecustomize", candidate)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _start() -> None:
    try:
        from trainspect import env

        if env.TRAINSPECT_RUN_ACTIVE.get() and not env.TRAINSPECT_DISABLE.get():
            import trainspect

            trainspect.autolog()
    except Exception as exc:  # instrumentation must never stop the user's script from starting
        logging.getLogger("trainspect").warning("trainspect: autolog could not start: %s", exc)


_chain()
_start()
