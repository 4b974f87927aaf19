"""Issue 28: Overtraining and Overfit judge evaluation losses with the noise the data shows, never an assumed one.

Each case is a small real training on the CPU, recorded through the torch Hook (losses only) and judged offline:
a validation loss that falls, even slowly, in evaluations of one batch (gcn, an MLP with SGD) leaves Overtraining
quiet, as Keras/Lightning EarlyStopping with the same patience and min_delta would; one that rises while training
improves triggers it. A validation loss orders of magnitude above the training loss is Overfit's finding even at
the first evaluation, and a training loss that diverges is not called overfitting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from rules_synth import step, tensor
from torch import nn

import trainspect as ts
from trainspect.config import SaveConfig
from trainspect.modes import ModeKeys
from trainspect.rules import LossNotDecreasing, Overfit, Overtraining, Status, evaluate
from trainspect.rules.engine import evaluate_steps

torch.set_num_threads(1)

Data = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _task(n: int = 256, n_eval: int = 128, noise: float = 0.2, seed: int = 0) -> Data:
    """Gaussian inputs labelled by a random linear teacher (a share ``noise`` of the labels random)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(16, 4, generator=g)
    x = torch.randn(n + n_eval, 16, generator=g)
    y = (x @ w).argmax(1)
    flip = torch.rand(n + n_eval, generator=g) < noise
    y = torch.where(flip, torch.randint(0, 4, (n + n_eval,), generator=g), y)
    return x[:n], y[:n], x[n:], y[n:]


def _train(
    out: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    data: Data,
    steps: int,
    eval_every: int,
    batch: int | None = None,
    eval_batch: int | None = None,
) -> Path:
    """Train (full batch unless ``batch``) and evaluate every ``eval_every`` steps, recording the losses."""
    x, y, x_eval, y_eval = data
    loss_fn = nn.CrossEntropyLoss()
    with ts.torch.Hook(
        str(out), export_tensorboard=False, save_config=SaveConfig(save_interval=1), include_collections=["losses"]
    ) as hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for s in range(steps):
            model.train()
            i = (s * batch) % x.shape[0] if batch else 0
            xb, yb = (x[i : i + batch], y[i : i + batch]) if batch else (x, y)
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
            if (s + 1) % eval_every == 0:
                model.eval()
                with torch.no_grad():
                    size = eval_batch or x_eval.shape[0]
                    for j in range(0, x_eval.shape[0], size):
                        loss_fn(model(x_eval[j : j + size]), y_eval[j : j + size])
    return out


def _judge(run: Path, *rules: ts.rules.Rule) -> dict[str, ts.rules.Verdict]:
    return {v.rule: v for v in evaluate(ts.create_trial(str(run)), list(rules), write=False)}


def _eval_losses(run: Path) -> list[float]:
    trial = ts.create_trial(str(run))
    (name,) = [n for n in trial.tensor_names() if n != "loss" and "micro_batches" not in n]
    t = trial.tensor(name)
    return [float(t.value(s, mode=ModeKeys.EVAL)) for s in trial.steps(mode=ModeKeys.EVAL)]


def _gcn_like(out: Path, steps: int, lr: float) -> Path:
    """Full-batch training with dropout, one forward of the whole held-out set per evaluation (pytorch/examples gcn)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4))
    return _train(out, model, torch.optim.Adam(model.parameters(), lr=lr), _task(), steps, eval_every=10)


def _mlp_sgd(out: Path, lr: float) -> Path:
    """Minibatch SGD, the held-out set evaluated in one batch every 10 steps."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return _train(out, model, torch.optim.SGD(model.parameters(), lr=lr), _task(seed=1), 280, 10, batch=32)


TRAININGS: dict[str, Callable[[Path], Path]] = {
    "gcn_full_batch": lambda out: _gcn_like(out, 200, 1.5e-3),
    "mlp_sgd": lambda out: _mlp_sgd(out, 0.02),
    "mlp_sgd_slow": lambda out: _mlp_sgd(out, 0.004),
}


@pytest.mark.parametrize("name", list(TRAININGS))
def test_issue_28_overtraining_is_quiet_while_a_one_batch_validation_loss_falls(name: str, tmp_path: Path) -> None:
    run = TRAININGS[name](tmp_path / name)
    losses = _eval_losses(run)
    assert len(losses) >= 12 and all(np.diff(losses) < 0), losses  # falls monotonically
    v = _judge(run, Overtraining())["Overtraining"]
    assert v.status is Status.NO_ISSUES_FOUND, v.message
    # smdebug's literal rule (single saved steps) still fires on the minibatch noise of the training loss
    if name.startswith("mlp"):
        assert _judge(run, Overtraining(literal=True))["Overtraining"].status is Status.ISSUES_FOUND


def test_issue_28_overtraining_fires_when_the_validation_loss_rises_while_training_improves(tmp_path: Path) -> None:
    run = _gcn_like(tmp_path / "run", 260, 3e-3)
    losses = _eval_losses(run)
    best = int(np.argmin(losses))
    assert len(losses) - 1 - best >= 10 and losses[-1] > losses[best] + 0.02, losses  # rises after its best
    v = _judge(run, Overtraining())["Overtraining"]
    assert v.status is Status.ISSUES_FOUND, v.message
    assert "10 evaluation(s) without improvement" in v.message


def _bn_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 64),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Linear(64, 4),
    )


@pytest.mark.parametrize("broken", [True, False])
def test_issue_28_overfit_names_a_validation_loss_orders_of_magnitude_above_training(
    broken: bool, tmp_path: Path
) -> None:
    """One evaluation whose held-out inputs skipped the training set's normalisation (raw readings in the
    thousands): BatchNorm's running statistics no longer fit and the validation loss is ~3,000x the training
    loss, as in SageMaker's resnet50 example at lr 1.0 (~15,700 against ~5). The same run evaluated on
    normalised inputs is quiet."""
    x, y, x_eval, y_eval = _task(n=512, noise=0.0)
    data = (x, y, x_eval * 5000.0 if broken else x_eval, y_eval)
    model = _bn_mlp()
    run = _train(
        tmp_path / "run",
        model,
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        data,
        40,
        40,
        batch=32,
        eval_batch=64,
    )
    verdicts = _judge(run, Overfit(), Overtraining(), LossNotDecreasing())
    v = verdicts["Overfit"]
    if broken:
        assert v.status is Status.ISSUES_FOUND and v.triggers == 1, v.message
        assert "the evaluation itself is broken" in v.message and "x the training loss" in v.message
    else:
        assert all(r.status is Status.NO_ISSUES_FOUND for r in verdicts.values()), [
            r.message for r in verdicts.values()
        ]


def test_issue_28_overfit_does_not_call_a_diverging_training_overfitting(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)  # the training loss rises 2.6 -> 12
    run = _train(tmp_path / "run", model, opt, _task(n=1024), 200, 20, batch=32, eval_batch=64)
    verdicts = _judge(run, Overfit(), LossNotDecreasing())
    assert verdicts["LossNotDecreasing"].status is Status.ISSUES_FOUND  # divergence is its finding
    v = verdicts["Overfit"]
    assert v.status is Status.NO_ISSUES_FOUND and "the run diverges, it does not overfit" in v.message, v.message


def test_issue_28_overfit_still_names_a_real_overfit(tmp_path: Path) -> None:
    """The counterpart: 48 noisy samples memorised by a wide MLP; the training loss falls as validation rises."""
    torch.manual_seed(17)
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    data = _task(n=48, n_eval=256, noise=0.3, seed=17)
    run = _train(
        tmp_path / "run", model, torch.optim.Adam(model.parameters(), lr=1e-3), data, 300, 50, batch=16, eval_batch=64
    )
    v = _judge(run, Overfit())["Overfit"]
    assert v.status is Status.ISSUES_FOUND and "rising" in v.message and "diverges" not in v.message, v.message


# --- the same decisions on synthetic series (pure functions) ------------------------------------------------
def _evaluations(
    val: list[float], train: Callable[[int], float] = lambda k: 1.0 - 0.01 * k, batches: int = 1, spread: float = 0.0
) -> list:
    """Three training steps, then an evaluation of ``batches`` EVAL steps, per value of ``val``."""
    out, n = [], 0
    for k, v in enumerate(val):
        for _ in range(3):
            out.append(step(n, [tensor("loss", np.float32(train(k)), ["losses"])], ModeKeys.TRAIN))
            n += 1
        for b in range(batches):
            out.append(step(n, [tensor("loss", np.float32(v + spread * (b - batches / 2)), ["losses"])], ModeKeys.EVAL))
            n += 1
    out.append(step(n, [tensor("loss", np.float32(train(len(val))), ["losses"])], ModeKeys.TRAIN))
    return out


def _early_stopping(val: list[float], patience: int, min_delta: float) -> bool:
    """Keras/Lightning EarlyStopping (mode 'min'): whether it stops within these evaluations."""
    best, wait = float("inf"), 0
    for v in val:
        if v < best - min_delta:
            best, wait = v, 0
        else:
            wait += 1
            if wait >= patience:
                return True
    return False


CURVES = {
    "falling": [2.0 * 0.97**k for k in range(30)],
    "falling_fast_then_slow": [1.0 + 0.9 * 0.8**k for k in range(30)],
    "rising_after_best": [1.5 - 0.05 * k for k in range(10)] + [1.05 + 0.02 * k for k in range(15)],
    "plateau": [1.5 - 0.05 * k for k in range(8)] + [1.1] * 15,
}


@pytest.mark.parametrize("curve", list(CURVES))
def test_issue_28_overtraining_agrees_with_early_stopping_on_monotone_validation_curves(curve: str) -> None:
    val = CURVES[curve]
    stops = _early_stopping(val, patience=10, min_delta=0.01)
    v = evaluate_steps(Overtraining(), _evaluations(val))
    assert (v.status is Status.ISSUES_FOUND) == stops, (curve, v.message)
    # several batches an evaluation: the same decision
    v = evaluate_steps(Overtraining(), _evaluations(val, batches=4, spread=0.05))
    assert (v.status is Status.ISSUES_FOUND) == stops, (curve, v.message)


def test_issue_28_a_slow_fall_below_min_delta_is_still_a_fall() -> None:
    """EarlyStopping with min_delta 0.01 would stop here; the validation loss still falls, so the rule does not."""
    val = [1.0 - 0.0005 * k for k in range(20)]
    assert _early_stopping(val, patience=10, min_delta=0.01)
    v = evaluate_steps(Overtraining(), _evaluations(val))
    assert v.status is Status.NO_ISSUES_FOUND and "still fall" in v.message, v.message


def test_issue_28_too_few_evaluations_say_so_instead_of_triggering() -> None:
    v = evaluate_steps(Overtraining(), _evaluations([1.0, 1.2, 1.4]))
    assert v.status is Status.NO_ISSUES_FOUND and "too few to tell" in v.message, v.message
    # two evaluations of one batch: the noise cannot be estimated, a rise is not called one
    v = evaluate_steps(Overfit(), _evaluations([1.0, 1.5], train=lambda k: 0.5))
    assert v.status is Status.NO_ISSUES_FOUND and "too few evaluations of one batch" in v.message, v.message
    # with enough of them the series' own noise decides
    v = evaluate_steps(Overfit(), _evaluations([1.0, 0.9, 0.95, 0.9, 1.5], train=lambda k: 0.5))
    assert v.status is Status.ISSUES_FOUND and "rising" in v.message, v.message
    noisy = [1.0, 0.7, 1.1, 0.6, 1.2, 0.65, 1.15]
    assert evaluate_steps(Overfit(), _evaluations(noisy, train=lambda k: 0.5)).status is Status.NO_ISSUES_FOUND
