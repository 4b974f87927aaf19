"""Runs written by a real hook for the Trial tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hooks"))

from hooktrain import LOSS, PARAMS, Tiny, tname  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.modes import ModeKeys  # noqa: E402

__all__ = ["LOSS", "PARAMS", "Tiny", "tname", "write_run"]


def write_run(out_dir: Path, train: int = 4, evaluate: int = 2, **kw: object) -> Tiny:
    """TRAIN steps, EVAL steps, then TRAIN again (2 steps); weights+gradients every step."""
    tiny = Tiny()
    kw.setdefault("include_collections", ["weights", "biases", "gradients", "losses"])
    kw.setdefault("save_config", ts.SaveConfig(save_interval=1))
    hook = ts.torch.Hook(out_dir, export_tensorboard=False, **kw)
    tiny.register(hook)
    hook.set_mode(ModeKeys.TRAIN)
    tiny.train(train)
    hook.set_mode(ModeKeys.EVAL)
    tiny.evaluate(evaluate)
    hook.set_mode(ModeKeys.TRAIN)
    tiny.train(2)
    hook.close()
    return tiny
