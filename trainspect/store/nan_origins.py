"""Where a run's first NaN/Inf came from, as the PyTorch hook found it (``tensors/<worker>/nan_origins.jsonl``).

One JSON line per finding (see :mod:`trainspect.hooks.torch_nan_origin` for how they are found)::

    {"pass": "forward", "step": 52, "mode": "TRAIN", "mode_step": 52, "module": "encoder.layers.3.self_attn",
     "module_type": "MultiheadAttention", "output": "output_0", "nan": 4096, "inf": 0, "shape": [8, 16, 32],
     "dtype": "float32", "inputs_finite": true, "propagated_by": ["encoder.layers.3", "encoder"],
     "parameters": [], "saved": ["nan_origin/encoder.layers.3.self_attn/input_0", ...]}
    {"pass": "backward", "step": 7, "mode": "TRAIN", "mode_step": 7, "parameter": "Net_fc2.weight",
     "module": "fc2", "nan": 0, "inf": 12, "shape": [10, 32], "dtype": "float32", "loss_finite": true,
     "amp_skipped": false, "also": ["Net_fc1.weight"]}

``module`` is None in a forward finding when no registered module produced the value: ``where`` then says what
did (``"input"``: the model's input was already non-finite; ``"loss"``: the loss computed after the model's
forward pass). The Trial, ``trainspect rules`` (ExplodingTensor's verdict), the report, the TensorBoard Rules view
and MLflow (tag ``trainspect.nan_origin``) read them through :func:`read_origins` and :func:`describe`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainspect.store.gaps import read_worker_lines

__all__ = ["ORIGINS_FILE", "origin_line", "read_origins", "describe", "first_origins"]

ORIGINS_FILE = "nan_origins.jsonl"


def origin_line(doc: dict[str, Any]) -> str:
    """The JSON line of one finding (non-finite floats are not expected in it: counts, names, shapes)."""
    return json.dumps(doc, separators=(",", ":"), default=str) + "\n"


def read_origins(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every finding of a run, each with its ``worker``, by step (malformed lines skipped with one warning)."""
    return [o for o in read_worker_lines(run_dir, ORIGINS_FILE, "NaN origin") if o.get("pass") in _PASSES]


_PASSES = ("forward", "backward")


def first_origins(origins: list[dict[str, Any]], step: int | None = None) -> list[dict[str, Any]]:
    """The findings that explain a trigger at ``step``: the first forward one and the first backward one.

    Those at or before ``step`` come first (the earliest of each pass); without any, the earliest at all (on an
    accelerator a finding can be one step late). A backward finding is kept only if it is not after the forward one
    by more than a step (it explains the weights' NaN) and the loss was finite (else the forward pass made it), or
    if there is no forward one.
    """
    chosen = []
    for kind in _PASSES:
        mine = [o for o in origins if o.get("pass") == kind]
        before = [o for o in mine if step is None or o["step"] <= step]
        if before or mine:
            chosen.append((before or mine)[0])
    if len(chosen) == 2 and (chosen[1]["step"] > chosen[0]["step"] + 1 or not chosen[1].get("loss_finite")):
        chosen = chosen[:1]  # a later gradient, or one a non-finite loss made: the forward finding says it all
    return chosen


def _counts(o: dict[str, Any]) -> str:
    parts = [f"{o[k]} {'NaN' if k == 'nan' else 'Inf'}" for k in ("nan", "inf") if o.get(k)]
    shape = "x".join(str(d) for d in o.get("shape") or ()) or "scalar"
    return f"{', '.join(parts) or 'non-finite'} of {shape} {o.get('dtype', '')}".rstrip()


_WHERE = {
    "input": "already in the input of the model",
    "loss": "first in the loss, after the model's forward pass (the loss function or its targets)",
}


def describe(o: dict[str, Any]) -> str:
    """One sentence on a finding.

    Example:
        >>> describe({"pass": "forward", "step": 52, "mode": "TRAIN", "mode_step": 52, "module": "enc.attn",
        ...           "module_type": "MultiheadAttention", "output": "output_0", "nan": 3, "inf": 0,
        ...           "shape": [2, 4], "dtype": "float32", "inputs_finite": True})  # doctest: +ELLIPSIS
        'NaN first produced by `enc.attn` (MultiheadAttention), output_0, forward pass of TRAIN step 52; its inputs...'
    """
    at = f"{o.get('mode', 'TRAIN')} step {o.get('mode_step', o.get('step'))}"
    kind = "NaN" if o.get("nan") else "Inf" if o.get("inf") else "NaN/Inf"
    if o.get("pass") == "backward":
        finite = o.get("loss_finite")
        loss = "the loss was finite: an overflow in the backward pass" if finite else "the loss was not finite"
        skipped = "; GradScaler skipped the step" if o.get("amp_skipped") else ""
        where = f"the gradient of `{o.get('parameter')}` (backward pass of {at}; {loss}{skipped})"
        return f"{kind} first in {where} ({_counts(o)})"
    if o.get("module") is None:
        where = _WHERE.get(str(o.get("where")), "outside the modules")
        return f"{kind} {where}, forward pass of {at}"
    text = f"{kind} first produced by `{o['module']}` ({o.get('module_type', '?')}), {o.get('output', 'output')}, "
    text += f"forward pass of {at}; its inputs were " + ("finite" if o.get("inputs_finite") else "not all finite")
    if o.get("parameters"):
        text += f"; its parameter(s) {', '.join(o['parameters'])} hold NaN/Inf"
    return f"{text} ({_counts(o)})"
