"""Step-time overhead of trainspect's default capture under PyTorch Lightning and the Hugging Face Trainer (issue 15).

    .venv/bin/python benchmarks/bench_frameworks.py [--rounds N] [--steps N]

What ``trainspect run`` does to an unchanged script: ``trainspect.autolog()`` (losses every step) around
``Trainer.fit`` / ``Trainer.train``. One model per framework trains in blocks of ``--steps`` steps, each block a fresh
framework Trainer, with autolog on or off in turn; a round is four blocks (plain, hooked, hooked, plain, or the
mirror image) so that drift linear over the round cancels. A block's figure is the median time of its steps, timed by
a framework callback from batch start to batch end (the Trainer's own set-up is not a step). Reported: the median of
the per-round ratios hooked/plain (target <= 1.03x).

Also: the smdebug compatibility layer's cost per step — W1 (benchmarks/_workloads.py) with ``smdebug.pytorch.Hook``
vs ``trainspect.torch.Hook``, each toggled against the plain loop as in bench_hook.py; the difference of the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import trainspect as ts  # noqa: E402

torch.set_num_threads(1)


def _toggled(block: Callable[[bool], float], rounds: int) -> tuple[float, list[float]]:
    block(False)
    block(True)  # warm-up of both paths
    ratios = []
    for r in range(rounds):
        order = (False, True, True, False) if r % 2 == 0 else (True, False, False, True)
        times: dict[bool, list[float]] = {False: [], True: []}
        for hooked in order:
            times[hooked].append(block(hooked))
        ratios.append(statistics.fmean(times[True]) / statistics.fmean(times[False]))
    return statistics.median(ratios), ratios


def _with_autolog(hooked: bool, run: Callable[[], float]) -> float:
    if not hooked:
        return run()
    with tempfile.TemporaryDirectory() as out:
        logger = ts.autolog(out_dir=out, smdebug=False)
        try:
            return run()
        finally:
            if logger is not None:
                logger.close()


def lightning_block(steps: int) -> Callable[[bool], float]:
    import lightning as L  # noqa: N812
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Mlp(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Timer(L.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_start(self, *args: Any) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, *args: Any) -> None:
            self.times.append(time.perf_counter() - self.start)

    gen = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(1024, 784, generator=gen), torch.randint(0, 10, (1024,), generator=gen)),
                      batch_size=64)  # fmt: skip
    model = Mlp()

    def run() -> float:
        timer = Timer()
        trainer = L.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])  # fmt: skip
        trainer.fit(model, data)
        return statistics.median(timer.times[2:])

    return lambda hooked: _with_autolog(hooked, run)


def hf_block(steps: int) -> Callable[[bool], float]:
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

    class Data(torch.utils.data.Dataset):
        def __init__(self) -> None:
            gen = torch.Generator().manual_seed(0)
            self.ids, self.labels = torch.randint(1, 500, (512, 32), generator=gen), torch.randint(0, 2, (512,))

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": self.ids[i], "labels": self.labels[i]}

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.times.append(time.perf_counter() - self.start)

    config = BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=32, num_labels=2)  # fmt: skip
    model = BertForSequenceClassification(config)
    out = tempfile.mkdtemp()

    def run() -> float:
        timer = Timer()
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=16, max_steps=steps, report_to=[],
                                 save_strategy="no", use_cpu=True, disable_tqdm=True, logging_strategy="no")  # fmt: skip
        Trainer(model=model, args=args, train_dataset=Data(), callbacks=[timer]).train()
        return statistics.median(timer.times[2:])

    return lambda hooked: _with_autolog(hooked, run)


def compat_cost(rounds: int) -> tuple[float, float]:
    import _workloads as wl

    from trainspect import smdebug_compat

    smdebug_compat.install()
    import smdebug.pytorch as smd

    out = tempfile.mkdtemp()
    plain_hook, _, _ = wl.toggled_ratio("W1", lambda: ts.torch.Hook(os.path.join(out, "a")), rounds, 100)
    smd_hook, _, _ = wl.toggled_ratio("W1", lambda: smd.Hook(out_dir=os.path.join(out, "b")), rounds, 100)
    return plain_hook, smd_hook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    for name, make in (("Lightning Trainer.fit, MLP 784-512-256-10", lightning_block),
                       ("HF Trainer.train, 2-layer BERT (hidden 64)", hf_block)):  # fmt: skip
        ratio, ratios = _toggled(make(args.steps), args.rounds)
        spread = f"{min(ratios):.3f}..{max(ratios):.3f}"
        verdict = "ok" if ratio <= 1.03 else "MISSED"
        print(f"{name:<44} default capture {ratio:.3f}x (rounds {spread})  target <= 1.03x: {verdict}", flush=True)
    plain_hook, smd_hook = compat_cost(max(10, args.rounds * 2))
    print(f"W1 trainspect.torch.Hook {plain_hook:.3f}x vs smdebug.pytorch.Hook (compat layer) {smd_hook:.3f}x: "
          f"difference {smd_hook - plain_hook:+.3f}", flush=True)


if __name__ == "__main__":
    main()
