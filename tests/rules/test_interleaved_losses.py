"""LossNotDecreasing on loss series that take turns (a GAN's discriminator and generator, one optimizer each).

The hook records one series per optimizer when steps alternate optimizers (``loss/<owner>``, docs/format.md); a
game's losses need not fall, so their rises and stalls are not judged by default; NaN/Inf always are. The real
training (a dcgan-style GAN) is in tests/calibration/real_code.py.
"""

from __future__ import annotations

import math

import numpy as np
from rules_synth import run, step, tensor

from trainspect.rules import LossNotDecreasing
from trainspect.rules.verdict import Status


def _gan(steps: int = 400, nan_at: int | None = None, rng_seed: int = 0) -> list:
    """D steps at even global steps, G steps at odd ones: D hovers at 2 ln 2, G rises as D learns."""
    rng = np.random.default_rng(rng_seed)
    out = []
    for n in range(steps):
        owner = "Discriminator" if n % 2 == 0 else "Generator"
        value = 2 * math.log(2) + 0.05 * rng.standard_normal() if owner == "Discriminator" else 0.5 + n / steps
        if nan_at is not None and n == nan_at:
            value = math.nan
        out.append(step(n, [tensor(f"loss/{owner}", np.float32(value), ["losses"])]))
    return out


def test_alternating_series_are_not_judged_for_rises_and_stalls() -> None:
    verdict = run(LossNotDecreasing(), _gan())
    assert verdict.status is Status.NO_ISSUES_FOUND, verdict.message
    assert "alternates with another optimizer's loss series" in verdict.message


def test_judge_interleaved_judges_them_as_any_loss() -> None:
    verdict = run(LossNotDecreasing(judge_interleaved=True), _gan())
    assert verdict.status is Status.ISSUES_FOUND  # the stalled discriminator and the rising generator
    assert set(verdict.tensors) & {"loss/Discriminator", "loss/Generator"}


def test_a_nan_in_an_alternating_series_still_triggers() -> None:
    verdict = run(LossNotDecreasing(), _gan(nan_at=301))
    assert verdict.status is Status.ISSUES_FOUND and verdict.first_trigger_step == 301
    assert verdict.tensors == ("loss/Generator",)


def test_series_trained_one_after_the_other_are_each_judged() -> None:
    """Layers trained in turn (forward-forward): a block of steps per series is no alternation; a stall is named."""
    steps = []
    for n in range(400):
        name, value = ("loss/layer_0", 1.0 - n / 400) if n < 200 else ("loss/layer_1", 0.9)  # layer 1 never learns
        steps.append(step(n, [tensor(name, np.float32(value + 0.001 * (n % 3)), ["losses"])]))
    verdict = run(LossNotDecreasing(), steps)
    assert verdict.status is Status.ISSUES_FOUND and verdict.tensors == ("loss/layer_1",), verdict.message


def test_a_loss_recorded_at_every_step_beside_a_module_loss_is_judged() -> None:
    """``loss`` and ``CrossEntropyLoss_output_0`` share every step: no alternation; a stalled loss triggers."""
    steps = [
        step(
            n,
            [
                tensor("loss", np.float32(1.0 + 0.01 * (n % 2)), ["losses"]),
                tensor("CrossEntropyLoss_output_0", np.float32(1.0 + 0.01 * (n % 2)), ["losses"]),
            ],
        )
        for n in range(200)
    ]
    assert run(LossNotDecreasing(), steps).status is Status.ISSUES_FOUND


def test_a_loss_with_a_few_nan_steps_is_not_taken_for_an_alternating_series() -> None:
    """Its NaN steps are its own: the rising loss around them is still judged (not excused as a game's)."""
    nans = {50, 120, 190, 260}
    steps = [
        step(n, [tensor("loss", np.float32(math.nan if n in nans else 1.0 + n / 200), ["losses"])]) for n in range(400)
    ]
    verdict = run(LossNotDecreasing(), steps)
    assert verdict.status is Status.ISSUES_FOUND and verdict.triggers > len(nans)  # the rise, beside the NaNs
    assert "alternates" not in verdict.details["last_detail"]
