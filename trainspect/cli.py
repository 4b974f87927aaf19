"""The ``trainspect`` command: ``run``, ``rules`` and the commands added by the other parts."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainspect import env

__all__ = ["main", "build_parser"]

# Subcommands contributed by other modules: each exposes add_parser(subparsers) and run(args) -> int.
_PLUGINS = ("trainspect.rules.cli", "trainspect.tb_plugin.cli", "trainspect.report.cli")


def _add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "run",
        help="run an unmodified training script with trainspect",
        description="Run a command (python train.py ...) with zero-script-change instrumentation.",
    )
    p.add_argument("--out", help="run directory (default: runs/<script>-<time>)")
    p.add_argument("--config", help="JSON hook config (smdebug format, see README)")
    p.add_argument("--profile", action="store_true", help="also record system and framework metrics")
    p.add_argument("--profiler-interval", type=int, default=None, metavar="MS", help="system sampling interval in ms")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- followed by the command to run")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from trainspect._supervise import exit_like, run_child

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    script = next((Path(c).stem for c in command[1:] if c.endswith(".py")), Path(command[0]).name if command else "")
    out = Path(args.out or Path("runs") / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    bootstrap = str(Path(__file__).parent / "_bootstrap")
    path = os.pathsep.join(p for p in (bootstrap, str(Path(__file__).parent.parent), env.PYTHONPATH.get()) if p)
    overrides: dict[str, str | None] = {
        "TRAINSPECT_RUN_ACTIVE": "1",
        "TRAINSPECT_OUT_DIR": str(out),
        "PYTHONPATH": path,
        "TRAINSPECT_CONFIG": str(Path(args.config).resolve()) if args.config else env.TRAINSPECT_CONFIG.get(),
    }
    if args.profile or args.profiler_interval:
        overrides["TRAINSPECT_PROFILE"] = str(args.profiler_interval or 500)
    environ = env.child_environment(overrides)
    problem = _run_problem(args, command, out, environ)
    if problem:
        print(f"trainspect run: {problem}", file=sys.stderr)
        return 2
    try:
        code = run_child(command, environ)
    except OSError as exc:
        print(f"trainspect run: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"trainspect: run directory {out}", file=sys.stderr)
    print(f"trainspect: view it with: tensorboard --logdir {out.parent}", file=sys.stderr)
    return exit_like(code)


def _run_problem(args: argparse.Namespace, command: list[str], out: Path, environ: dict[str, str]) -> str:
    """What prevents the run from starting, in one line ("" when nothing does)."""
    if not command:
        return "give the command after --, e.g. trainspect run -- python train.py"
    return (
        _command_problem(command[0], environ.get("PATH", os.defpath)) or _config_problem(args, out) or _out_problem(out)
    )


def _command_problem(program: str, search_path: str) -> str:
    if os.sep in program:
        found: str | None = program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    else:
        found = shutil.which(program, path=search_path)
    return "" if found else f"command {program!r} not found or not executable"


def _config_problem(args: argparse.Namespace, out: Path) -> str:
    from trainspect.exceptions import ConfigError

    if args.profiler_interval is not None:
        from trainspect.profiler.config import ProfilerConfig

        try:
            ProfilerConfig(system_monitor_interval_millis=args.profiler_interval)
        except ConfigError as exc:
            return f"--profiler-interval {args.profiler_interval}: {exc}"
    config = args.config or env.TRAINSPECT_CONFIG.get()
    if config:
        from trainspect.hook_config import hook_kwargs_from_dict, load_json_config

        where = f"--config {config!r}" if args.config else f"TRAINSPECT_CONFIG={config!r}"
        try:
            doc = load_json_config(config)
            if not any(str(key).lower() == "localpath" for key in doc):
                doc = {**doc, "LocalPath": str(out)}  # the child gets the run directory as TRAINSPECT_OUT_DIR
            hook_kwargs_from_dict(doc)
        except (ValueError, TypeError, OSError) as exc:  # ConfigError is a ValueError
            return f"{where}: {exc}"
    return ""


def _out_problem(out: Path) -> str:
    if out.exists() and not out.is_dir():
        return f"--out {str(out)!r} exists and is not a directory"
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"--out {str(out)!r}: {str(parent)!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {str(out)!r}: {str(parent)!r} is not writable"
    return ""


def _add_info(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("info", help="summarise a run directory (steps, tensors, workers)")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)


def _info(args: argparse.Namespace) -> int:
    from trainspect.exceptions import TrainspectError
    from trainspect.store.trial import create_trial

    path = Path(args.dir)
    if path.is_dir() and not any(path.iterdir()):
        print(f"trainspect info: {args.dir} is empty: it holds no run", file=sys.stderr)
        return 2
    try:
        trial = create_trial(args.dir)
        doc = _summary(trial)
    except (TrainspectError, OSError, ValueError) as exc:  # no run there, damaged or unreadable files
        print(f"trainspect info: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=1) if args.json else "\n".join(f"{k}: {v}" for k, v in doc.items()))
    return 0


def _summary(trial: Any) -> dict[str, Any]:
    return {
        "path": str(trial.path),
        "steps": len(trial.steps()),
        "modes": [m.name for m in trial.modes()],
        "workers": trial.workers(),
        "tensors": trial.tensor_names(),
        "collections": sorted(trial.collections()),
        "ended": trial.job_ended,
    }


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``trainspect`` command."""
    parser = argparse.ArgumentParser(prog="trainspect", description="Local debugger and profiler for training jobs.")
    sub = parser.add_subparsers(dest="command_name", required=True)
    _add_run(sub)
    _add_info(sub)
    for name in _PLUGINS:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # a missing optional part must not break the other commands
            print(f"trainspect: command module {name} unavailable: {exc}", file=sys.stderr)
            continue
        before = set(sub.choices)
        module.add_parser(sub)
        for new in set(sub.choices) - before:
            if sub.choices[new].get_default("func") is None:
                sub.choices[new].set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainspect`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C ends a command with the shell's status, not a traceback
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
