"""URL run directories on the command line: ``trainspect sync SPOOL URL``, and the other commands given a URL.

``trainspect rules|report|compare|info|ui URL`` run on a local mirror of the run (kept up to date by a thread for
``rules --watch`` and ``ui``); the verdicts and the report they write go back to the store.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainspect.store.remote.url import StoreUnavailable, UnsupportedURL, describe, is_url, local_path, open_store

__all__ = ["add_parser", "run", "run_with_urls", "out_problem"]

_RUN_ARGS = ("dir", "a", "b")
_FOLLOW_S = 1.0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``sync`` subcommand."""
    p = sub.add_parser(
        "sync",
        help="upload a URL run's spool that could not be uploaded (store down at close)",
        description="Upload what a hook left in its spool (the store was down when it closed) to the "
        "run's URL, then the end marker; the spool is deleted once everything is there.",
        epilog="examples:\n  trainspect sync /tmp/trainspect-spool/runs_exp1-4242-a1b2c3 s3://bucket/runs/exp1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("spool", help="the spool folder named in the hook's warning")
    p.add_argument("url", nargs="?", help="the run's URL (default: the one recorded in the spool)")
    p.add_argument("--keep", action="store_true", help="keep the spool after uploading it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``trainspect sync``."""
    from trainspect.store.remote.uploader import STATE_FILE, SpoolSync

    spool = Path(args.spool)
    if not (spool / "trainspect.json").is_file() and not (spool / STATE_FILE).is_file():
        print(f"trainspect sync: {args.spool} is not a trainspect spool (no trainspect.json in it)", file=sys.stderr)
        return 2
    url = args.url or _recorded_url(spool)
    if not url or not is_url(url):
        print(f"trainspect sync: give the run's URL (none is recorded in {args.spool})", file=sys.stderr)
        return 2
    try:
        fs, root = open_store(url, "trainspect sync")
        sync = SpoolSync(spool, fs, root, url)
        sync.sweep(with_end=True)
        world = _world_size(spool)
        if world > 1 and sync.all_workers_ended(world):
            sync.mark_end()
    except UnsupportedURL as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except Exception as exc:  # the store's own errors
        print(f"trainspect sync: cannot upload to {url} ({describe(exc)}); the spool is unchanged", file=sys.stderr)
        return 1
    if not args.keep:
        shutil.rmtree(spool, ignore_errors=True)
    print(f"trainspect sync: {url} is complete" + ("" if args.keep else f"; {args.spool} was removed"))
    return 0


def _recorded_url(spool: Path) -> str | None:
    from trainspect.store.remote.uploader import STATE_FILE

    try:
        return str(json.loads((spool / STATE_FILE).read_text(encoding="utf-8"))["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _world_size(spool: Path) -> int:
    try:
        return int(json.loads((spool / "trainspect.json").read_text(encoding="utf-8")).get("world_size", 1))
    except (OSError, ValueError, TypeError, AttributeError):
        return 1


def out_problem(url: str) -> str:
    """Why ``trainspect run --out URL`` cannot record there, in one line ("" when it can)."""
    if local_path(url) is not None:
        return ""
    from trainspect.store.remote.url import probe

    try:
        fs, root = open_store(url, "--out")
        probe(fs, root)
    except UnsupportedURL as exc:
        return str(exc)
    except StoreUnavailable as exc:
        return f"--out {url}: the store cannot be reached: {exc}"
    return ""


def run_with_urls(args: argparse.Namespace, func: Callable[[argparse.Namespace], Any]) -> int:
    """Run a command whose run arguments include URLs on local mirrors; send back the verdicts and report it wrote."""
    from trainspect.store.remote.reader import open_mirror

    command = getattr(args, "command_name", None) or "trainspect"
    mirrors = []
    for name in [n for n in _RUN_ARGS if is_url(getattr(args, n, None))]:
        url = getattr(args, name)
        local = local_path(url)
        if local is not None:
            setattr(args, name, local)
            continue
        try:
            mirror = open_mirror(url, who=f"trainspect {command}")
        except (UnsupportedURL, StoreUnavailable, FileNotFoundError) as exc:
            text = str(exc) if str(exc).startswith("trainspect") else f"trainspect {command}: {url}: {exc}"
            print(text, file=sys.stderr)
            return 2
        mirrors.append(mirror)
        setattr(args, name, str(mirror.local))
    stop = threading.Event()
    if getattr(args, "watch", False) or command == "ui":
        for mirror in mirrors:
            threading.Thread(target=_follow, args=(mirror, stop), name="trainspect-mirror", daemon=True).start()
    try:
        return int(func(args))
    finally:
        stop.set()
        for mirror in mirrors:
            try:
                for sent in mirror.push_back():
                    print(f"trainspect {command}: wrote {sent}", file=sys.stderr)
            except Exception as exc:  # the store's own errors
                print(f"trainspect {command}: could not write back to {mirror.url}: {describe(exc)}", file=sys.stderr)


def _follow(mirror: Any, stop: threading.Event) -> None:
    while not stop.wait(_FOLLOW_S):
        try:
            mirror.sync()
        except OSError:
            continue  # the store is down for a moment: the next look retries
