"""MLflow ``mlflow.run_context_provider`` plugin: tags runs started while trainspect is active.

Registered in ``pyproject.toml`` under ``[project.entry-points."mlflow.run_context_provider"]``; MLflow calls
:meth:`TrainspectRunContextProvider.in_context` at every ``mlflow.start_run()`` and merges :meth:`tags` into the
new run. trainspect is active in a process started by ``trainspect run`` (``TRAINSPECT_RUN_ACTIVE``) or forced on
with ``TRAINSPECT_MLFLOW=1``; a hook that attaches to a run sets the same tags itself
(:func:`~trainspect.mlflow_plugin.tags.context_tags`).

This module is MLflow's entry point and nothing else: MLflow loads it while ``import mlflow`` runs (its registry
of context providers is built then). trainspect's own modules never import it, so it is never half-initialised
when MLflow asks for the class; what the hook shares with it lives in :mod:`trainspect.mlflow_plugin.tags`.
"""

from __future__ import annotations

from mlflow.tracking.context.abstract_context import RunContextProvider

from trainspect import env
from trainspect.mlflow_plugin.tags import TAG_CAPTURES, TAG_VERSION, context_tags, env_captures

__all__ = ["TrainspectRunContextProvider", "context_tags", "TAG_VERSION", "TAG_CAPTURES"]


class TrainspectRunContextProvider(RunContextProvider):  # type: ignore[misc]
    """Adds ``trainspect.version`` and ``trainspect.captures`` to runs started while trainspect is active.

    Example:
        >>> provider = TrainspectRunContextProvider()
        >>> isinstance(provider.in_context(), bool)
        True
    """

    def in_context(self) -> bool:
        """Whether this process runs under trainspect (``trainspect run``, or ``TRAINSPECT_MLFLOW=1``)."""
        try:
            if env.TRAINSPECT_DISABLE.get():
                return False
            return bool(env.TRAINSPECT_RUN_ACTIVE.get()) or env.TRAINSPECT_MLFLOW.get() == "1"
        except ValueError:  # a malformed variable must not break mlflow.start_run()
            return False

    def tags(self) -> dict[str, str]:
        """The provenance tags for the new run."""
        try:
            return context_tags(env_captures())
        except ValueError:
            return context_tags(["tensors"])
