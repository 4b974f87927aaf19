"""Ray Train ``TorchTrainer`` with 2 CPU workers (gloo), recorded with ``trainspect.autolog()`` in the loop.

    python ray_train.py OUT EXPECTED [--autolog]

``--autolog``: the training function calls ``trainspect.autolog(out_dir=OUT)`` (OUT may be relative: Ray runs the
function in its session directory); without it, run under ``trainspect run``. Each worker writes its losses to
``EXPECTED/rank<r>.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import ray
import torch
from ray.train import ScalingConfig, get_context
from ray.train.torch import TorchTrainer, prepare_model


def train_func(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    if config["autolog"]:
        import trainspect

        trainspect.autolog(out_dir=config["out"], include_workers="all")
    rank = get_context().get_world_rank()
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(torch.randn(8, 4, generator=gen)), torch.zeros(8, 2))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    Path(config["expected"], f"rank{rank}.json").write_text(json.dumps(losses))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("expected")
    parser.add_argument("--autolog", action="store_true")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    config = {"out": args.out, "expected": str(Path(args.expected).resolve()), "autolog": args.autolog}
    TorchTrainer(
        train_func,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
    ).fit()
    ray.shutdown()


if __name__ == "__main__":
    main()
