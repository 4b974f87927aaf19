"""Hugging Face accelerate on CPU/gloo: ``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2``.

    accelerate launch ... accelerate_train.py OUT EXPECTED [--hook]

``--hook``: a trainspect hook registered on the prepared model; without it, run under ``trainspect run``. Each
process writes its losses to ``EXPECTED/rank<r>.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from accelerate import Accelerator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("expected")
    parser.add_argument("--hook", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = accelerator.prepare(model, opt)
    hook = None
    if args.hook:
        import trainspect as ts

        hook = ts.torch.Hook(args.out, include_workers="all")
        hook.register_module(model)
    gen = torch.Generator().manual_seed(7 + accelerator.process_index)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(torch.randn(8, 5, generator=gen)), torch.zeros(8, 1))
        accelerator.backward(loss)
        opt.step()
        losses.append(loss.item())
    Path(args.expected, f"rank{accelerator.process_index}.json").write_text(json.dumps(losses))
    if hook is not None:
        hook.close()
    accelerator.end_training()


if __name__ == "__main__":
    main()
