"""Run directories given as URLs (``s3://bucket/runs/exp1``): recognising them, and the store behind them (fsspec).

A path with a ``scheme://`` prefix is never treated as a local folder: either an fsspec implementation for the scheme
is installed and the run lives in that store, or it is refused in one line that names the extra to install.
"""

from __future__ import annotations

import re
from typing import Any

from trainspect import env
from trainspect.exceptions import ConfigError, TrainspectError

__all__ = ["StoreUnavailable", "UnsupportedURL", "is_url", "local_path", "open_store", "probe", "join"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_EXTRA = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
}
_S3_CONFIG = {"connect_timeout": 5, "read_timeout": 20, "retries": {"max_attempts": 2, "mode": "standard"}}


class UnsupportedURL(ConfigError):
    """A ``scheme://`` run directory whose store has no fsspec implementation installed."""


class StoreUnavailable(TrainspectError, OSError):
    """The store of a URL run directory cannot be reached (network, credentials, missing bucket)."""


def is_url(path: object) -> bool:
    r"""Whether ``path`` is a ``scheme://`` URL (``file://`` included); ``Path`` objects never are.

    Example:
        >>> is_url("s3://bucket/run"), is_url("runs/exp1"), is_url("C:\\\\runs")
        (True, False, False)
    """
    return isinstance(path, str) and _URL.match(path) is not None


def local_path(path: str) -> str | None:
    """The local path of a ``file://`` URL, None for other URLs."""
    if path.startswith("file://"):
        return path[len("file://") :] or "/"
    return None


def _scheme(url: str) -> str:
    match = _URL.match(url)
    assert match is not None
    return match.group(1).lower()


def _hint(scheme: str) -> str:
    extra = _EXTRA.get(scheme)
    if extra:
        return f"install it with: pip install trainspect[{extra}]"
    return "install an fsspec implementation for it (https://filesystem-spec.readthedocs.io)"


def open_store(url: str, who: str = "trainspect") -> tuple[Any, str]:
    """Return ``(filesystem, path without the scheme)`` of a URL.

    Credentials and endpoints come from each store's standard configuration (for S3 the AWS variables and files,
    ``AWS_ENDPOINT_URL`` included); S3 connections time out after a few seconds instead of botocore's minute.

    Raises:
        UnsupportedURL: no fsspec implementation for the scheme is installed (the message names the extra).
    """
    scheme = _scheme(url)
    try:
        import fsspec
        from fsspec.registry import get_filesystem_class
    except ImportError:
        raise UnsupportedURL(f"{who}: {url}: URL run directories need fsspec; {_hint(scheme)}") from None
    try:
        cls = get_filesystem_class(scheme)
    except (ImportError, ValueError):
        problem = f"no storage backend for {scheme}:// is installed"
        raise UnsupportedURL(f"{who}: {url}: {problem}; {_hint(scheme)}") from None
    options: dict[str, Any] = {}
    if scheme in ("s3", "s3a"):
        options = {"config_kwargs": dict(_S3_CONFIG)}
        endpoint = env.AWS_ENDPOINT_URL.get()
        if endpoint:  # s3fs versions before 2024 ignore the standard variable
            options["endpoint_url"] = endpoint
    fs = fsspec.filesystem(scheme, skip_instance_cache=True, **options) if options else cls()
    return fs, cls._strip_protocol(url).rstrip("/")


def join(root: str, rel: str) -> str:
    """``root/rel`` for store paths."""
    return f"{root}/{rel}" if rel else root


def describe(exc: BaseException) -> str:
    """The store's error in one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def probe(fs: Any, path: str) -> None:
    """Check that the store answers and lets us list ``path`` (a missing prefix is fine, a missing bucket is not).

    Raises:
        StoreUnavailable: unreachable endpoint, missing credentials, no such bucket, access denied.
    """
    bucket = path.split("/", 1)[0]
    try:
        try:
            fs.ls(path, detail=False, refresh=True)  # raises the store's own error (credentials, network)
        except FileNotFoundError:
            if not fs.exists(bucket):  # a new prefix is fine, a missing bucket is not
                raise FileNotFoundError(f"bucket or container {bucket!r} does not exist") from None
    except Exception as exc:  # each backend raises its own errors (botocore, aiohttp, OSError)
        raise StoreUnavailable(describe(exc)) from exc
