"""The trainspect demo: a learning rate far too high, caught by the rules; the fixed run, clean; the two compared.

bash scripts/demo.sh            # or: .venv/bin/python examples/demo.py --out runs/demo

1. ``diverged``: SGD with a learning rate of 3.0 (after a 100-step warm-up). The loss rises, then overflows to
   Inf/NaN; ExplodingTensor, evaluated live by the hook, stops the training (``StopTraining``) and the verdicts
   say why.
2. ``fixed``: the same model, data, schedule and seed with a learning rate of 0.05 — the rules find no issues.
3. ``trainspect compare diverged fixed``: the two runs side by side.

Both runs are profiled (system metrics every 100 ms, DataLoader waits, the detailed operator profile at step 5
and the Python profile at steps 9-11),
so every panel of the report and of TensorBoard's trainspect tab has data; both are logged to a local MLflow
store (sqlite, no server). Everything is offline: synthetic data, no downloads.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

import trainspect as ts

LR_DIVERGED, LR_FIXED = 3.0, 0.05
WARMUP_STEPS = 100
HIDDEN = 512
BATCH = 256


def make_data(n: int = 2048, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable synthetic classification set: 4 Gaussian blobs in 20 dimensions."""
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(4, 20, generator=gen) * 0.6
    labels = torch.randint(0, 4, (n,), generator=gen)
    return centers[labels] + torch.randn(n, 20, generator=gen), labels


def train(out_dir: Path, lr: float, steps: int) -> tuple[int, str | None]:
    """Train the MLP with trainspect watching; return the steps done and why training stopped (if it did)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 4))
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))
    x, y = make_data()
    train_set, held_out = TensorDataset(x[:1792], y[:1792]), (x[1792:], y[1792:])
    hook = ts.torch.Hook(
        str(out_dir),
        save_config=ts.SaveConfig(save_interval=10),
        include_collections=["weights", "biases", "gradients", "losses"],
        rules=[
            ts.rules.ExplodingTensor(actions=["StopTraining"]),
            ts.rules.VanishingGradient(),
            ts.rules.LossNotDecreasing(),
        ],
        profiler_config=ts.ProfilerConfig(
            system_monitor_interval_millis=100, framework_profile_params=ts.profiler.FrameworkProfile()
        ),
    )
    step, stopped = 0, None
    try:
        with hook:
            hook.register_module(model)
            hook.register_loss(loss_fn)
            while step < steps:
                for xb, yb in _loader(train_set):
                    _train_step(model, loss_fn, opt, xb, yb)
                    warmup.step()
                    step += 1
                    if step % 100 == 0:
                        _evaluate(model, loss_fn, *held_out)
                    if step >= steps:
                        break
    except ts.TrainingStopped as exc:
        stopped = str(exc)
    return step, stopped


def _loader(data: TensorDataset) -> DataLoader:
    """Shuffled batches of ``BATCH``, each read from the tensors at once (one indexing, nothing to collate).

    A DataLoader reading 256 samples one by one and stacking them spends about as long per batch as this small
    model's step, so the input wait would be a large share of the step cycle (more so on a busy machine) and the
    Dataloader rule would rightly ask for more loader processes. Reading whole batches keeps the input pipeline
    out of the way; the batches are the same as ``DataLoader(data, batch_size=BATCH, shuffle=True)`` gives.
    """
    return DataLoader(data, sampler=BatchSampler(RandomSampler(data), BATCH, drop_last=False), batch_size=None)


def _train_step(model: nn.Module, loss_fn: Any, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor) -> None:
    model.train()
    opt.zero_grad()
    loss_fn(model(xb), yb).backward()
    opt.step()


def _evaluate(model: nn.Module, loss_fn: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    model.eval()
    with torch.no_grad():
        loss_fn(model(x), y)


def _in_mlflow(out: Path, name: str, fn: Any) -> tuple[Any, str]:
    """Run ``fn`` inside an MLflow run of the embedded local store; the hook logs to the active run."""
    import mlflow

    store = out.parent
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    experiment = mlflow.get_experiment_by_name("trainspect-demo")
    if experiment is None:
        experiment_id = mlflow.create_experiment("trainspect-demo", (store / "mlartifacts").resolve().as_uri())
    else:
        experiment_id = experiment.experiment_id
    with mlflow.start_run(experiment_id=experiment_id, run_name=name) as run:
        result = fn()
    return result, run.info.run_id


def _show(title: str, run_dir: Path, steps: int, stopped: str | None, run_id: str) -> None:
    import mlflow

    print(f"\n== {title}: {run_dir}")
    print(f"  {steps} steps" + (f"; {stopped}" if stopped else ""))
    for v in ts.rules.load_verdicts(run_dir):
        if v.status is not ts.rules.Status.NO_DATA:
            print(f"  {v.rule:26s} {v.status.value:14s} {v.message[:100]}")
    issues = mlflow.tracking.MlflowClient().get_run(run_id).data.tags.get("trainspect.issues", "")
    print(f"  MLflow run {run_id}: trainspect.issues = {issues!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description="trainspect demo")
    parser.add_argument("--out", default="runs/demo", help="folder of the two runs and the MLflow store")
    parser.add_argument("--steps", type=int, default=300, help="training steps of each run")
    args = parser.parse_args()
    root = Path(args.out).resolve()
    if root.exists():
        shutil.rmtree(root)  # the demo owns this directory; trainspect itself never overwrites a run
    root.mkdir(parents=True)
    bad, good = root / "diverged", root / "fixed"
    (steps_bad, stopped), id_bad = _in_mlflow(bad, "diverged", lambda: train(bad, LR_DIVERGED, args.steps))
    _show(f"1. learning rate {LR_DIVERGED:g} (far too high)", bad, steps_bad, stopped, id_bad)
    (steps_good, _), id_good = _in_mlflow(good, "fixed", lambda: train(good, LR_FIXED, args.steps))
    _show(f"2. learning rate {LR_FIXED:g} (fixed)", good, steps_good, None, id_good)
    print(f"\n== 3. trainspect compare {bad} {good}")
    from trainspect.cli import main as trainspect_main

    trainspect_main(["compare", str(bad), str(good), "-o", str(root / "compare.html")])
    print("\nopen them:")
    print(f"  reports:     {bad / 'report.html'}  {good / 'report.html'}")
    print(f"  TensorBoard: .venv/bin/tensorboard --logdir {root} --host 127.0.0.1   (tab: trainspect)")
    print(f"  MLflow:      .venv/bin/mlflow ui --backend-store-uri sqlite:///{root / 'mlflow.db'} --host 127.0.0.1")
    print(f"  Python:      trial = trainspect.create_trial({str(good)!r})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
