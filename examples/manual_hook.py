"""Record a PyTorch training run with the manual hook (one line per object to register).

python examples/manual_hook.py --out runs/manual --steps 300
tensorboard --logdir runs
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn

import trainspect as ts


def make_data(n: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Return a learnable synthetic classification set (4 Gaussian blobs in 20 dimensions)."""
    gen = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 20, generator=gen) * 2
    labels = torch.randint(0, 4, (n,), generator=gen)
    return centers[labels] + torch.randn(n, 20, generator=gen), labels


def train(out_dir: str, steps: int = 300, lr: float = 0.1, rules: str | None = None, profile: bool = False) -> str:
    """Train a small MLP with the hook and return the run directory.

    Args:
        out_dir: the run directory.
        steps: training steps.
        lr: learning rate.
        rules: ``"default"`` to evaluate the default rules live.
        profile: also record system and framework metrics.
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    data, labels = make_data()
    hook = ts.torch.Hook(
        out_dir,
        save_config=ts.SaveConfig(save_interval=25),
        include_collections=["weights", "biases", "gradients", "losses", "optimizer_variables"],
        rules=rules,
        profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=200) if profile else None,
    )
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for step in range(steps):
            model.train()
            idx = torch.randint(0, len(data), (64,))
            opt.zero_grad()
            loss = loss_fn(model(data[idx]), labels[idx])
            loss.backward()
            opt.step()
            if step % 100 == 99:
                model.eval()
                with torch.no_grad():
                    loss_fn(model(data[:256]), labels[:256])
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/manual")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    out = train(args.out, args.steps)
    trial = ts.create_trial(out)
    print(f"run directory: {Path(out).resolve()}")
    print(f"train steps: {len(trial.steps(ts.modes.TRAIN))}, eval steps: {len(trial.steps(ts.modes.EVAL))}")
    print(f"tensors: {', '.join(trial.tensor_names())}")
    print(f"open TensorBoard with: tensorboard --logdir {Path(out).resolve().parent}")


if __name__ == "__main__":
    main()
