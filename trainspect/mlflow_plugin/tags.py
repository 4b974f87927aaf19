"""The provenance tags trainspect sets on MLflow runs (no MLflow import: the hook and the provider share them)."""

from __future__ import annotations

from trainspect import env

__all__ = ["context_tags", "env_captures", "TAG_VERSION", "TAG_CAPTURES"]

TAG_VERSION = "trainspect.version"
TAG_CAPTURES = "trainspect.captures"


def context_tags(captures: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Return the provenance tags: trainspect's version and what it captures (``tensors,rules,system,…``).

    Example:
        >>> context_tags(["tensors", "system"])["trainspect.captures"]
        'tensors,system'
    """
    from trainspect._version import __version__

    return {TAG_VERSION: __version__, TAG_CAPTURES: ",".join(captures)}


def env_captures() -> list[str]:
    """What a process started by ``trainspect run`` captures, from its environment."""
    captures = ["tensors"]
    if env.TRAINSPECT_PROFILE.get():
        captures += ["system", "framework"]
    return captures
