"""ExplodingTensor: a tensor holds NaN (or, unless ``only_nan``, infinite) values; the verdict names where it came from.

The PyTorch hook finds the first module whose output became non-finite and the first non-finite gradient
(:mod:`trainspect.hooks.torch_nan_origin`, written to ``nan_origins.jsonl``); :meth:`ExplodingTensor.explain` puts
them in the verdict's message and ``details["origin"]``. Steps that ``torch.amp.GradScaler`` skipped for inf/NaN
gradients (the hook records ``amp/skipped``) are normal, up to ``amp_skips_allowed`` in a row.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from trainspect.rules._common import COLLECTION_NAMES, TENSOR_REGEX, user_select
from trainspect.rules.base import Param, Requirement
from trainspect.rules.columns import Checks, ChecksBuilder, Columns
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule
from trainspect.rules.verdict import Verdict
from trainspect.step import TensorRecord
from trainspect.store.nan_origins import describe, first_origins

__all__ = ["ExplodingTensor", "AMP_SKIPPED"]

AMP_SKIPPED = "amp/skipped"
"""The scalar the PyTorch hook records at each ``GradScaler.step``: 1 when the scaler skipped the step, else 0."""
_SAVED = "nan_origin/"  # the producing module's tensors, saved by the hook at the origin's step


class ExplodingTensor(TensorRule):
    """Trigger when an inspected tensor contains NaN, or with ``only_nan=False`` also ±Inf.

    Heuristic: exploding gradients and numeric overflow show up as non-finite values (Pascanu, Mikolov and
    Bengio, "On the difficulty of training recurrent neural networks", 2013). Raw values are tested with
    ``numpy.isnan``/``numpy.isfinite``; when only reductions were saved, a non-finite ``min`` or ``max``
    (which propagate NaN and Inf) tells the same.

    Example:
        >>> ExplodingTensor(only_nan="True").params["only_nan"]
        True
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        COLLECTION_NAMES,
        TENSOR_REGEX,
        Param("only_nan", bool, False, "True: look for NaN only; False: NaN and ±Inf"),
        Param("origin", bool, True, "the PyTorch hook finds the module and gradient where NaN/Inf first appeared"),
        Param(
            "amp_skips_allowed",
            int,
            10,
            "steps in a row GradScaler may skip for inf/NaN gradients before it is an "
            "issue (0: every skipped step's non-finite tensors are one, as smdebug)",
            min=0,
        ),
    )
    collection_names: list[str] | None
    tensor_regex: list[str] | None
    only_nan: bool
    origin: bool
    amp_skips_allowed: int
    recommendation: ClassVar[str] = (
        "Values became NaN/Inf: lower the learning rate, clip gradients, check the loss for log(0) or "
        "division by zero, and check the input data for NaN."
    )
    series_label: ClassVar[str] = "non-finite tensors"

    def selects(self) -> list[Select]:
        """Read ``collection_names`` ∪ ``tensor_regex``, or every recorded tensor."""
        sel = user_select(self.params, reductions=("min", "max"), raw=False)
        main = sel or Select(all_tensors=True, reductions=("min", "max"), raw=False)
        return [Select("amp", regex=(AMP_SKIPPED + "$",)), main]  # the first matching selection takes a tensor

    def requirements(self) -> list[Requirement]:
        """Record losses and gradient min/max by default, or the selected tensors' min/max."""
        if user_select(self.params) is None:
            return [Requirement("losses"), Requirement("gradients", reductions=("min", "max"), raw=False)]
        return super().requirements()

    def chart_threshold(self) -> float:
        """Any non-finite tensor triggers."""
        return 0.0

    def init_state(self) -> list[int]:
        """Steps in a row that GradScaler skipped."""
        return [0]

    def check(self, state: Any, data: StepData) -> Check | None:
        """Count the tensors with non-finite values at this step."""
        bad = [rec.name for rec in data.role() if not rec.name.startswith(_SAVED) and self._bad(rec)]
        kind = "NaN" if self.only_nan else "NaN/Inf"
        skipped = data.role("amp")
        if skipped and skipped[0].value is not None and float(np.asarray(skipped[0].value).reshape(-1)[0]) > 0:
            state[0] += 1
            if state[0] <= self.amp_skips_allowed:
                allowed = f"{state[0]} in a row, allowed: {self.amp_skips_allowed}"
                return Check(0.0, False, (), f"GradScaler skipped the step ({allowed}): non-finite values are normal")
            if not bad:
                allowed = f"allowed: {self.amp_skips_allowed}"
                text = f"GradScaler skipped {state[0]} steps in a row ({allowed}): the gradients stay non-finite"
                return Check(1.0, True, (AMP_SKIPPED,), text)
        elif skipped:
            state[0] = 0
        if bad:
            more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            return Check(
                float(len(bad)), True, tuple(bad), f"{kind} values in {bad[0]}{more} (threshold: none allowed)"
            )
        return Check(0.0, False, (), f"no {kind} values in {len(data.role())} tensor(s) (threshold: none allowed)")

    def check_columns(self, state: Any, cols: Columns) -> Checks | None:
        """Test a chunk's scalar values at once (``numpy.isnan``/``isfinite`` over the column)."""
        col = cols.role()
        if cols.role("amp") is not None:
            return None  # GradScaler's skipped steps: judged step by step
        if col is None:
            return ChecksBuilder().build()
        idx = np.flatnonzero(col.present)
        values = col.values[idx]
        if col.kind == "f":
            bad = np.isnan(values) if self.only_nan else ~np.isfinite(values)
        else:
            bad = np.zeros(idx.size, dtype=bool)
        kind, name = ("NaN" if self.only_nan else "NaN/Inf"), col.name
        found = f"{kind} values in {name} (threshold: none allowed)"
        clean = f"no {kind} values in 1 tensor(s) (threshold: none allowed)"
        return Checks(
            idx, bad.astype(np.float64), bad, lambda k: found if bad[k] else clean, lambda k: (name,) if bad[k] else ()
        )

    def explain(self, verdict: Verdict, origins: list[dict[str, Any]]) -> Verdict:
        """Name where the first NaN/Inf came from (the hook's findings) in the message and ``details["origin"]``."""
        if not self.origin or not origins or not verdict.issues_found:
            return verdict
        found = first_origins(origins, verdict.first_trigger_step)
        text = "; ".join(describe(o) for o in found)
        details = {**verdict.details, "origin": found}
        return replace(verdict, message=f"{verdict.message}. {text[0].upper()}{text[1:]}", details=details)

    def _bad(self, rec: TensorRecord) -> bool:
        only_nan = self.only_nan
        reds = rec.reductions
        if rec.shape is not None and 0 in rec.shape or rec.value is not None and np.asarray(rec.value).size == 0:
            return False  # an empty tensor (a ZeRO-3 parameter not gathered): its NaN reductions mean "none"
        if rec.value is not None:
            kind = np.asarray(rec.value).dtype.kind
            if kind not in "fc":
                return False
            lo, hi = reds.get(("min", False)), reds.get(("max", False))
            if kind == "f" and lo is not None and hi is not None:  # min and max propagate NaN and reach ±Inf
                return (math.isnan(lo) or math.isnan(hi)) if only_nan else not (math.isfinite(lo) and math.isfinite(hi))
            arr = np.asarray(rec.value)
            if kind == "f" and arr.size == 1:  # a loss or metric: plain floats are much cheaper than ufuncs
                v = float(arr.reshape(-1)[0])
                return math.isnan(v) if only_nan else not math.isfinite(v)
            return bool(np.isnan(arr).any()) if only_nan else not bool(np.isfinite(arr).all())
        values = [reds.get(key) for key in (("min", False), ("max", False), ("mean", False))]
        found = [v for v in values if v is not None]
        if not found:
            found = [v for v in reds.values() if v is not None]
        if only_nan:
            return any(math.isnan(v) for v in found)
        return any(not math.isfinite(v) for v in found)
