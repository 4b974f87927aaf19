"""CheckInputImages: input images are not normalised to zero mean."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trainspect.rules._common import fmt
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["CheckInputImages"]


@dataclass
class _State:
    sums: np.ndarray | None = None
    count: int = 0
    samples: int = 0


class CheckInputImages(TensorRule):
    """Trigger once ``threshold_samples`` images were seen if some channel's mean is beyond ``threshold_mean``.

    The per-channel mean is taken over every axis but ``channel`` (NCHW: channel 1), accumulated over
    steps. Heuristic: inputs should be standardised per channel (LeCun et al., "Efficient BackProp",
    1998). For PyTorch, give ``regex`` the name of the model's input (e.g. ``Net_input_0``) or record
    collection ``input_image``.

    Example:
        >>> CheckInputImages(channel="3").params["channel"]
        3
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("threshold_mean", float, 0.2, "largest acceptable |mean| of a channel", min=0),
        Param("threshold_samples", int, 500, "images to see before judging", min=1),
        Param("regex", list, [".*hybridsequential0_input_0"], "regexes of the input tensor"),
        Param("channel", int, 1, "axis of the channels (NCHW: 1, NHWC: 3; axis 0 is the batch)", min=1),
    )
    threshold_mean: float
    threshold_samples: int
    regex: list[str]
    channel: int
    recommendation: ClassVar[str] = (
        "Input images are not normalised: subtract the per-channel mean and divide by the standard deviation."
    )
    series_label: ClassVar[str] = "max |channel mean|"

    def selects(self) -> list[Select]:
        """The input images."""
        return [Select(collections=("input_image",), regex=tuple(self.regex or ()))]

    def chart_threshold(self) -> float:
        """Return ``threshold_mean``."""
        return float(self.threshold_mean)

    def init_state(self) -> _State:
        """Running per-channel sums."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Accumulate this step's images; judge once enough were seen."""
        axis = self.channel
        rec = next((r for r in data.role() if r.value is not None and np.ndim(r.value) > axis >= 1), None)
        if rec is None:
            return None
        arr = np.moveaxis(np.asarray(rec.value, dtype=np.float64), axis, -1)
        channels = arr.shape[-1]
        flat = arr.reshape(-1, channels)
        if state.sums is None or state.sums.shape[0] != channels:
            state.sums, state.count, state.samples = np.zeros(channels), 0, 0
        state.sums += flat.sum(axis=0)
        state.count += flat.shape[0]
        state.samples += arr.shape[0]
        if state.samples < self.threshold_samples:
            return None
        means = state.sums / state.count
        worst = int(np.argmax(np.abs(means)))
        value = float(abs(means[worst]))
        detail = (
            f"channel {worst} mean {fmt(float(means[worst]))} over {state.samples} images "
            f"(threshold |mean| {fmt(self.chart_threshold())})"
        )
        triggered = value > self.chart_threshold()
        return Check(value, triggered, (rec.name,) if triggered else (), detail)

    def insufficient(self, state: _State) -> str:
        """Fewer images than ``threshold_samples``."""
        return f"saw {state.samples} images, needs threshold_samples={self.threshold_samples}"
