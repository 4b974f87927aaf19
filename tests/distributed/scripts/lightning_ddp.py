"""Lightning ``Trainer(strategy=..., devices=2, accelerator="cpu")`` with a trainspect hook in one of three places.

    python lightning_ddp.py OUT EXPECTED --strategy {ddp,ddp_spawn} --hook {before-trainer,callback,none}

``before-trainer``: the hook is created and registered on the model before the Trainer exists (rank 0's process;
Lightning's launcher starts or spawns the other rank). ``callback``: created in ``Callback.setup`` on every rank.
``none``: no trainspect call (run it under ``trainspect run``). Each rank writes its training losses to
``EXPECTED/rank<r>.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Losses(L.Callback):
    """Keeps each rank's losses as Lightning saw them; ``hook="callback"`` also creates the hook here."""

    def __init__(self, out: str, expected: str, with_hook: bool) -> None:
        self.out, self.expected, self.with_hook = out, expected, with_hook
        self.losses: list[float] = []
        self.hook: Any = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.with_hook:
            import trainspect as ts

            self.hook = ts.torch.Hook(self.out, include_workers="all")
            self.hook.register_module(pl_module)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.losses.append(float(outputs["loss"]))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        Path(self.expected, f"rank{trainer.global_rank}.json").write_text(json.dumps(self.losses))
        if self.hook is not None:
            self.hook.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("expected")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--hook", default="before-trainer", choices=["before-trainer", "callback", "none"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    data = torch.utils.data.TensorDataset(torch.randn(96, 6), torch.randn(96, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model = Regression()
    if args.hook == "before-trainer":
        import trainspect as ts

        hook = ts.torch.Hook(args.out, include_workers="all")
        hook.register_module(model)
    trainer = L.Trainer(
        strategy=args.strategy,
        devices=2,
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Losses(args.out, args.expected, args.hook == "callback")],
    )
    trainer.fit(model, loader)


if __name__ == "__main__":
    main()
