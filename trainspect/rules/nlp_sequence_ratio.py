"""NLPSequenceRatio: a token (padding, unknown) makes up too much of the input sequences."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from trainspect.exceptions import ConfigError
from trainspect.rules._common import fmt
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["NLPSequenceRatio"]


class NLPSequenceRatio(TensorRule):
    """Trigger when a token's share of the input ids exceeds its threshold (``token_thresholds_percent``).

    Heuristic: too much padding or too many unknown tokens waste compute and starve the model of signal
    (smdebug's NLPSequenceRatio; bucketing by length, Sutskever et al. 2014 / Khomenko et al. 2016). Reads
    the token-id inputs of ``Embedding`` modules (collection ``input_sequence``) or ``tensor_regex``.

    Example:
        >>> NLPSequenceRatio(token_values="0,1", token_thresholds_percent="50,10").params["token_values"]
        ['0', '1']
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("tensor_regex", list, [".*embedding0_input_0"], "regexes of the token-id tensors"),
        Param("token_values", list, ["0"], "token ids to count (list or comma-separated)"),
        Param("token_thresholds_percent", list, ["50"], "largest acceptable share (%) of each token"),
    )
    tensor_regex: list[str]
    token_values: list[str]
    token_thresholds_percent: list[str]
    recommendation: ClassVar[str] = (
        "A token dominates the input sequences: bucket sequences by length to cut padding, or enlarge the "
        "vocabulary to reduce unknown tokens."
    )
    series_label: ClassVar[str] = "max token share (%)"

    def validate(self) -> None:
        """Parse the token ids and thresholds; one threshold may serve every token."""
        try:
            self._tokens = [int(float(v)) for v in self.token_values]
            self._limits = [float(v) for v in self.token_thresholds_percent]
        except ValueError:
            raise ConfigError(f"{self.name}: token_values and token_thresholds_percent must be numbers") from None
        if len(self._limits) == 1:
            self._limits *= len(self._tokens)
        if len(self._limits) != len(self._tokens) or not self._tokens:
            raise ConfigError(f"{self.name}: give one threshold per token value (or a single one for all)")

    def selects(self) -> list[Select]:
        """Token ids."""
        return [
            Select(
                collections=("input_sequence",),
                regex=tuple(self.tensor_regex or ()),
                module_types=("Embedding",),
                module_inputs=True,
            )
        ]

    def chart_threshold(self) -> float:
        """The first token's threshold."""
        return self._limits[0]

    def check(self, state: Any, data: StepData) -> Check | None:
        """Count each token's share in this step's sequences."""
        best: tuple[float, str] | None = None
        bad: list[str] = []
        for rec in data.role():
            if rec.value is None or np.asarray(rec.value).size == 0:
                continue
            arr = np.asarray(rec.value)
            for token, limit in zip(self._tokens, self._limits, strict=True):
                pct = 100.0 * float(np.count_nonzero(arr == token)) / arr.size
                text = f"token {token} is {fmt(pct)}% of {rec.name} (threshold {fmt(limit)}%)"
                if best is None or pct > best[0]:
                    best = (pct, text)
                if pct > limit:
                    bad.append(text)
        if best is None:
            return None
        return Check(best[0], bool(bad), (), bad[0] if bad else best[1])
