"""VanishingGradient at its edges: the threshold itself, the converged loss, zero and bias gradients (issue 18)."""

from __future__ import annotations

import numpy as np
from rules_synth import run, step, tensor

from trainspect.modes import ModeKeys
from trainspect.rules import VanishingGradient
from trainspect.rules.verdict import Status


def _grad(name: str, abs_mean: float):  # noqa: ANN202
    return tensor(name, None, ["gradients"], abs_mean=abs_mean)


def _loss(value: float):  # noqa: ANN202
    return tensor("loss", np.float32(value), ["losses"])


def test_a_gradient_exactly_at_the_threshold_is_not_vanishing() -> None:
    at = run(VanishingGradient(), [step(0, [_grad("gradient/w", 1e-7)])])
    assert at.status is Status.NO_ISSUES_FOUND and at.triggers == 0
    below = run(VanishingGradient(), [step(0, [_grad("gradient/w", 0.9e-7)])])
    assert below.status is Status.ISSUES_FOUND and below.tensors == ("gradient/w",)
    assert run(VanishingGradient(threshold=1e-3), [step(0, [_grad("gradient/w", 5e-4)])]).triggers == 1


def test_tiny_gradients_once_the_loss_has_converged_are_not_counted() -> None:
    def steps(last_loss: float) -> list:
        return [
            step(0, {"main": [_grad("gradient/w", 1.0)], "loss": [_loss(2.0)]}),
            step(1, {"main": [_grad("gradient/w", 1e-9)], "loss": [_loss(last_loss), _loss(last_loss)]}),
        ]

    converged = run(VanishingGradient(), steps(0.0019))  # below 1e-3 x the first loss (2.0)
    assert converged.status is Status.NO_ISSUES_FOUND, converged.message
    at_ratio = run(VanishingGradient(converged_loss_ratio=0.5), steps(1.0))  # exactly 0.5 x 2.0: not converged yet
    assert at_ratio.status is Status.ISSUES_FOUND and at_ratio.triggers == 1
    assert run(VanishingGradient(converged_loss_ratio=0.5), steps(0.99)).status is Status.NO_ISSUES_FOUND
    literal = run(VanishingGradient(literal=True), steps(0.0019))
    assert literal.status is Status.ISSUES_FOUND  # smdebug's rule judges every gradient


def test_the_first_loss_is_the_first_training_loss() -> None:
    data = [
        step(0, {"main": [_grad("gradient/w", 1.0)], "loss": [_loss(1e-6)]}, mode=ModeKeys.EVAL),
        step(1, {"main": [_grad("gradient/w", 1.0)], "loss": [_loss(2.0), _loss(4.0)]}),  # mean 3.0
        step(2, {"main": [_grad("gradient/w", 1e-9)], "loss": [_loss(0.0029)]}),  # converged: < 1e-3 x 3.0
    ]
    assert run(VanishingGradient(), data).status is Status.NO_ISSUES_FOUND
    data[2] = step(2, {"main": [_grad("gradient/w", 1e-9)], "loss": [_loss(0.0031)]})
    assert run(VanishingGradient(), data).triggers == 1


def test_exactly_zero_gradients_are_not_vanishing_unless_literal() -> None:
    zero = [step(0, [_grad("gradient/dead", 0.0), _grad("gradient/w", 1.0)])]
    assert run(VanishingGradient(), zero).status is Status.NO_ISSUES_FOUND
    assert run(VanishingGradient(literal=True), zero).tensors == ("gradient/dead",)


def test_a_tiny_bias_gradient_next_to_a_healthy_weight_gradient_is_not_counted() -> None:
    for bias, weight in (("gradient/fc.bias", "gradient/fc.weight"), ("gradient/fc_bias", "gradient/fc_weight")):
        at_threshold = [step(0, [_grad(bias, 1e-12), _grad(weight, 1e-7)])]
        assert run(VanishingGradient(), at_threshold).status is Status.NO_ISSUES_FOUND, bias
        both_tiny = [step(0, [_grad(bias, 1e-12), _grad(weight, 0.5e-7)])]
        assert run(VanishingGradient(), both_tiny).tensors == tuple(sorted((bias, weight))), bias
    other = [step(0, [_grad("gradient/fc.bias", 1e-12), _grad("gradient/other.weight", 1.0)])]
    assert run(VanishingGradient(), other).tensors == ("gradient/fc.bias",)  # not its layer's weight


def test_what_the_rule_asks_the_hook_to_record_and_says_without_finite_gradients() -> None:
    (req,) = VanishingGradient().requirements()
    assert (req.collection, req.include_regex, req.reductions, req.raw) == (
        "gradients",
        ("^gradient/",),
        ("abs_mean",),
        False,
    )
    grads = VanishingGradient().selects()[0]  # and it reads them so: the reductions, never the raw values
    assert (grads.collections, grads.reductions, grads.raw) == (("gradients",), ("abs_mean",), False)
    nan = run(VanishingGradient(), [step(0, [_grad("gradient/w", float("nan"))])])
    assert nan.status is Status.NO_DATA and "NaN/Inf" in nan.message
