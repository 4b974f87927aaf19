"""A plain PyTorch training script with no trainspect in it.

Run it under trainspect with zero script change:

    trainspect run --out runs/unmodified -- python examples/unmodified_train.py --steps 200

Losses (computed here with ``F.cross_entropy``) are recorded every step; the optimizer marks the steps.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    centers = torch.randn(4, 20) * 2
    labels = torch.randint(0, 4, (512,))
    data = centers[labels] + torch.randn(512, 20)
    for step in range(args.steps):
        idx = torch.randint(0, 512, (32,))
        opt.zero_grad()
        loss = F.cross_entropy(model(data[idx]), labels[idx])
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
