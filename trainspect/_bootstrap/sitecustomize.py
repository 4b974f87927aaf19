"""Loaded by every Python process that ``trainspect run`` starts (this folder is put first on PYTHONPATH).

When ``TRAINSPECT_RUN_ACTIVE=1`` it turns on :func:`trainspect.autolog` once the process imports a framework
(torch or keras: a process that never does has nothing to record), then runs the ``sitecustomize`` that would have
run without it, if any.

``trainspect run`` starts every Python process of the job with this file: a launcher's helpers (Ray's dashboard,
log monitor and worker set-up processes, ``accelerate``'s or Lightning's launcher, a shell script's ``python -c``)
never train. Calling ``autolog()`` at their start imported torch and built a hook in each (seconds of CPU apiece:
Ray Train jobs started twice as slowly under ``trainspect run``). ``smdebug`` imports are answered from the start,
as before; the hook starts when the outermost import of torch or keras ends (``import lightning`` imports torch
first: the hook starts once Lightning is loaded), before the script can build a model.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from typing import Any

_here = os.path.dirname(os.path.abspath(__file__))
_FRAMEWORKS = ("torch", "keras")  # the imports that start autolog (each may import the other)


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


def _autolog() -> None:
    try:
        import trainspect

        trainspect.autolog()
    except Exception as exc:  # instrumentation must never stop the user's script from starting
        logging.getLogger("trainspect").warning("trainspect: autolog could not start: %s", exc)


def _start_autolog_once(watcher: Any) -> None:
    """The outermost import of torch or keras ended: start autolog (once; the watcher leaves ``sys.meta_path``)."""
    if watcher in sys.meta_path:
        sys.meta_path.remove(watcher)
        _autolog()


def _start() -> None:
    try:
        from trainspect import env

        if not env.TRAINSPECT_RUN_ACTIVE.get() or env.TRAINSPECT_DISABLE.get():
            return
        if any(name in sys.modules for name in _FRAMEWORKS):  # a chained sitecustomize imported one
            _autolog()
            return
        from trainspect.hooks.import_watch import ImportWatcher
        from trainspect.smdebug_compat import install

        install()  # `import smdebug` is answered before the script imports a framework, as autolog() does
        watcher = ImportWatcher(_FRAMEWORKS, lambda _module: _start_autolog_once(watcher))
        sys.meta_path.insert(0, watcher)
    except Exception as exc:  # instrumentation must never stop the user's script from starting
        logging.getLogger("trainspect").warning("trainspect: autolog could not start: %s", exc)


_chain()
_start()
