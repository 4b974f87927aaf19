"""What the save planner decides per tensor and step, checked against the documented rules (issue 18).

The expectations come from the documentation of ``include_collections``, ``SaveConfig``, ``ReductionConfig`` and
rule requirements (docs/), not from running the planner.
"""

from __future__ import annotations

import pytest

import trainspect as ts
from trainspect.collections import Collection, CollectionManager
from trainspect.exceptions import ConfigError
from trainspect.hooks.save_plan import SavePlanner, TensorPlan
from trainspect.modes import ModeKeys
from trainspect.rules.base import Requirement

TRAIN = ModeKeys.TRAIN


def _planner(
    include: list[str | Collection],
    interval: int = 5,
    reductions: ts.ReductionConfig | None = None,
    regex: list[str] | None = None,
    save_all: bool = False,
) -> SavePlanner:
    return SavePlanner(CollectionManager(), include, ts.SaveConfig(save_interval=interval), reductions, regex, save_all)


def test_unknown_collection_is_refused_naming_it_and_the_builtins() -> None:
    with pytest.raises(ConfigError, match="'wieghts'.*weights.*gradients"):
        _planner(["wieghts"])


def test_losses_are_always_saved_every_step_and_the_rest_on_schedule() -> None:
    planner = _planner(["weights"], interval=5)
    assert planner.included >= {"weights", "losses"}
    assert planner.begin_step(TRAIN, 3) is True  # losses save at every step
    assert planner.is_active("losses") and not planner.is_active("weights")
    assert planner.plan("0.weight") == TensorPlan(False, (), False, frozenset())
    assert planner.begin_step(TRAIN, 5) and planner.is_active("weights") and planner.any_active
    assert planner.plan("0.weight") == TensorPlan(True, (), True, frozenset({"weights"}))  # histograms by default
    assert planner.plan("gradient/0.weight").collections == frozenset()  # not a weight: the gradients collection


def test_nothing_active_when_every_schedule_skips_the_step() -> None:
    losses = Collection("losses", save_config=ts.SaveConfig(save_interval=4))
    planner = _planner([losses, "weights"], interval=3)
    assert planner.begin_step(TRAIN, 1) is False and not planner.any_active
    assert planner.begin_step(TRAIN, 4) is True and planner.is_active("losses") and not planner.is_active("weights")
    assert planner.begin_step(TRAIN, 6) is True and planner.is_active("weights") and not planner.is_active("losses")


def test_reductions_replace_the_raw_tensor_unless_save_raw_tensor() -> None:
    red = ts.ReductionConfig(reductions=["mean"], abs_reductions=["max"])
    planner = _planner(["weights"], interval=1, reductions=red)
    planner.begin_step(TRAIN, 0)
    assert planner.plan("w.weight") == TensorPlan(
        False, (("max", True), ("mean", False)), False, frozenset({"weights"})
    )
    keep = ts.ReductionConfig(norms=["l2"], save_raw_tensor=True)
    planner = _planner(["weights"], interval=1, reductions=keep)
    planner.begin_step(TRAIN, 0)
    assert planner.plan("w.weight") == TensorPlan(True, (("l2", False),), True, frozenset({"weights"}))


def test_histograms_only_with_the_raw_tensor() -> None:
    for wanted in (True, False):
        planner = _planner([Collection("weights", save_histogram=wanted)], interval=1)
        planner.begin_step(TRAIN, 0)
        assert planner.plan("w.weight").histogram is wanted
    reduced = Collection("weights", save_histogram=True, reduction_config=ts.ReductionConfig(reductions=["mean"]))
    planner = _planner([reduced], interval=1)
    planner.begin_step(TRAIN, 0)
    assert planner.plan("w.weight") == TensorPlan(False, (("mean", False),), False, frozenset({"weights"}))


def test_a_weight_saved_for_another_collection_is_tagged_a_weight() -> None:
    planner = _planner([], interval=1, regex=[r"^0\."])
    planner.begin_step(TRAIN, 0)
    assert "default" in planner.included
    assert planner.plan("0.weight").collections == frozenset({"default", "weights"})
    assert planner.plan("0.bias").collections == frozenset({"default", "biases"})
    assert planner.plan("1.weight") == TensorPlan(False, (), False, frozenset())
    assert planner.membership("0.weight") == frozenset({"default"})
    assert planner.takes_modules  # the regex may match module inputs and outputs


def test_save_all_saves_every_tensor() -> None:
    planner = _planner([], interval=2, save_all=True)
    assert planner.begin_step(TRAIN, 2) and planner.is_active("all")
    plan = planner.plan("anything_output_0")
    assert plan.raw and "all" in plan.collections
    assert planner.takes_modules  # "all" takes module inputs and outputs too
    assert not planner.begin_step(TRAIN, 3) or planner.plan("anything_output_0").raw is False


def test_rule_requirements_add_reductions_and_keep_what_the_user_asked_for() -> None:
    need = Requirement("gradients", save_interval=2, reductions=("mean",), raw=False)
    rule_only = _planner([], interval=10)
    rule_only.add_requirement(need)
    rule_only.begin_step(TRAIN, 2)
    assert rule_only.plan("gradient/w") == TensorPlan(False, (("mean", False),), False, frozenset({"gradients"}))
    user = _planner(["gradients"], interval=10)
    user.add_requirement(need)
    user.begin_step(TRAIN, 2)  # the user's collection keeps its raw tensors; the rule's reduction comes too
    assert user.plan("gradient/w") == TensorPlan(True, (("mean", False),), True, frozenset({"gradients"}))
    assert not user.begin_step(TRAIN, 3) or not user.is_active("gradients")  # every 2nd step, as the rule needs


def test_requirement_reductions_merge_and_user_intervals_win() -> None:
    coll = Collection(
        "weights", save_config=ts.SaveConfig(save_interval=4), reduction_config=ts.ReductionConfig(norms=["l2"])
    )
    planner = _planner([coll], interval=10)
    planner.add_requirement(Requirement("weights", save_interval=1, reductions=("abs_mean",), raw=False))
    planner.begin_step(TRAIN, 1)
    assert not planner.is_active("weights")  # the user configured the collection: the rule's interval is not imposed
    planner.begin_step(TRAIN, 4)
    assert planner.plan("x.weight").reductions == (("l2", False), ("mean", True))
    faster = _planner([], interval=10)
    faster.add_requirement(Requirement("biases", save_interval=6, reductions=("max",), raw=False))
    faster.add_requirement(Requirement("biases", save_interval=4, reductions=("min",), raw=False))
    assert faster.begin_step(TRAIN, 4) and faster.is_active("biases")  # the smaller interval of the two rules
    assert faster.plan("b.bias").reductions == (("max", False), ("min", False))
    assert not (faster.begin_step(TRAIN, 6) and faster.is_active("biases"))


def test_activation_modules_join_their_collections() -> None:
    planner = _planner(["relu_input"], interval=1)
    ins, outs = planner.module_collections("1", "ReLU")
    assert ins == frozenset({"relu_input"}) and outs == frozenset({"relu_output"})
    assert planner.module_collections("0", "Linear") == (frozenset(), frozenset())
    planner.begin_step(TRAIN, 0)
    assert planner.takes_modules
    plan = planner.plan("1_input_0", extra=("relu_input",))
    assert plan.raw and plan.collections == frozenset({"relu_input"})


def test_forced_plan_saves_whatever_the_schedule() -> None:
    planner = _planner(["weights"], interval=100)
    planner.begin_step(TRAIN, 1)
    assert planner.plan("w.weight").raw is False
    forced = planner.forced_plan("w.weight", ["scalars"])
    assert forced.raw and forced.collections == frozenset({"scalars", "weights"})


def test_collections_created_after_construction_are_included_and_builtins_are_not() -> None:
    planner = _planner(["weights"], interval=1)
    planner.manager.add(Collection("mine", include_regex=["^x"]))
    planner.begin_step(TRAIN, 0)
    assert "mine" in planner.included and "biases" not in planner.included
    assert planner.plan("x1").collections == frozenset({"mine"}) and planner.plan("b.bias").raw is False


def test_a_rules_new_collection_records_the_module_outputs_or_inputs_it_asks_for() -> None:
    """A rule's requirement defines a collection of its own: the modules' outputs (or inputs) it names join it."""
    planner = _planner([], interval=1)
    planner.add_requirement(Requirement("tanh_out", module_types=("Tanh",), module_outputs=True))
    planner.add_requirement(Requirement("gelu_in", module_types=("GELU",), module_inputs=True))
    tanh_in, tanh_out = planner.module_collections("2", "Tanh")
    gelu_in, gelu_out = planner.module_collections("3", "GELU")
    assert "tanh_out" in tanh_out and "tanh_out" not in tanh_in
    assert "gelu_in" in gelu_in and "gelu_in" not in gelu_out
