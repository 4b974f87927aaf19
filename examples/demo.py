"""The trainspect demo: instrumented training -> rules -> report -> MLflow run -> how to open them.

bash scripts/demo.sh            # or: .venv/bin/python examples/demo.py --out runs/demo
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manual_hook import train  # noqa: E402

import trainspect as ts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description="trainspect demo")
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)  # the demo owns this directory; trainspect itself never overwrites a run
    run_id, tracking_uri = _train_in_mlflow(out, args.steps)
    trial = ts.create_trial(out)
    print(f"\nrun directory: {out}")
    print(f"  {len(trial.steps())} steps, {len(trial.tensor_names())} tensors, collections: "
          f"{', '.join(sorted(trial.collections()))}")  # fmt: skip
    loss = trial.tensor(trial.tensor_names(collection="losses")[0])
    train_steps = loss.steps(ts.modes.TRAIN)
    first, last = loss.value(train_steps[0], ts.modes.TRAIN), loss.value(train_steps[-1], ts.modes.TRAIN)
    print(f"  loss went from {first.item():.3f} (step 0) to {last.item():.3f} (step {train_steps[-1]})")
    print("rules:")
    for verdict in ts.rules.load_verdicts(out):
        print(f"  {verdict.rule:28s} {verdict.status.value:14s} {verdict.message[:90]}")
    print("\nopen it in TensorBoard:")
    print(f"  .venv/bin/tensorboard --logdir {out.parent} --host 127.0.0.1")
    print("query it from Python:")
    print(f"  trial = trainspect.create_trial({str(out)!r})")
    print(f"\nreport: {out / 'report.html'}  (open it in any browser; also in the MLflow run under trainspect/)")
    print(f"MLflow run {run_id} in the local store {tracking_uri}; open it with:")
    print(f"  .venv/bin/mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1")


def _train_in_mlflow(out: Path, steps: int) -> tuple[str, str]:
    """Train inside an MLflow run of the embedded local store (sqlite, no server); the hook logs to it."""
    import mlflow

    store = out.parent
    tracking_uri = f"sqlite:///{store / 'mlflow.db'}"
    mlflow.set_tracking_uri(tracking_uri)
    experiment = mlflow.get_experiment_by_name("trainspect-demo")
    if experiment is None:
        experiment_id = mlflow.create_experiment("trainspect-demo", (store / "mlartifacts").resolve().as_uri())
    else:
        experiment_id = experiment.experiment_id
    with mlflow.start_run(experiment_id=experiment_id, run_name=out.name) as run:
        # rules and profiling on: the hook evaluates the default rules live, writes report.html at close and,
        # seeing the active run, logs losses, system metrics, rule tags, summary metrics and the report to it
        train(str(out), steps, rules="default", profile=True)
    return run.info.run_id, tracking_uri


if __name__ == "__main__":
    main()
