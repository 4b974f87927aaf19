"""Runs of a job of several ranks, written in this process as each rank's hook would write them."""

from __future__ import annotations

from pathlib import Path

import pytest


def record_two_rank_job(out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A two-rank job (as torchrun starts it) into ``out``: one step each, tensors from rank 0 alone (the default)."""
    import torch

    import trainspect as ts

    monkeypatch.setenv("TRAINSPECT_JOB_ID", "job-two-ranks")
    for rank in (0, 1):  # include_workers="one", the default: rank 1 writes its manifest, not its tensors
        for name, value in {"RANK": rank, "WORLD_SIZE": 2, "LOCAL_RANK": rank}.items():
            monkeypatch.setenv(name, str(value))
        model = torch.nn.Linear(3, 1)
        with ts.torch.Hook(out) as hook:
            hook.register_module(model)
            model(torch.ones(2, 3)).sum().backward()
    return out
