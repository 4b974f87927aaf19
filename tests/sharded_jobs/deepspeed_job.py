"""DeepSpeed ZeRO (``--option 2`` or ``3``) on 2 CPU ranks (gloo), the engine registered with the hook.

The expected weight is the full parameter (ZeRO-3: gathered with ``GatheredParameters``), the expected gradient
``safe_get_full_grad`` after ``engine.backward`` (DeepSpeed's reduced, averaged gradient; a collective, called here
by the script, never by the hook).
"""

from __future__ import annotations

import deepspeed
import torch
from _common import STEPS, Expected, Net, args, batch, finish, hook
from deepspeed.utils import safe_get_full_grad


def main() -> None:
    opts = args()
    stage = int(opts.option)
    torch.manual_seed(0)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
    }
    engine, _, _, _ = deepspeed.initialize(model=Net(), model_parameters=None, config=config)
    h = hook(opts.out)
    h.register_module(engine)
    expected = Expected()
    params = list(engine.module.named_parameters())
    for step in range(STEPS):
        with deepspeed.zero.GatheredParameters([p for _, p in params], enabled=stage == 3):
            expected.add("w", step, {n: p.detach().clone() for n, p in params})
        loss = engine(batch(step)).pow(2).mean()
        engine.backward(loss)
        expected.add("g", step, {n: safe_get_full_grad(p) for n, p in params})
        engine.step()
    finish(h, expected, opts.out)


if __name__ == "__main__":
    main()
