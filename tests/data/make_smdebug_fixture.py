"""Generate small smdebug 1.0.34 trial directories used as test fixtures (run once, with smdebug's own venv).

    bench-env/smdebug/bin/python tests/data/make_smdebug_fixture.py

Writes ``tests/data/smdebug_trial_raw/`` (weights, biases, gradients, losses every step; 4 TRAIN then 2 EVAL
steps), ``tests/data/smdebug_trial_reductions/`` (reductions only, every 2 steps) and, next to each, an
``expected.json`` of values this script recorded itself from the model (not read back through smdebug).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("SMDEBUG_TRAINING_END_DELAY_REFRESH", "0")

import numpy as np  # noqa: E402
import smdebug.pytorch as smd  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
REDUCTIONS = {"reductions": ["min", "max", "mean"], "abs_reductions": ["mean"], "norms": ["l2"]}


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss()


def _reductions(arr: np.ndarray) -> dict[str, float]:
    a = arr.astype(np.float64)
    return {
        "min": float(a.min()),
        "max": float(a.max()),
        "mean": float(a.mean()),
        "abs_mean": float(np.abs(a).mean()),
        "l2": float(np.sqrt((a * a).sum())),
    }


def _train(hook: smd.Hook, train_steps: int, eval_steps: int) -> dict[str, dict[str, object]]:
    model, opt, loss_fn = _model()
    hook.register_module(model)
    hook.register_loss(loss_fn)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
    expected: dict[str, dict[str, object]] = {}
    step = 0
    hook.set_mode(smd.modes.TRAIN)
    for _ in range(train_steps):
        # A weight at step N is the value used in step N's forward pass (before the update).
        weights = {f"Sequential_{n}": p.detach().clone().numpy() for n, p in model.named_parameters()}
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        grads = {f"gradient/Sequential_{n}": p.grad.detach().clone().numpy() for n, p in model.named_parameters()}
        opt.step()
        expected[str(step)] = {"mode": "TRAIN", "loss": loss.item(), **grads, **weights}
        step += 1
    hook.set_mode(smd.modes.EVAL)
    with torch.no_grad():
        for _ in range(eval_steps):
            loss = loss_fn(model(x), y)
            weights = {f"Sequential_{n}": p.detach().clone().numpy() for n, p in model.named_parameters()}
            expected[str(step)] = {"mode": "EVAL", "loss": loss.item(), **weights}
            step += 1
    hook.close()
    return expected


def _jsonable(expected: dict[str, dict[str, object]], reduce_only: bool) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for step, items in expected.items():
        doc: dict[str, object] = {}
        for name, value in items.items():
            if isinstance(value, np.ndarray):
                doc[name] = _reductions(value) if reduce_only else value.tolist()
            else:
                doc[name] = value
        out[step] = doc
    return out


def make(name: str, save_interval: int, reduction: bool) -> None:
    out = HERE / name
    shutil.rmtree(out, ignore_errors=True)
    hook = smd.Hook(
        out_dir=str(out),
        save_config=smd.SaveConfig(save_interval=save_interval),
        include_collections=["weights", "biases", "gradients", "losses"],
        reduction_config=smd.ReductionConfig(**REDUCTIONS) if reduction else None,
    )
    expected = _train(hook, train_steps=4, eval_steps=2)
    doc = {"save_interval": save_interval, "reductions_only": reduction, "steps": _jsonable(expected, reduction)}
    (HERE / f"{name}.expected.json").write_text(json.dumps(doc, indent=1))
    print(name, "written", file=sys.stderr)


if __name__ == "__main__":
    make("smdebug_trial_raw", save_interval=1, reduction=False)
    make("smdebug_trial_reductions", save_interval=2, reduction=True)
