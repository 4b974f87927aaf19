"""A SageMaker Debugger script in smdebug's idiom (as the public examples): the hook from the JSON config that
SageMaker writes (``SMDEBUG_CONFIG_FILE_PATH``), ``register_module``/``register_loss``, ``set_mode``, ``save_scalar``
with ``sm_metric``. ``python sagemaker_train.py <result.json>`` writes what the script itself saw."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import smdebug.pytorch as smd
import torch
import torch.nn.functional as F  # noqa: N812
from smdebug import modes
from torch import nn

torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


def _batches(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)) for _ in range(n)]


def main(result: str | Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Net()
    hook = smd.Hook.create_from_json_file()
    hook.register_module(model)
    criterion = nn.CrossEntropyLoss()
    hook.register_loss(criterion)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    saw: dict[str, Any] = {"train_losses": [], "eval_losses": [], "grads": []}
    for _ in range(2):
        hook.set_mode(modes.TRAIN)
        model.train()
        for x, y in _batches(4, 1):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            saw["grads"].append(model.fc2.bias.grad.tolist())
            optimizer.step()
            saw["train_losses"].append(loss.item())
        hook.set_mode(modes.EVAL)
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in _batches(2, 2):
                out = model(x)
                saw["eval_losses"].append(criterion(out, y).item())
                correct += int((out.argmax(1) == y).sum())
        hook.save_scalar("val_accuracy", correct / 16, sm_metric=True)
    Path(result).write_text(json.dumps(saw))
    return saw


if __name__ == "__main__":
    main(sys.argv[1])
