"""Older name of :mod:`trainspect.rules.trial_feed`, whose ``TrialSource`` is now :class:`TrialFeed`.

Renamed so that "source" names only the store's readers (``trainspect.store.source``); kept for imports.
"""

from __future__ import annotations

from trainspect.rules.trial_feed import (
    Needs,
    StepAssembler,
    TrialFeed,
    build_step,
    note_damage,
    reduce_series,
    roles_for,
    trial_problems,
)

TrialSource = TrialFeed
"""Older name of :class:`TrialFeed`."""

__all__ = [
    "TrialSource", "TrialFeed", "Needs", "roles_for", "reduce_series", "build_step", "StepAssembler", "note_damage",
    "trial_problems",
]  # fmt: skip
