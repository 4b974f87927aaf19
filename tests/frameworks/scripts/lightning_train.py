"""A PyTorch Lightning training script with no trainspect in it: fit (accumulate_grad_batches=2) + validate + predict,
checkpoint save and restore. ``python lightning_train.py <result.json>`` writes what the script itself saw."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning as L  # noqa: N812
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.train_losses: list[float] = []
        self.grads: list[list[float]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)  # a functional loss, returned to Lightning
        self.train_losses.append(loss.item())
        return loss

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.grads.append(self.net[2].bias.grad.tolist())

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _loader(n: int, seed: int) -> DataLoader:
    gen = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=gen), torch.randn(n, 1, generator=gen)), batch_size=2)


def main(result: str | Path, on_model: Any = None) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Regressor()
    if on_model is not None:
        on_model(model)
    root = Path(result).parent / "lightning"
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        accumulate_grad_batches=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )
    trainer.fit(model, _loader(12, 1), _loader(4, 2))  # 6 batches, 3 optimizer steps per epoch; 2 val batches
    trainer.validate(model, _loader(4, 2), verbose=False)
    predictions = trainer.predict(model, _loader(6, 3))
    ckpt = root / "final.ckpt"
    trainer.save_checkpoint(ckpt)
    restored = Regressor.load_from_checkpoint(ckpt)
    restored_state = restored.state_dict()
    same = all(torch.equal(value, restored_state[key]) for key, value in model.state_dict().items())
    saw = {
        "train_losses": model.train_losses,
        "grads": model.grads,
        "predictions": len(predictions or []),
        "restored_equal": same,
        "checkpoints": sorted(p.name for p in root.rglob("*.ckpt")),
    }
    Path(result).write_text(json.dumps(saw))
    return saw


if __name__ == "__main__":
    main(sys.argv[1])
