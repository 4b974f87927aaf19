"""MLflow ``mlflow.run_context_provider`` plugin: tags runs started while trainspect is active.

Registered in ``pyproject.toml`` under ``[project.entry-points."mlflow.run_context_provider"]``; MLflow calls
:meth:`TrainspectRunContextProvider.in_context` at every ``mlflow.start_run()`` and merges :meth:`tags` into the
new run. trainspect is active in a process started by ``trainspect run`` (``TRAINSPECT_RUN_ACTIVE``) or forced on
with ``TRAINSPECT_MLFLOW=1``; a hook that attaches to a run sets the same tags itself (:func:`context_tags`).
"""

from __future__ import annotations

from mlflow.tracking.context.abstract_context import RunContextProvider

from trainspect import env

__all__ = ["TrainspectRunContextProvider", "context_tags", "TAG_VERSION", "TAG_CAPTURES"]

TAG_VERSION = "trainspect.version"
TAG_CAPTURES = "trainspect.captures"


def context_tags(captures: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Return the provenance tags: trainspect's version and what it captures (``tensors,rules,system,…``).

    Example:
        >>> context_tags(["tensors", "system"])["trainspect.captures"]
        'tensors,system'
    """
    from trainspect import __version__

    return {TAG_VERSION: __version__, TAG_CAPTURES: ",".join(captures)}


def _env_captures() -> list[str]:
    captures = ["tensors"]
    if env.TRAINSPECT_PROFILE.get():
        captures += ["system", "framework"]
    return captures


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
            return context_tags(_env_captures())
        except ValueError:
            return context_tags(["tensors"])
