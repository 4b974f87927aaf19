"""A sharded tensor's pieces in a Trial: their index fields read and checked, one piece chosen per region, assembly.

Every rank records its own piece of a sharded tensor (:class:`~trainspect.shard.Shard`); the Trial makes the full
tensor of a step from one piece per region of it (a non-replica holder first, a replica standing in for a missing one),
and its reductions from those pieces' partial statistics. Framework-free: NumPy only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainspect.reductions import combine_partials
from trainspect.shard import PARTIAL_KEYS, Shard
from trainspect.store.index import Entry

__all__ = [
    "Pieces",
    "parse_shard",
    "parse_partials",
    "reference_shard",
    "select_pieces",
    "assemble",
    "full_partials",
    "HOW_TO_READ",
]

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
HOW_TO_READ = (
    'value(step, worker="worker_N") returns one worker\'s piece, and the hook\'s include_workers="all" records '
    "every rank's piece"
)
"""The end of every message about a full tensor that cannot be made."""


def parse_shard(doc: Any, shape: tuple[int, ...] | None) -> Shard:
    """Read an index entry's ``"sh"`` object, checked against the piece's shape (when saved).

    Raises:
        ValueError: malformed, or the piece does not fit in the global shape.
    """
    if not isinstance(doc, dict):
        raise ValueError(f"not an object: {doc!r}")
    shard = Shard.from_dict(doc)
    glob, offsets = shard.global_shape, shard.offsets
    if min(glob, default=0) < 0 or min(offsets, default=0) < 0:
        raise ValueError(f"negative sizes or offsets in {doc!r}")
    if shard.layout == "block":
        fits = len(offsets) == len(glob) and (shape is None or _block_fits(offsets, shape, glob))
    elif shard.layout == "flat":
        fits = len(offsets) == 1 and (shape is None or offsets[0] + math.prod(shape) <= math.prod(glob))
    else:
        fits = shape is None or shape == glob
    if not fits:
        raise ValueError(f"a piece of shape {shape} does not fit {doc!r}")
    return shard


def _block_fits(offsets: tuple[int, ...], shape: tuple[int, ...], glob: tuple[int, ...]) -> bool:
    return len(shape) == len(glob) and all(o + s <= g for o, s, g in zip(offsets, shape, glob, strict=True))


def _number(value: Any) -> float:
    if isinstance(value, str):
        return _NONFINITE[value]  # KeyError: not a number
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def parse_partials(doc: Any, shape: tuple[int, ...] | None) -> dict[str, float]:
    """Read an index entry's ``"pt"`` object (keys of :data:`~trainspect.shard.PARTIAL_KEYS`; others are ignored).

    Raises:
        ValueError: not an object of numbers, no valid ``count``, or a ``count`` that is not the piece's size.
    """
    if not isinstance(doc, dict):
        raise ValueError(f"not an object: {doc!r}")
    try:
        out = {key: _number(doc[key]) for key in PARTIAL_KEYS if key in doc}
    except KeyError as exc:
        raise ValueError(f"not a number: {exc}") from None
    count = out.get("count", -1.0)
    if not (count >= 0 and count == int(count)) or (shape is not None and count != math.prod(shape)):
        raise ValueError(f"count {doc.get('count')!r} is not the size of a piece of shape {shape}")
    return out


@dataclass(frozen=True)
class Pieces:
    """The pieces of one sharded tensor at one step, one chosen per region of the full tensor.

    Attributes:
        shard: the description the pieces share (global shape, layout, placement), from the first non-replica piece.
        chosen: ``(worker, entry)`` of the pieces the full tensor is made of.
        present: the workers whose piece fits ``shard`` (replicas included).
        unusable: the workers whose entry does not fit (no shard description, another global shape or layout).
        absent: the run's workers that recorded nothing of this tensor at this step.
        covered: the elements the chosen pieces hold (None: a piece's size is not known).
    """

    shard: Shard
    chosen: tuple[tuple[str, Entry], ...]
    present: tuple[str, ...]
    unusable: tuple[str, ...]
    absent: tuple[str, ...]
    covered: int | None

    @property
    def total(self) -> int:
        """The full tensor's number of elements."""
        return math.prod(self.shard.global_shape)

    @property
    def complete(self) -> bool:
        """Whether the chosen pieces make the full tensor (a partial sum needs every worker's piece)."""
        if self.shard.layout == "partial_sum":
            return bool(self.chosen) and not self.absent and not self.unusable
        return self.covered == self.total

    def problem(self) -> str:
        """Why the pieces do not make the full tensor, and how to read what there is."""
        where = self.shard.placement or f"{self.shard.layout} layout"
        text = f"it is sharded ({where}, global shape {self.shard.global_shape}) and its pieces do not make the full "
        if self.shard.layout == "partial_sum":
            text += f"tensor: it is the sum of every rank's piece, present from {', '.join(self.present)}"
        else:
            held = "an unknown number" if self.covered is None else str(self.covered)
            text += f"tensor: the pieces of {', '.join(self.present)} hold {held} of its {self.total} elements"
        if self.absent:
            text += f"; no piece at this step from {', '.join(self.absent)}"
        if self.unusable:
            text += f"; the entries of {', '.join(self.unusable)} do not describe a piece of it"
        return f"{text}; {HOW_TO_READ}"


def _size(entry: Entry) -> int | None:
    if entry.shape is not None:
        return math.prod(entry.shape)
    return None if entry.partials is None else int(entry.partials["count"])


def _region(entry: Entry, shard: Shard) -> tuple[Any, ...]:
    if shard.layout == "block":
        return (shard.offsets, entry.shape if entry.shape is not None else _size(entry))
    return (shard.offsets, _size(entry))


def reference_shard(per_worker: Mapping[str, Entry]) -> Shard | None:
    """The description the pieces of one step share: the first non-replica piece's (else the first piece's)."""
    shards = [per_worker[w].shard for w in sorted(per_worker)]
    return next((s for s in shards if s is not None and not s.replica), None) or next(
        (s for s in shards if s is not None), None
    )


def select_pieces(per_worker: Mapping[str, Entry], run_workers: Iterable[str]) -> Pieces | None:
    """Choose the pieces that make the full tensor of one step (None: no entry describes a piece).

    Args:
        per_worker: the step's entries of the tensor, by worker.
        run_workers: every worker of the run (those without an entry are named as absent).
    """
    ref = reference_shard(per_worker)
    if ref is None:
        return None
    chosen: dict[Any, tuple[str, Entry]] = {}
    present, unusable = [], []
    for worker in sorted(per_worker):
        entry = per_worker[worker]
        shard = entry.shard
        if shard is None or shard.global_shape != ref.global_shape or shard.layout != ref.layout:
            unusable.append(worker)
            continue
        present.append(worker)
        if ref.layout == "partial_sum":
            if not shard.replica:
                chosen[worker] = (worker, entry)
            continue
        region = _region(entry, shard)
        held = chosen.get(region)
        if held is None or (held[1].shard is not None and held[1].shard.replica and not shard.replica):
            chosen[region] = (worker, entry)
    sizes = [_size(entry) for _, entry in chosen.values()]
    covered = None if None in sizes else sum(s or 0 for s in sizes)
    absent = tuple(sorted(set(run_workers) - set(per_worker)))
    return Pieces(ref, tuple(chosen.values()), tuple(present), tuple(unusable), absent, covered)


def assemble(pieces: Pieces, arrays: list[np.ndarray]) -> np.ndarray:
    """Return the full tensor from the chosen pieces' values (in :attr:`Pieces.chosen`'s order), read-only.

    ``block`` pieces are placed at their offsets, ``flat`` ones filled into the flattened tensor, ``partial_sum``
    ones added up in worker order: DTensor's ``full_tensor()``.
    """
    glob = pieces.shard.global_shape
    dtype = np.result_type(*arrays)
    if pieces.shard.layout == "partial_sum":
        out = np.array(arrays[0], dtype=dtype).reshape(glob)
        for arr in arrays[1:]:
            out += arr.reshape(glob)
    elif pieces.shard.layout == "flat":
        out = np.zeros(math.prod(glob), dtype)
        for (_, entry), arr in zip(pieces.chosen, arrays, strict=True):
            start = entry.shard.offsets[0] if entry.shard is not None else 0
            out[start : start + arr.size] = arr.reshape(-1)
        out = out.reshape(glob)
    else:
        out = np.zeros(glob, dtype)
        for (_, entry), arr in zip(pieces.chosen, arrays, strict=True):
            if arr.size and entry.shard is not None:
                out[tuple(slice(o, o + s) for o, s in zip(entry.shard.offsets, arr.shape, strict=True))] = arr
    out.flags.writeable = False  # as every value a Trial returns
    return out


def full_partials(pieces: Pieces) -> dict[str, float] | None:
    """Return the full tensor's partial statistics combined from the chosen pieces' (None: some piece has none)."""
    if not pieces.complete or pieces.shard.layout == "partial_sum":
        return None
    parts = [entry.partials for _, entry in pieces.chosen]
    if any(p is None for p in parts):
        return None
    return combine_partials(p for p in parts if p is not None)
