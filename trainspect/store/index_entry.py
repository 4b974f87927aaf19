"""Where one tensor of one step of one worker is stored: :class:`Entry` (the Trial's index holds one per tensor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trainspect.shard import Shard

__all__ = ["Entry", "is_float_dtype"]

_FLOAT_DTYPES: dict[str, bool] = {}


@dataclass(slots=True)
class Entry:
    """Where one tensor of one step of one worker is stored, and its saved reductions.

    A sharded tensor's entry is one worker's piece: ``shard`` says where it sits in the full tensor, ``partials``
    holds the piece's partial statistics (:data:`trainspect.shard.PARTIAL_KEYS`).
    """

    file: str | None
    offset: int
    length: int
    dtype: str | None
    shape: tuple[int, ...] | None
    reductions: dict[str, Any] | None
    codec: int = 0  # 0: trainspect raw record, 1: smdebug TFRecord event
    inline: Any = None  # a one-element value stored in the index entry itself
    shard: Shard | None = None
    partials: dict[str, float] | None = None

    @property
    def has_value(self) -> bool:
        """Whether the raw value was saved (in the data file or inline)."""
        return self.file is not None or self.inline is not None


def is_float_dtype(text: str) -> bool:
    """Whether ``text`` names a floating-point NumPy dtype (remembered per text).

    Example:
        >>> is_float_dtype("<f4"), is_float_dtype("<i8"), is_float_dtype("nonsense")
        (True, False, False)
    """
    known = _FLOAT_DTYPES.get(text)
    if known is None:
        try:
            known = np.dtype(text).kind == "f"
        except (TypeError, ValueError):
            known = False
        _FLOAT_DTYPES[text] = known
    return known
