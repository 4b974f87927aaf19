"""Run directories in object stores (``s3://``, ``gs://``, ``az://`` through fsspec): docs/format.md."""

from __future__ import annotations

from typing import Any

from trainspect.store.remote.url import StoreUnavailable, UnsupportedURL, is_url, local_path

__all__ = ["StoreUnavailable", "UnsupportedURL", "is_url", "local_path", "localize", "spool_for"]


def spool_for(out_dir: Any, dry_run: bool = False) -> tuple[Any, Any]:
    """The local folder a hook writes for ``out_dir``, and the :class:`RemoteRun` uploading it (None unless a URL).

    Raises:
        UnsupportedURL: no fsspec implementation for the URL's scheme is installed.
    """
    if not is_url(out_dir):
        return out_dir, None
    url = str(out_dir)
    local = local_path(url)
    if local is not None:
        return local, None
    from trainspect.store.remote.spool import RemoteRun

    if dry_run:
        from trainspect.store.remote.url import open_store

        open_store(url, "out_dir")  # refuse an unsupported scheme even when nothing is written
        return url.replace("://", "_"), None
    remote = RemoteRun(url)
    return str(remote.spool), remote


def localize(path: Any, who: str = "trainspect") -> tuple[Any, Any]:
    """A local path for ``path``: itself, the folder of a ``file://`` URL, or a synced mirror of a store URL.

    Returns ``(path, mirror)``; keep the mirror (None unless a store URL) while reading: its folder goes with it.

    Raises:
        UnsupportedURL, StoreUnavailable, FileNotFoundError: see :func:`trainspect.store.remote.reader.open_mirror`.
    """
    if not is_url(path):
        return path, None
    local = local_path(str(path))
    if local is not None:
        return local, None
    from trainspect.store.remote.reader import open_mirror

    mirror = open_mirror(str(path), who=who)
    return str(mirror.local), mirror
