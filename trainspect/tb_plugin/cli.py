"""``trainspect ui DIR [--port P]``: start TensorBoard with the trainspect plugin on 127.0.0.1 and print the URL."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run", "launch"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add the ``ui`` subcommand."""
    p = subparsers.add_parser(
        "ui",
        help="open runs in TensorBoard with the trainspect Profiler and Rules views",
        description="Start TensorBoard on DIR (a run directory or a folder of runs) with the trainspect plugin.",
        epilog="examples:\n  trainspect ui runs/\n  trainspect ui runs/train-20260101-120000 --port 0",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", help="log directory: a run directory or a folder holding run directories")
    p.add_argument("--port", type=int, default=6006, help="port (default 6006; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1, this machine only)")
    p.add_argument(
        "--load-fast",
        choices=("auto", "true", "false"),
        default="auto",
        help="TensorBoard's data loading: the Rust data server (auto/true) or Python (false)",
    )
    p.set_defaults(func=run)
    return p


def _plugins() -> list[Any]:
    from tensorboard import default

    from trainspect.tb_plugin.plugin import TrainspectPlugin

    plugins = list(default.get_plugins())
    if not any(getattr(p, "plugin_name", None) == TrainspectPlugin.plugin_name for p in plugins):
        plugins.append(TrainspectPlugin)  # not pip-installed: the entry point is missing
    return plugins


def launch(logdir: str, port: int = 6006, host: str = "127.0.0.1", load_fast: str = "auto") -> str:
    """Start TensorBoard with the plugin on a background thread; return its URL.

    Raises:
        FileNotFoundError: ``logdir`` is not a directory.
    """
    if not Path(logdir).is_dir():
        raise FileNotFoundError(f"{logdir} is not a directory")
    from tensorboard import program

    board = program.TensorBoard(plugins=_plugins())
    board.configure(logdir=str(Path(logdir).resolve()), host=host, port=port, load_fast=load_fast, reload_interval=5)
    return str(board.launch())


def run(args: argparse.Namespace) -> int:
    """Run ``trainspect ui``: serve until interrupted; exit 2 when the directory is missing or the port is taken."""
    try:
        url = launch(args.dir, args.port, args.host, args.load_fast)
    except FileNotFoundError as exc:
        print(f"trainspect ui: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - TensorBoard raises its own TensorBoardServerException / OSError
        print(f"trainspect ui: could not start TensorBoard: {exc}", file=sys.stderr)
        return 2
    print(f"trainspect ui: {url}#trainspect  (Ctrl+C to stop)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0
