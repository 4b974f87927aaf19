"""``load_entry_points``: the one loader of trainspect's plugins (rules, report sections, TensorBoard cards).

Plugins are the objects that installed distributions register under an entry-point group of
:mod:`importlib.metadata` (``trainspect.rules``, ``trainspect.report_sections``, ``trainspect.tb_cards``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from importlib import metadata
from typing import Any

__all__ = ["load_entry_points"]


def load_entry_points(group: str, register: Callable[[Any], object], what: str) -> list[str]:
    """Load each plugin of an entry-point group and hand it to ``register``; return the names of those that loaded.

    The policy, the same for every kind of plugin: a plugin whose import (``EntryPoint.load``) or registration
    (``register`` raising, e.g. on a taken name) fails is skipped with one ``RuntimeWarning`` naming the plugin,
    its group and the error; the other plugins still load. When the group cannot be listed at all, one warning
    says so and nothing loads. Nothing raises.

    Args:
        group: the entry-point group.
        register: called with what each entry point loads (it adapts that to its registry).
        what: the kind of plugin, for the warning (``"rule"``, ``"report section"``, ``"card"``).

    Example:
        >>> load_entry_points("trainspect.no_such_group", print, "example")
        []
    """
    try:
        found = list(metadata.entry_points(group=group))
    except Exception as exc:  # a broken distribution's metadata: no plugin of the group
        warnings.warn(
            f"trainspect: could not list the {what} plugins of {group}: {type(exc).__name__}: {exc}",
            RuntimeWarning,
            stacklevel=2,
        )
        return []
    loaded = []
    for ep in found:
        name = str(getattr(ep, "name", ep))
        try:
            register(ep.load())
        except Exception as exc:  # a broken plugin is skipped, never a crash
            warnings.warn(
                f"trainspect: {what} plugin {name!r} ({group}) failed to load and was skipped: "
                f"{type(exc).__name__}: {exc}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        loaded.append(name)
    return loaded
