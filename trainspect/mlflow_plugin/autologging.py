"""``trainspect.mlflow_plugin.autolog()``: trainspect as an MLflow autologging integration.

Built the way MLflow's own integrations are: ``@autologging_integration("trainspect")`` stores the configuration
(``disable``, ``silent``), and ``safe_patch`` installs one patch on ``mlflow.end_run`` so that the trainspect hook
closes, and its verdicts, summary metrics and report reach the MLflow run, before the run ends. The instrumentation
itself is trainspect's zero-script-change autolog (``trainspect.autolog``, in ``trainspect/hooks/zcc.py``); this
module patches no framework. Usable beside ``mlflow.autolog()`` / ``mlflow.pytorch.autolog()``.
"""

from __future__ import annotations

import logging
from typing import Any

import mlflow
from mlflow.utils.autologging_utils import autologging_integration, safe_patch

__all__ = ["autolog", "FLAVOR_NAME"]

FLAVOR_NAME = "trainspect"

log = logging.getLogger(__name__)


class _Closer:
    """Holds the AutoLogger of the last ``autolog()`` call; closing it flushes trainspect into the MLflow run."""

    def __init__(self) -> None:
        self.logger: Any = None

    def close(self) -> None:
        logger, self.logger = self.logger, None
        if logger is not None:
            logger.close()

    def patch(self, original: Any, *args: Any, **kwargs: Any) -> Any:
        self.close()
        return original(*args, **kwargs)


_CLOSER = _Closer()


@autologging_integration(FLAVOR_NAME)
def autolog(
    out_dir: str | None = None,
    log_run_dir: bool = False,
    disable: bool = False,
    silent: bool = False,
    **hook_kwargs: Any,
) -> None:
    """Instrument PyTorch training in this process and log it to the active MLflow run.

    Args:
        out_dir: the run directory (default: ``TRAINSPECT_OUT_DIR``, else ``runs/run-<time>``).
        log_run_dir: also upload the run directory as artifacts when the run ends.
        disable: turn trainspect's autologging off (closes the hook and removes the patches).
        silent: suppress MLflow's autologging event logs and warnings.
        **hook_kwargs: further ``trainspect.torch.Hook`` arguments (``rules=``, ``profiler_config=`` …).
    """
    from trainspect.hooks.zcc import autolog
    from trainspect.smdebug_compat import install

    _CLOSER.close()
    if disable:
        return
    hook_kwargs.setdefault("mlflow_run", {"run": None, "log_run_dir": log_run_dir})
    _CLOSER.logger = autolog(out_dir, smdebug_installer=install, **hook_kwargs)
    safe_patch(FLAVOR_NAME, mlflow.tracking.fluent, "end_run", _CLOSER.patch)
    safe_patch(FLAVOR_NAME, mlflow, "end_run", _CLOSER.patch)
