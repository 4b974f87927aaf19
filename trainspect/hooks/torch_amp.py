"""Steps that ``torch.amp.GradScaler`` skipped for inf/NaN gradients, recorded as such (``amp/skipped``, ``amp/scale``).

A skipped step is normal under mixed precision (the scaler lowers its scale and the next step goes on);
ExplodingTensor allows ``amp_skips_allowed`` of them in a row before it is an issue.
"""

from __future__ import annotations

from typing import Any

from trainspect.hooks.torch_nan_origin import NanOrigin

__all__ = ["amp_skipped", "record_amp_skip"]


def amp_skipped(scaler: Any, optimizer: Any) -> bool:
    """Whether ``GradScaler.step(optimizer)`` just skipped the optimizer step (it found inf/NaN gradients).

    Read from the scaler's per-optimizer state (``_found_inf_per_device``, which ``step`` itself just read: no
    further synchronisation); a scaler without it (another version) counts as not skipped.
    """
    try:
        found = scaler._found_inf_per_device(optimizer)
        return bool(found) and sum(float(v.item()) for v in found.values()) > 0
    except Exception:
        return False


def record_amp_skip(hook: Any, nan: NanOrigin | None, scaler: Any, optimizer: Any, params: Any, losses: Any) -> None:
    """Record a ``GradScaler.step`` that skipped the open training step, and look at its gradients.

    ``amp/skipped`` (1) and ``amp/scale`` go to collection ``amp`` (ExplodingTensor allows ``amp_skips_allowed``
    skipped steps in a row); the NaN origin finder names the first non-finite gradient (once).
    """
    if not amp_skipped(scaler, optimizer):
        return
    hook.save_tensor("amp/skipped", 1.0, "amp")
    hook.save_tensor("amp/scale", float(scaler.get_scale()), "amp")
    if nan is not None:
        nan.check_gradients(params, losses, skipped=True)
