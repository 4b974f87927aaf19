"""DDP on 2 ranks: which gradient is recorded (``--option default|local|nosync|nosync_local``).

The script saves, per rank and saved step, the all-reduced gradient (``g``: what ``optimizer.step()`` applies, the
mean of the ranks' local gradients) and this rank's own local gradient (``l``: computed on the unwrapped module with
``torch.autograd.grad``, which DDP does not see). ``nosync``: two micro-batches per step, the first under
``model.no_sync()``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _common import STEPS, Expected, Net, args, batch, finish, hook
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817


def main() -> None:
    opts = args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(Net())
    h = hook(opts.out, local_gradients=opts.option.endswith("local"))
    h.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = Expected()
    micro = 2 if opts.option.startswith("nosync") else 1
    for step in range(STEPS):
        local = [torch.zeros_like(p) for p in model.parameters()]
        for i in range(micro):
            x = batch(10 * step + i)
            own = torch.autograd.grad(model.module(x).pow(2).mean(), list(model.module.parameters()))
            local = [a + b for a, b in zip(local, own, strict=True)]
            if i < micro - 1:
                with model.no_sync():
                    model(x).pow(2).mean().backward()
            else:
                model(x).pow(2).mean().backward()
        names = [n for n, _ in model.module.named_parameters()]
        expected.add("g", step, {n: p.grad for n, p in zip(names, model.parameters(), strict=True)})
        expected.add("l", step, dict(zip(names, local, strict=True)))
        opt.step()
        opt.zero_grad()
    finish(h, expected, opts.out)


if __name__ == "__main__":
    main()
