"""What every frame builder shares: the error naming what a run recorded, name selection, empty and joined frames."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

import pandas as pd
from pandas.api.types import union_categoricals

from trainspect.exceptions import TrainspectError

__all__ = ["NotRecorded", "choose", "empty_frame", "concat_frames"]


class NotRecorded(TrainspectError, KeyError):
    """A frame was asked for something the run did not record; the message names what it did record.

    Example:
        >>> str(NotRecorded("tensor", ["lose"], ["loss", "acc"]))
        "no tensor 'lose' in this run; recorded: acc, loss"
    """

    def __init__(self, what: str, asked: Iterable[str], recorded: Iterable[str], where: str = "in this run") -> None:
        self.asked = list(asked)
        self.recorded = sorted(set(recorded))
        shown = ", ".join(self.recorded[:50]) + (f" … ({len(self.recorded)} in all)" if len(self.recorded) > 50 else "")
        plural = "s" if len(self.asked) > 1 else ""
        text = f"no {what}{plural} {', '.join(repr(a) for a in self.asked)} {where}; recorded: {shown or '(none)'}"
        super().__init__(text)

    def __str__(self) -> str:
        return str(self.args[0])


def choose(
    asked: str | Sequence[str] | None, recorded: Sequence[str], what: str, where: str = "in this run"
) -> list[str]:
    """The recorded names ``asked`` picks (exact names or ``fnmatch`` patterns), in recorded order; all when None.

    Nothing recorded yet (an empty or just-started run) picks nothing and raises nothing.

    Raises:
        NotRecorded: a name or pattern matches nothing recorded (the message lists what was).

    Example:
        >>> choose(["gpu*", "cpu0"], ["cpu0", "cpu1", "gpu0"], "metric")
        ['cpu0', 'gpu0']
    """
    if asked is None:
        return list(recorded)
    wanted = [asked] if isinstance(asked, str) else list(asked)
    if not recorded:
        return []
    missing = [a for a in wanted if a not in recorded and not fnmatch.filter(recorded, a)]
    if missing:
        raise NotRecorded(what, missing, recorded, where)
    exact = set(wanted)
    return [r for r in recorded if r in exact or any(fnmatch.fnmatchcase(r, a) for a in wanted)]


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty DataFrame with these columns and dtypes (``{"step": "int64", ...}``)."""
    return pd.DataFrame({c: pd.Series(dtype=d) for c, d in columns.items()})


def concat_frames(parts: list[pd.DataFrame], columns: dict[str, str]) -> pd.DataFrame:
    """The parts as one frame of these columns and dtypes (categories unioned, not turned into objects).

    Example:
        >>> a = pd.DataFrame({"node": pd.Categorical(["a"]), "v": [1.0]})
        >>> b = pd.DataFrame({"node": pd.Categorical(["b"]), "v": [2.0]})
        >>> concat_frames([a, b], {"node": "category", "v": "float64"})["node"].cat.categories.tolist()
        ['a', 'b']
    """
    if not parts:
        return empty_frame(columns)
    if len(parts) == 1:
        return parts[0].reset_index(drop=True)[list(columns)]
    cats = [c for c, d in columns.items() if d == "category"]
    frame = pd.concat([p.drop(columns=cats) for p in parts], ignore_index=True)
    for col in cats:
        frame[col] = union_categoricals([p[col].astype("category") for p in parts])
    return frame[list(columns)]
