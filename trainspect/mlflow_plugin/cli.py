"""``trainspect mlflow-sync``: send an MLflow run what it misses of a run directory (MLflow loads on use)."""

from __future__ import annotations

import argparse
import sys

from trainspect._progress import Progress

__all__ = ["add_parser"]

_RAW = argparse.RawDescriptionHelpFormatter
_SYNC_EXAMPLES = """examples:
  trainspect mlflow-sync runs/train-20260101-120000
  trainspect mlflow-sync runs/train-20260101-120000 --run-id 4b7c...d2 --tracking-uri http://127.0.0.1:5000"""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``mlflow-sync`` subcommand."""
    s = sub.add_parser(
        "mlflow-sync",
        help="upload a run directory to an MLflow run (after an outage)",
        description="Send an MLflow run what it misses of a run directory, each point once.",
        epilog=_SYNC_EXAMPLES,
        formatter_class=_RAW,
    )
    s.add_argument("dir", help="run directory")
    s.add_argument("--run-id", help="the MLflow run (default: the one recorded in DIR/mlflow/run.json)")
    s.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI / mlflow's default)")
    s.add_argument("--price-per-hour", type=float, default=None, metavar="P")
    s.add_argument("--artifacts", action="store_true", help="also upload the whole run directory as artifacts")
    s.set_defaults(func=_sync)


def _sync(args: argparse.Namespace) -> int:
    try:
        from trainspect.mlflow_plugin.sync import sync_run
    except ImportError as exc:
        print(
            f"trainspect mlflow-sync: MLflow is not installed ({exc}); pip install trainspect[mlflow]", file=sys.stderr
        )
        return 2
    try:
        with Progress("mlflow-sync") as bar:
            run_id = sync_run(
                args.dir,
                run_id=args.run_id,
                tracking_uri=args.tracking_uri,
                price_per_hour=args.price_per_hour,
                artifacts=args.artifacts,
                progress=bar.stage,
            )
    except (ValueError, FileNotFoundError) as exc:
        print(f"trainspect mlflow-sync: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # MLflow's own errors (unknown run, server refusing): a message, not a traceback
        print(f"trainspect mlflow-sync: MLflow refused the upload: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"uploaded {args.dir} to MLflow run {run_id}")
    return 0
