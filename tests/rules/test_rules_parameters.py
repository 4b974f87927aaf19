"""Rule parameters are real attributes: declared once as Params, validated, set as ``self.<name>``."""

from __future__ import annotations

from typing import Any

import pytest
from rules_synth import step, tensor

from trainspect.exceptions import ConfigError
from trainspect.rules import Check, Param, Select, TensorRule, evaluate_steps
from trainspect.rules.base import Rule
from trainspect.rules.profiler import PROFILER_RULES
from trainspect.rules.registry import TENSOR_RULES
from trainspect.rules.tally import Tally
from trainspect.rules.verdict import Status


class LargeGradientNorm(TensorRule):
    """The README's custom rule, as written there."""

    parameters = (Param("max_norm", float, 10.0, min=0),)
    max_norm: float
    recommendation = "Clip gradients or lower the learning rate."

    def selects(self) -> list[Select]:
        return [Select(collections=("gradients",), reductions=("l2",), raw=False)]

    def check(self, state: Any, data: Any) -> Check | None:
        norms = {t.name: t.reductions.get(("l2", False)) for t in data.role()}
        norms = {k: v for k, v in norms.items() if v is not None}
        if not norms:
            return None
        worst = max(norms, key=norms.__getitem__)
        return Check(norms[worst], norms[worst] > self.max_norm, (worst,), f"{worst} (threshold {self.max_norm})")


def test_readme_rule_reads_its_parameter_as_an_attribute() -> None:
    rule = LargeGradientNorm(max_norm="5")
    assert "max_norm" in vars(rule) and rule.max_norm == 5.0 and rule.params == {"max_norm": 5.0}
    steps = [step(i, [tensor("g", l2=v)]) for i, v in enumerate([1.0, 7.0, 2.0])]
    verdict = evaluate_steps(rule, steps)
    assert verdict.status is Status.ISSUES_FOUND and "threshold 5.0" in verdict.message
    with pytest.raises(ConfigError, match="max_norm"):
        LargeGradientNorm(max_norm="-1")
    with pytest.raises(AttributeError):
        rule.not_a_parameter  # noqa: B018 - no attribute magic: unknown names are errors


def test_no_attribute_magic_on_rules() -> None:
    assert "__getattr__" not in vars(Rule) and "__getattr__" not in vars(TensorRule)


def test_setting_an_attribute_is_what_params_reports() -> None:
    rule = LargeGradientNorm()
    rule.max_norm = 3.0
    assert rule.params == {"max_norm": 3.0} and repr(rule) == "LargeGradientNorm(max_norm=3.0)"


class _OldStyle(TensorRule):
    """A rule in the older style: a ``threshold`` parameter next to a ``threshold()`` method."""

    parameters = (Param("threshold", float, 0.5),)

    def threshold(self) -> float:  # type: ignore[override]
        return float(self.params["threshold"]) * 2

    def check(self, state: Any, data: Any) -> Check | None:
        return Check(1.0, False)


def test_a_parameter_named_like_a_method_keeps_the_method() -> None:
    rule = _OldStyle(threshold="0.25")
    assert rule.threshold() == 0.5 and rule.params == {"threshold": 0.25}
    assert rule.chart_threshold() == 0.5  # the older name is still drawn with the series
    tally = Tally(rule)
    tally.feed(step(0, [tensor("t", 1.0)]))
    assert tally.verdict(finished=True).series is not None


def test_every_built_in_parameter_is_an_attribute() -> None:
    for cls in (*TENSOR_RULES, *PROFILER_RULES):
        try:
            rule = cls()
        except ConfigError:
            continue  # rules whose defaults need a selection (collection_names …)
        for p in cls.parameters:
            assert p.name in vars(rule) and getattr(rule, p.name) == p.default, (cls.__name__, p.name)


def test_confusions_shares_are_bounded_to_one() -> None:
    """``min_diag`` and ``max_off_diag`` are shares of a column: 1 is the largest accepted, above names the key."""
    from trainspect.rules import Confusion

    assert Confusion(min_diag=1.0, max_off_diag=1.0).max_off_diag == 1.0
    for key in ("min_diag", "max_off_diag"):
        with pytest.raises(ConfigError, match=key):
            Confusion(**{key: 1.5})


@pytest.mark.parametrize(
    ("rule", "key", "smallest"),
    [
        ("ClassImbalance", "samples", 1),  # judge after every label
        ("ClassImbalance", "threshold_imbalance", 1.0),  # any imbalance at all
        ("UnchangedTensor", "num_steps", 2),  # "unchanged" compares two saved steps at least
        ("LossNotDecreasing", "num_steps", 1),
        ("Overfit", "patience", 1),
        ("Overtraining", "patience_train", 1),
        ("Overtraining", "patience_validation", 1),
        ("WeightUpdateRatio", "num_steps", 1),
    ],
)
def test_a_count_parameter_accepts_its_smallest_meaningful_value_and_refuses_below_it(
    rule: str, key: str, smallest: float
) -> None:
    import trainspect.rules as rules

    cls = getattr(rules, rule)
    extra = {"collection_names": ["weights"]} if rule == "UnchangedTensor" else {}
    assert getattr(cls(**extra, **{key: smallest}), key) == smallest
    below = smallest - 1 if isinstance(smallest, int) else smallest - 0.5
    with pytest.raises(ConfigError, match=key):
        cls(**extra, **{key: below})
