"""The Trial's sources for URL run directories: the local readers over a :class:`Mirror` kept up to date."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainspect.store.remote.mirror import Mirror
from trainspect.store.remote.url import local_path
from trainspect.store.smdebug_source import SmdebugSource
from trainspect.store.source import TrainspectSource

__all__ = ["open_remote", "RemoteTrainspectSource", "RemoteSmdebugSource", "open_mirror"]

MIN_REFRESH_S = 1.0
"""A Trial queried in a loop lists the store at most this often."""


class _Follow:
    """Lists the store again (at most every :data:`MIN_REFRESH_S`) each time the Trial asks whether the job ended.

    The Trial asks before it reads what is new, so what it reads is at least as new as the end marker it saw.
    """

    mirror: Mirror
    _synced_at: float = 0.0
    _seen_end = False

    def _follow(self) -> None:
        if self._seen_end or time.monotonic() - self._synced_at < MIN_REFRESH_S:
            return
        self._synced_at = time.monotonic()
        try:
            self.mirror.sync()
        except OSError as exc:
            self._warn(f"{self.mirror.url}#sync", f"{exc}; showing what was read before")  # type: ignore[attr-defined]

    @property
    def url(self) -> str:
        """The run directory's URL."""
        return self.mirror.url


class RemoteTrainspectSource(_Follow, TrainspectSource):
    """A trainspect run directory in an object store."""

    def __init__(self, mirror: Mirror) -> None:
        TrainspectSource.__init__(self, mirror.local)
        self.mirror = mirror
        self._synced_at = time.monotonic()

    def ended(self) -> bool:  # noqa: D102
        self._follow()
        self._seen_end = TrainspectSource.ended(self)
        return self._seen_end


class RemoteSmdebugSource(_Follow, SmdebugSource):
    """An smdebug trial (SageMaker's ``debug-output``) in an object store."""

    def __init__(self, mirror: Mirror) -> None:
        SmdebugSource.__init__(self, mirror.local)
        self.mirror = mirror
        self._synced_at = time.monotonic()

    def _warn(self, key: str, message: str) -> None:
        if message not in self.problems:
            self.problems.append(message)

    def ended(self) -> bool:  # noqa: D102
        self._follow()
        self._seen_end = SmdebugSource.ended(self)
        return self._seen_end


def open_mirror(url: str, who: str = "create_trial") -> Mirror:
    """A synced mirror of ``url``.

    Raises:
        UnsupportedURL: no fsspec implementation for the scheme.
        StoreUnavailable: the store cannot be reached.
        FileNotFoundError: no object under the URL.
    """
    mirror = Mirror(url, who=who)
    mirror.sync()
    if not mirror.exists():
        raise FileNotFoundError(f"{who}: {url} does not exist (no object under it)")
    return mirror


def open_remote(url: str, name: str | None) -> tuple[Any, Path, str]:
    """The source, local folder and display name of a URL run directory (``file://``: the folder, no source).

    Raises:
        UnsupportedURL, StoreUnavailable, FileNotFoundError, NotARunDirectory: as :func:`open_mirror` and
        ``create_trial``.
    """
    local = local_path(url)
    if local is not None:
        return None, Path(local), name or Path(local).name
    from trainspect.store.detect import detect_source

    mirror = open_mirror(url)
    display = name or url.rstrip("/").rsplit("/", 1)[-1]
    try:
        kind = detect_source(mirror.local)
    except ValueError as exc:
        raise type(exc)(str(exc).replace(str(mirror.local), url)) from None
    kind.close()
    source = RemoteSmdebugSource(mirror) if isinstance(kind, SmdebugSource) else RemoteTrainspectSource(mirror)
    return source, mirror.local, display
