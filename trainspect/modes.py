"""Training modes, numbered as smdebug's ``ModeKeys`` so that its run directories read back unchanged."""

from __future__ import annotations

import enum

__all__ = ["ModeKeys", "TRAIN", "EVAL", "PREDICT", "GLOBAL", "parse_mode"]


class ModeKeys(enum.IntEnum):
    """The mode a step belongs to; each mode counts its own steps (the *mode step*)."""

    TRAIN = 1
    EVAL = 2
    PREDICT = 3
    GLOBAL = 4


TRAIN = ModeKeys.TRAIN
EVAL = ModeKeys.EVAL
PREDICT = ModeKeys.PREDICT
GLOBAL = ModeKeys.GLOBAL


def parse_mode(value: ModeKeys | str | int) -> ModeKeys:
    """Turn ``"train"``, ``"ModeKeys.EVAL"``, ``2`` or a ``ModeKeys`` into a ``ModeKeys``.

    Args:
        value: the mode in any of its spellings.

    Returns:
        The mode.

    Raises:
        ValueError: the value names no mode; the message lists the valid ones.
    """
    if isinstance(value, ModeKeys):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return ModeKeys(value)
        except ValueError:
            pass
    if isinstance(value, str):
        key = value.strip().upper().rsplit(".", 1)[-1]
        if key in ModeKeys.__members__:
            return ModeKeys[key]
        if key.isdigit():
            return parse_mode(int(key))
    raise ValueError(f"mode: {value!r} is not a mode; allowed: {', '.join(m.name for m in ModeKeys)}")
