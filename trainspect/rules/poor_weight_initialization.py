"""PoorWeightInitialization: early activations, gradients or losses show a badly scaled initialisation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trainspect.rules._common import LITERAL, fmt
from trainspect.rules.base import Param, Requirement
from trainspect.rules.columns import Checks, ChecksBuilder, Columns
from trainspect.rules.step_data import Check, StepData, as_float, tensor_reduction
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["PoorWeightInitialization"]


@dataclass
class _State:
    seen: int = 0
    best_loss: float = math.inf
    since_best: int = 0


class PoorWeightInitialization(TensorRule):
    """Trigger, within the first ``steps`` saved steps, on any of three signs of a poor initialisation.

    1. The variances of the ReLU inputs of different layers differ by more than ``threshold`` (max/min).
    2. The p95 − p5 spread of all gradient values is below ``distribution_range``.
    3. The loss has not improved for ``patience`` saved steps.

    Heuristic: a good initialisation keeps activation variance constant across layers (Glorot and Bengio
    2010; He et al., "Delving deep into rectifiers", 2015). The conditions are combined with OR.

    trainspect's default differs from smdebug's literal rule (``literal=True``) so that default-initialised
    networks stay quiet, and it triggers only on badly scaled activations (condition 1): (1) the variance ratio
    is taken per layer, ``(max/min) ** (1 / (layers - 1))``, since PyTorch's default initialisation lets variance
    shrink by a few times per layer; layers whose input has zero variance (constant, behind dead units) are left
    out; (2) the spread is taken per gradient tensor, leaving out tensors that are exactly zero, and the median
    over tensors is compared; a narrow spread is reported with condition 1 but not alone (deep sigmoid/tanh
    stacks narrow it too: VanishingGradient names that); (3) a loss that does not improve within the first
    steps is reported, never triggering alone (minibatch noise: LossNotDecreasing judges the loss).

    Example:
        >>> PoorWeightInitialization(steps="20").params["steps"]
        20
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("activation_inputs_regex", list, [".*relu_input"], "regexes of activation inputs"),
        Param("threshold", float, 10.0, "largest acceptable max/min ratio of layer input variances", min=1),
        Param("distribution_range", float, 0.001, "smallest acceptable p95-p5 spread of gradients", min=0),
        Param("patience", int, 5, "saved steps without loss improvement tolerated", min=1),
        Param("steps", int, 10, "number of first saved steps analysed", min=1),
        LITERAL,
    )
    activation_inputs_regex: list[str]
    threshold: float
    distribution_range: float
    patience: int
    steps: int
    literal: bool
    recommendation: ClassVar[str] = (
        "The initialisation looks poorly scaled: use He (ReLU) or Xavier (tanh/sigmoid) initialisation, "
        "or add normalisation layers."
    )
    series_label: ClassVar[str] = "max/min variance of ReLU inputs across layers"

    def selects(self) -> list[Select]:
        """ReLU inputs (variance only), gradients (raw) and losses."""
        return [
            Select(
                "act",
                collections=("relu_input",),
                regex=tuple(self.activation_inputs_regex or ()),
                module_types=("ReLU",),
                module_inputs=True,
                reductions=("variance",),
                raw=False,
            ),
            Select("grad", collections=("gradients",)),
            Select("loss", collections=("losses",)),
        ]

    def requirements(self) -> list[Requirement]:
        """All three inputs, every step, for the first ``steps`` steps."""
        n = self.steps
        return [
            Requirement(
                "relu_input",
                include_regex=tuple(self.activation_inputs_regex or ()),
                module_types=("ReLU",),
                module_inputs=True,
                save_interval=1,
                end_step=n,
                reductions=("variance",),
                raw=False,
            ),
            Requirement("gradients", save_interval=1, end_step=n),
            Requirement("losses", save_interval=1, end_step=n),
        ]

    def chart_threshold(self) -> float:
        """Return ``threshold``."""
        return float(self.threshold)

    def init_state(self) -> _State:
        """Saved steps seen and the loss's progress."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Judge the three conditions at one of the first ``steps`` steps."""
        if state.seen >= self.steps:
            return None
        state.seen += 1
        findings: list[str] = []
        names: list[str] = []
        ratio = self._variance_ratio(data, findings, names)
        activations = bool(findings)
        self._gradient_spread(data, findings, names)
        self._loss_patience(state, data, findings, names)
        text = "; ".join(findings) or f"layer input variance ratio {fmt(ratio)} (threshold {fmt(self.threshold)})"
        if not self.literal and findings and not activations:
            return Check(ratio, False, (), f"step {data.step}: {text} (reported only: needs badly scaled activations)")
        return Check(ratio, bool(findings), tuple(names), f"step {data.step}: {text}")

    def check_columns(self, state: _State, cols: Columns) -> Checks | None:
        """Judge the first ``steps`` saved steps one by one; the rest of a chunk has nothing to judge."""
        out = ChecksBuilder()
        for i in np.flatnonzero(cols.seen)[: max(0, self.steps - state.seen)].tolist():
            out.single(i, self.check(state, cols.step_data(i)))
        return out.build()

    def _variance_ratio(self, data: StepData, findings: list[str], names: list[str]) -> float | None:
        var = {r.name: tensor_reduction(r, "variance") for r in data.role("act")}
        finite = {k: v for k, v in var.items() if v is not None and math.isfinite(v)}
        literal = self.literal
        if not literal:
            finite = {k: v for k, v in finite.items() if v > 0}
        if len(finite) < 2:
            return None
        hi, lo = max(finite.values()), min(finite.values())
        ratio = hi / lo if lo > 0 else (math.inf if hi > 0 else 1.0)
        what = "layer input variances differ by"
        if not literal:
            ratio = ratio ** (1.0 / (len(finite) - 1))
            what = f"layer input variances ({len(finite)} layers) differ by a factor per layer of"
        if ratio > self.chart_threshold():
            findings.append(f"{what} {fmt(ratio)} (threshold {fmt(self.chart_threshold())})")
            names.extend(finite)
        return ratio if math.isfinite(ratio) else None

    def _gradient_spread(self, data: StepData, findings: list[str], names: list[str]) -> None:
        parts = [np.asarray(r.value, dtype=np.float64).ravel() for r in data.role("grad") if r.value is not None]
        parts = [p[np.isfinite(p)] for p in parts]
        parts = [p for p in parts if p.size]
        if not parts:
            return
        if self.literal:
            p5, p95 = np.percentile(np.concatenate(parts), [5, 95])
            spread = float(p95 - p5)
        else:
            spreads = [float(np.subtract(*np.percentile(p, [95, 5]))) for p in parts if np.any(p != 0)]
            if not spreads:
                return
            spread = float(np.median(spreads))
        if spread < self.distribution_range:
            findings.append(f"gradient p95-p5 spread {fmt(spread)} (threshold {fmt(self.distribution_range)})")
            names.extend(r.name for r in data.role("grad"))

    def _loss_patience(self, state: _State, data: StepData, findings: list[str], names: list[str]) -> None:
        losses = [v for v in (as_float(r) for r in data.role("loss")) if v is not None]
        if not losses:
            return
        loss = float(np.mean(losses))
        if loss < state.best_loss:
            state.best_loss, state.since_best = loss, 0
            return
        state.since_best += 1
        if state.since_best >= self.patience:
            findings.append(f"loss not improved for {state.since_best} saved steps (patience {self.patience})")
            names.extend(r.name for r in data.role("loss"))

    def insufficient(self, state: _State) -> str:
        """Only saved steps beyond the first ``steps`` were seen."""
        return f"only the first steps={self.steps} saved steps are analysed"
