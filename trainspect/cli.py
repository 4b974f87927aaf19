"""The ``trainspect`` command: ``run``, ``rules`` and the commands added by the other parts."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainspect import env
from trainspect._pipes import quiet_broken_pipe
from trainspect.store.remote.url import is_url

_RUN_ARGS = ("dir", "a", "b")

__all__ = ["main", "build_parser", "commands_text", "quiet_broken_pipe"]

# Subcommands contributed by other modules: each exposes add_parser(subparsers) and run(args) -> int.
_PLUGINS = (
    "trainspect.rules.cli",
    "trainspect.tb_plugin.cli",
    "trainspect.report.cli",
    "trainspect.mlflow_plugin.cli",
    "trainspect.store.remote.cli",
)

_RUN_EXAMPLES = """examples:
  trainspect run -- python train.py --epochs 3
  trainspect run --profile --rules ExplodingTensor,LossNotDecreasing -- python train.py
  trainspect run --out runs/baseline --config hook.json -- torchrun --nproc-per-node 2 train.py"""
_INFO_EXAMPLES = """examples:
  trainspect info runs/train-20260101-120000
  trainspect info runs/train-20260101-120000 --json"""


def _add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "run",
        help="run an unmodified training script with trainspect",
        description="Run a command (python train.py ...) with zero-script-change instrumentation.",
        epilog=_RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", help="run directory (default: runs/<script>-<time>)")
    p.add_argument("--config", help="JSON hook config (smdebug format, see README)")
    p.add_argument("--profile", action="store_true", help="also record system and framework metrics")
    p.add_argument("--profiler-interval", type=int, default=None, metavar="MS", help="system sampling interval in ms")
    p.add_argument(
        "--rules",
        metavar="NAME[,NAME]",
        default=None,
        help="rules to evaluate live, comma-separated ('default': the default set)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- followed by the command to run")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from trainspect._supervise import exit_like, run_child

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    script = next((Path(c).stem for c in command[1:] if c.endswith(".py")), Path(command[0]).name if command else "")
    default = _unused(Path("runs") / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}")
    out: Any = args.out if is_url(args.out) else Path(args.out or default).resolve()
    bootstrap = str(Path(__file__).parent / "_bootstrap")
    path = os.pathsep.join(p for p in (bootstrap, str(Path(__file__).parent.parent), env.PYTHONPATH.get()) if p)
    overrides: dict[str, str | None] = {
        "TRAINSPECT_RUN_ACTIVE": "1",
        "TRAINSPECT_OUT_DIR": str(out),
        "PYTHONPATH": path,
        "TRAINSPECT_CONFIG": str(Path(args.config).resolve()) if args.config else env.TRAINSPECT_CONFIG.get(),
        # one job: every process the command starts (torchrun's, mp.spawn's, Lightning's, Ray's) joins this run
        "TRAINSPECT_JOB_ID": env.TRAINSPECT_JOB_ID.get() or f"run-{uuid.uuid4().hex}",
    }
    if args.profile or args.profiler_interval:
        overrides["TRAINSPECT_PROFILE"] = str(args.profiler_interval or 500)
    environ = env.child_environment(overrides)
    problem = _run_problem(args, command, out, environ)
    if problem:
        print(f"trainspect run: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="trainspect-run-") as tmp:
        if args.rules:
            environ["TRAINSPECT_CONFIG"] = _rules_config(args, out, Path(tmp))
        try:
            code = run_child(command, environ)
        except OSError as exc:
            print(f"trainspect run: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    _record_exit(code, out)
    _print_outcome(code, out)
    return exit_like(code)


def _record_exit(code: int, out: Path | str) -> None:
    """Note how the script ended in its run directory; after a failure the report is made again to say so."""
    if isinstance(out, str) or not out.is_dir():
        return
    from trainspect._closing_summary import recorded_nothing
    from trainspect.store.job_events import write_exit
    from trainspect.store.layout import RunLayout

    layout = RunLayout(out)
    write_exit(out, code, steps_recorded=not recorded_nothing(layout))
    if code != 0 and layout.report.is_file():
        try:
            from trainspect.report.render import write_report

            write_report(out)
        except Exception as exc:  # noqa: BLE001 - the report the hook wrote stays
            print(f"trainspect: the report could not be updated with the exit status: {exc}", file=sys.stderr)


def _unused(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3`` … when it exists (two runs started in the same second)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _print_outcome(code: int, out: Path | str) -> None:
    """How the script ended, the rules with issues, where the report and the run are."""
    from trainspect._closing_summary import exit_line, summary_lines

    failed = exit_line(code)
    if failed:
        print(failed, file=sys.stderr)
    if isinstance(out, str):  # a URL run directory
        print(f"trainspect: recorded into {out}; view it with: trainspect ui {out}", file=sys.stderr)
        return
    if not out.is_dir():
        print(f"trainspect: nothing was recorded ({out} was not created)", file=sys.stderr)
        return
    for line in summary_lines(out):
        print(line, file=sys.stderr)
    if not failed:
        print(f"trainspect: view it with: trainspect ui {out}", file=sys.stderr)


def _rule_names(text: str) -> list[str]:
    """The names of ``--rules`` (``default`` expanded), each checked against the registry.

    Raises:
        ConfigError: an unknown rule; the message lists the valid ones.
    """
    from trainspect.rules import default_rules
    from trainspect.rules.registry import default_registry

    names: list[str] = []
    for item in (n.strip() for n in text.split(",")):
        if not item:
            continue
        found = (
            [r.name for r in default_rules()] if item.lower() == "default" else [default_registry().get(item).__name__]
        )
        names += [n for n in found if n not in names]
    return names


def _config_doc(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The JSON hook config the child gets: the user's (``--config`` or ``TRAINSPECT_CONFIG``) plus ``--rules``."""
    from trainspect.hook_config import load_json_config

    config = args.config or env.TRAINSPECT_CONFIG.get()
    doc = dict(load_json_config(config)) if config else {}
    if not any(str(key).lower() == "localpath" for key in doc):
        doc["LocalPath"] = str(out)
    if args.rules:
        key = next((k for k in doc if str(k).lower() == "rules"), "Rules")
        given = list(doc.get(key) or [])
        have = {str(r if isinstance(r, str) else r.get("name", r.get("Name", ""))).lower() for r in given}
        doc[key] = given + [{"name": n} for n in _rule_names(args.rules) if n.lower() not in have]
    return doc


def _rules_config(args: argparse.Namespace, out: Path, folder: Path) -> str:
    path = folder / "hook-config.json"
    path.write_text(json.dumps(_config_doc(args, out)), encoding="utf-8")
    return str(path)


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
    if args.rules:
        try:
            _rule_names(args.rules)
        except ConfigError as exc:
            return f"--rules {args.rules!r}: {exc}"
    config = args.config or env.TRAINSPECT_CONFIG.get()
    if config or args.rules:
        from trainspect.hook_config import hook_kwargs_from_dict

        where = f"--config {config!r}" if args.config else f"TRAINSPECT_CONFIG={config!r}" if config else "--rules"
        try:
            hook_kwargs_from_dict(_config_doc(args, out))  # the child gets the run directory as TRAINSPECT_OUT_DIR
        except (ValueError, TypeError, OSError) as exc:  # ConfigError is a ValueError
            return f"{where}: {exc}"
    return ""


def _out_problem(out: Path | str) -> str:
    if isinstance(out, str):
        from trainspect.store.remote.cli import out_problem

        return out_problem(out)
    if out.exists() and not out.is_dir():
        return f"--out {str(out)!r} exists and is not a directory"
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"--out {str(out)!r}: {str(parent)!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {str(out)!r}: {str(parent)!r} is not writable"
    return _reused_problem(out)


def _reused_problem(out: Path) -> str:
    """A directory that already holds a run (of another job: ``trainspect run`` starts a new one) is refused."""
    from trainspect.store.layout import RunLayout
    from trainspect.store.manifest import read_manifest

    layout = RunLayout(out)
    manifest = read_manifest(layout)
    job = env.TRAINSPECT_JOB_ID.get()
    if manifest is not None and job and manifest.get("job_id") == job:
        return ""  # a command of this same job (a nested trainspect run) joins it
    if manifest is None and not any(p.exists() for p in (layout.tensors_dir, layout.profiler_dir, layout.workers_dir)):
        return ""
    when = f", created {time.ctime(float(manifest.get('created') or 0))}" if manifest else ""
    return (
        f"--out {str(out)!r} already holds another run{when}: trainspect never merges or overwrites runs; "
        "choose a new --out (or leave it out: runs/<script>-<time>)"
    )


def _add_info(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "info",
        help="summarise a run directory (steps, tensors, workers)",
        description="Summarise a run directory: steps, modes, workers, tensors, collections.",
        epilog=_INFO_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", help="the run directory (trainspect's or smdebug's)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
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
        text = " ".join(str(exc).split()).removeprefix("create_trial: ")
        print(f"trainspect info: {text}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=1) if args.json else _info_text(doc))
    return 0


def _summary(trial: Any) -> dict[str, Any]:
    from trainspect.rules.counts import step_counts

    return {
        "path": str(trial.path),
        "steps": len(trial.steps()),
        "steps_per_mode": step_counts(trial),
        "modes": [m.name for m in trial.modes()],
        "workers": trial.workers(),
        "ranks": _ranks(trial),
        "tensors": trial.tensor_names(),
        "collections": sorted(trial.collections()),
        "ended": trial.job_ended,
        "problems": trial.problems,
    }


def _ranks(trial: Any) -> int:
    """The job's ranks (``workers`` lists those that recorded tensors: rank 0 alone with ``include_workers="one"``)."""
    from trainspect.store.layout import RunLayout
    from trainspect.store.manifest import rank_count, read_manifest, read_worker_manifests

    tensors = len(trial.workers())
    if not isinstance(trial.path, Path) or not trial.path.is_dir():
        return tensors  # a run in an object store: its tensor workers
    layout = RunLayout(trial.path)
    return rank_count(read_manifest(layout), read_worker_manifests(layout), tensors)


def _info_text(doc: dict[str, Any]) -> str:
    """``key: value`` lines; the steps per mode (never TRAIN and EVAL added up), the problems one per line."""
    from trainspect.rules.counts import steps_text

    lines = []
    for key, value in doc.items():
        if key == "steps":
            lines.append(f"steps: {steps_text(doc['steps_per_mode'])} ({value} global steps)")
        elif key == "problems":
            lines.extend(f"problem: {p}" for p in value)
        elif key != "steps_per_mode":
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``trainspect`` command."""
    from trainspect import __version__

    parser = argparse.ArgumentParser(
        prog="trainspect",
        description="Local debugger and profiler for training jobs.",
        epilog="'trainspect COMMAND --help': options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"trainspect {__version__}")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", title="commands")
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


def commands_text(parser: argparse.ArgumentParser) -> str:
    """The usage line and each command with its one-line help."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = [(c.dest, c.help or "") for c in sub._choices_actions]
    width = max(len(name) for name, _ in helps)
    lines = ["usage: trainspect COMMAND [options]   (trainspect COMMAND --help: options and examples)", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in helps]
    lines += ["", "  --version  print trainspect's version"]
    return "\n".join(lines)


def url_arguments(args: argparse.Namespace) -> list[str]:
    """The run arguments (``dir``, ``a``, ``b``) given as URLs (``s3://...``)."""
    return [name for name in _RUN_ARGS if is_url(getattr(args, name, None))]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainspect`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:  # bare ``trainspect``: the commands, one line each
        print(commands_text(parser))
        return 0
    try:
        if url_arguments(args):  # run arguments given as URLs: the command runs on local mirrors
            from trainspect.store.remote.cli import run_with_urls

            return quiet_broken_pipe(lambda: run_with_urls(args, args.func))
        return quiet_broken_pipe(lambda: int(args.func(args)))
    except KeyboardInterrupt:  # Ctrl-C ends a command with the shell's status, not a traceback
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
