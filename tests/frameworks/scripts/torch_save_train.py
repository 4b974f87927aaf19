"""A pytorch/examples-style script with no trainspect in it (as word_language_model): manual SGD on ``p.data`` (no
optimizer object), a loss module, ``model.eval()`` evaluation, ``torch.save(model)`` after each epoch and
``torch.load`` of it. ``python torch_save_train.py <result.json>`` writes what the script itself saw."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

torch.set_num_threads(1)


def _batches(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)) for _ in range(n)]


def main(result: str | Path, on_model: Any = None) -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    criterion = nn.CrossEntropyLoss()
    if on_model is not None:
        on_model(model, criterion)
    lr, path = 0.5, Path(result).parent / "model.pt"
    saw: dict[str, Any] = {"train_losses": [], "eval_losses": [], "grads": []}
    for _ in range(2):
        model.train()
        for x, y in _batches(5, 1):
            model.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            saw["grads"].append(model[2].bias.grad.tolist())
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            saw["train_losses"].append(loss.item())
        model.eval()
        with torch.no_grad():
            val = [criterion(model(x), y).item() for x, y in _batches(2, 2)]
        saw["eval_losses"] += val
        with open(path, "wb") as f:  # the whole model, pickled, after each epoch
            torch.save(model, f)
    with open(path, "rb") as f:
        loaded = torch.load(f, weights_only=False)
    saw["loaded_equal"] = all(torch.equal(a, loaded.state_dict()[k]) for k, a in model.state_dict().items())
    saw["loaded_hooks"] = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in loaded.modules())
    Path(result).write_text(json.dumps(saw))
    return saw


if __name__ == "__main__":
    main(sys.argv[1])
