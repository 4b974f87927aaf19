"""A Hugging Face ``Trainer`` script with no trainspect in it: a tiny BERT built from a config (random weights, no
downloads), synthetic token ids, gradient_accumulation_steps=2, then ``evaluate()``.
``python hf_trainer_train.py <result.json>`` writes what the script itself saw."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


class _Data(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 50, (n, 8), generator=gen)
        self.labels = torch.randint(0, 2, (n,), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(8, dtype=torch.long), "labels": self.labels[i]}


class _Grads(TrainerCallback):
    def __init__(self, model: Any) -> None:
        self.model, self.grads = model, []

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.grads.append(self.model.classifier.bias.grad.tolist())


def main(result: str | Path, on_model: Any = None) -> dict[str, Any]:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    if on_model is not None:
        on_model(model)
    args = TrainingArguments(
        output_dir=str(Path(result).parent / "hf"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=3,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    grads = _Grads(model)
    trainer = Trainer(model=model, args=args, train_dataset=_Data(24, 1), eval_dataset=_Data(8, 2), callbacks=[grads])
    trainer.train()
    metrics = trainer.evaluate()
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    saw = {"logged_losses": logged, "grads": grads.grads, "eval_loss": metrics["eval_loss"]}
    Path(result).write_text(json.dumps(saw))
    return saw


if __name__ == "__main__":
    main(sys.argv[1])
