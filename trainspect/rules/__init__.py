"""Rules: built-in tensor and profiler rules, the engine that evaluates them, verdicts and actions.

Example:
    >>> from trainspect import rules
    >>> [r.name for r in rules.default_rules()]
    ['VanishingGradient', 'ExplodingTensor', 'LossNotDecreasing']
"""

from trainspect.rules.actions import Action, Callback, LogAction, StopTraining, Webhook, parse_actions
from trainspect.rules.all_zero import AllZero
from trainspect.rules.base import Param, Requirement, Rule
from trainspect.rules.check_input_images import CheckInputImages
from trainspect.rules.class_imbalance import ClassImbalance
from trainspect.rules.confusion import Confusion
from trainspect.rules.dead_relu import DeadRelu
from trainspect.rules.engine import evaluate, evaluate_steps, load_verdicts
from trainspect.rules.exploding_tensor import ExplodingTensor
from trainspect.rules.live import LiveRuleRunner
from trainspect.rules.loss_not_decreasing import LossNotDecreasing
from trainspect.rules.nlp_sequence_ratio import NLPSequenceRatio
from trainspect.rules.overfit import Overfit
from trainspect.rules.overtraining import Overtraining
from trainspect.rules.poor_weight_initialization import PoorWeightInitialization
from trainspect.rules.registry import (
    ENTRY_POINT_GROUP,
    TENSOR_RULES,
    RuleRegistry,
    default_registry,
    default_rules,
    rules_from_config,
)
from trainspect.rules.saturated_activation import SaturatedActivation
from trainspect.rules.similar_across_runs import SimilarAcrossRuns
from trainspect.rules.stalled_training_rule import StalledTrainingRule
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tally import Tally
from trainspect.rules.tensor_rule import Select, TensorRule
from trainspect.rules.tensor_variance import TensorVariance
from trainspect.rules.unchanged_tensor import UnchangedTensor
from trainspect.rules.vanishing_gradient import VanishingGradient
from trainspect.rules.verdict import Series, Status, Verdict, read_verdicts, write_verdicts
from trainspect.rules.weight_update_ratio import WeightUpdateRatio
from trainspect.rules.worker_tally import WorkerTally
from trainspect.rules.worker_verdicts import combine_workers

__all__ = [
    "ENTRY_POINT_GROUP",
    "TENSOR_RULES",
    "Action",
    "AllZero",
    "Callback",
    "Check",
    "CheckInputImages",
    "ClassImbalance",
    "Confusion",
    "DeadRelu",
    "ExplodingTensor",
    "LiveRuleRunner",
    "LogAction",
    "LossNotDecreasing",
    "NLPSequenceRatio",
    "Overfit",
    "Overtraining",
    "Param",
    "PoorWeightInitialization",
    "Requirement",
    "Rule",
    "RuleRegistry",
    "SaturatedActivation",
    "Select",
    "Series",
    "SimilarAcrossRuns",
    "StalledTrainingRule",
    "Status",
    "StepData",
    "StopTraining",
    "Tally",
    "TensorRule",
    "TensorVariance",
    "UnchangedTensor",
    "VanishingGradient",
    "Verdict",
    "Webhook",
    "WeightUpdateRatio",
    "WorkerTally",
    "combine_workers",
    "default_registry",
    "default_rules",
    "evaluate",
    "evaluate_steps",
    "load_verdicts",
    "parse_actions",
    "read_verdicts",
    "rules_from_config",
    "verdicts_frame",
    "write_verdicts",
]


def __getattr__(name: str) -> object:
    if name == "verdicts_frame":  # pandas loads with the first frame, not with every rules import
        from trainspect.rules.verdict_table import verdicts_frame

        return verdicts_frame
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
