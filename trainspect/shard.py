"""Where one rank's piece of a sharded tensor sits in the full tensor, and the partial statistics it carries.

Framework-free (NumPy only), shared by the hooks that record shards (DTensor/FSDP2, tensor parallel, classic FSDP,
DeepSpeed ZeRO-3), the writer that stores them in the index and the Trial that assembles them. A sharded tensor is
recorded by every rank as its local piece (a :class:`~trainspect.step.TensorRecord` with a ``shard``); the full
tensor is never gathered on the training path. Reductions of the full tensor are combined from each piece's
:data:`PARTIAL_KEYS` statistics (see :func:`trainspect.reductions`' partial helpers).

Layouts:

* ``block``: the local piece is the block ``full[o0:o0+s0, o1:o1+s1, ...]`` (``offsets`` per dimension, the shape
  is the record's shape): DTensor ``Shard(d)`` placements, on meshes of any dimension.
* ``flat``: the local piece is 1-d and holds ``full.reshape(-1)[start:start+len]`` (``offsets == (start,)``): classic
  FSDP's ``FlatParameter`` shards and DeepSpeed ZeRO-3 partitions, padding removed.
* ``partial_sum``: every rank holds a full-shaped tensor; the full tensor is their element-wise sum (DTensor
  ``Partial``).

``replica``: the piece is an identical copy of one another rank also records (a ``Replicate`` mesh dimension where
this rank's coordinate is not 0): assembly and partial statistics take each piece once, from its non-replica holder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Shard", "PARTIAL_KEYS", "LAYOUTS"]

LAYOUTS = ("block", "flat", "partial_sum")

PARTIAL_KEYS = (
    "count",
    "sum",
    "sum_sq",
    "m2",
    "min",
    "max",
    "abs_sum",
    "abs_m2",
    "abs_min",
    "abs_max",
    "prod",
)
"""The statistics each piece carries so that every reduction of the full tensor can be combined without a gather.

``count`` elements; ``sum``, ``sum_sq`` (of squares); ``m2``: the sum of squared deviations from the piece's own
mean (so variances combine exactly, Chan et al. 1979); ``min``/``max``; the same of absolute values (``abs_sum`` is
the L1 norm, ``abs_m2`` of ``|x|`` about its mean); ``prod``. An empty piece has ``count == 0`` (and no others).
"""


@dataclass(frozen=True)
class Shard:
    """One rank's piece of a sharded tensor.

    Attributes:
        global_shape: the full tensor's shape.
        offsets: ``block``: where the local block starts in each dimension; ``flat``: ``(start,)`` in the row-major
            flattened full tensor; ``partial_sum``: all zeros.
        layout: one of :data:`LAYOUTS`.
        replica: an identical copy of a piece another rank holds (taken once, from its non-replica holder).
        placement: how the framework describes it, for people (``"DTensor mesh (2,) [Shard(dim=0)]"``,
            ``"FSDP FlatParameter"``, ``"ZeRO-3 partition"``).

    Example:
        >>> s = Shard((4, 3), (2, 0), placement="DTensor mesh (2,) [Shard(dim=0)]")
        >>> Shard.from_dict(s.to_dict()) == s
        True
    """

    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]
    layout: str = "block"
    replica: bool = False
    placement: str = ""

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout={self.layout!r}: allowed: {', '.join(LAYOUTS)}")

    def to_dict(self) -> dict[str, Any]:
        """The index entry's ``"sh"`` object (short keys, as the index writes them)."""
        doc: dict[str, Any] = {"g": list(self.global_shape), "o": list(self.offsets), "k": self.layout}
        if self.replica:
            doc["rep"] = True
        if self.placement:
            doc["p"] = self.placement
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Shard:
        """Read :meth:`to_dict`'s form back.

        Raises:
            ValueError: a malformed object (wrong types, an unknown layout).
        """
        try:
            return cls(
                tuple(int(v) for v in doc["g"]),
                tuple(int(v) for v in doc["o"]),
                str(doc.get("k", "block")),
                bool(doc.get("rep", False)),
                str(doc.get("p", "")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed shard description {doc!r}: {exc}") from None
