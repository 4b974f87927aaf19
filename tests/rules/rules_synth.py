"""Synthetic step data for rule tests: build StepData and StepRecord values from plain arrays."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import synthetic_run

from trainspect.modes import ModeKeys
from trainspect.reductions import Reduction
from trainspect.rules import Check, StepData, TensorRule, Verdict, evaluate_steps
from trainspect.step import StepRecord, TensorRecord


def tensor(name: str, value: object = None, colls: Iterable[str] = (), **reductions: float) -> TensorRecord:
    reds = {Reduction.parse(key): float(v) for key, v in reductions.items()}
    arr = None if value is None else np.asarray(value)
    return TensorRecord(name, arr, reds, frozenset(colls))


def step(
    n: int,
    roles: Mapping[str, list[TensorRecord]] | list[TensorRecord],
    mode: ModeKeys = ModeKeys.TRAIN,
    mode_step: int | None = None,
    wall: float | None = None,
    worker: str = "worker_0",
) -> StepData:
    if not isinstance(roles, Mapping):
        roles = {"main": roles}
    return StepData(
        n,
        mode,
        n if mode_step is None else mode_step,
        float(n) if wall is None else wall,
        worker,
        {k: tuple(v) for k, v in roles.items()},
    )


def record(
    n: int,
    tensors: list[TensorRecord],
    mode: ModeKeys = ModeKeys.TRAIN,
    wall: float | None = None,
    worker: str = "worker_0",
) -> StepRecord:
    return StepRecord(mode, n, n, float(n) if wall is None else wall, worker, {t.name: t for t in tensors})


def run(rule: TensorRule, steps: Iterable[StepData]) -> Verdict:
    return evaluate_steps(rule, list(steps))


def checks(rule: TensorRule, steps: Iterable[StepData]) -> list[Check | None]:
    state = rule.init_state()
    return [rule.check(state, s) for s in steps]


def losses(
    values: Iterable[float], name: str = "loss", mode: ModeKeys = ModeKeys.TRAIN, start: int = 0
) -> list[StepData]:
    return [step(start + i, [tensor(name, np.float32(v), ["losses"])], mode) for i, v in enumerate(values)]


def write_run(path: object, records: list[StepRecord], end: bool = True) -> str:
    """Write StepRecords into a real run directory (through the store's writer), with collections."""
    synthetic_run.start_run(Path(str(path)), "test-job", {"framework": "numpy", "config": {}})
    synthetic_run.write_tensors(Path(str(path)), records, end)
    return str(path)


def write_workers_run(path: object, by_worker: Mapping[str, list[StepRecord]], end: bool = True) -> str:
    """Write a run of several workers (each worker's StepRecords through the store's writer); ``end``: the job ended."""
    run = Path(str(path))
    synthetic_run.start_run(run, "test-job", {"framework": "numpy", "config": {}, "world_size": len(by_worker)})
    names = list(by_worker)
    for i, worker in enumerate(names):
        synthetic_run.write_worker_tensors(run, worker, by_worker[worker], end=end and i == len(names) - 1)
    return str(run)


def train_eval_rounds(train: list[float], val: list[float]) -> list[StepData]:
    """Rounds of 3 TRAIN steps then 2 EVAL steps with these losses, and a last TRAIN step closing the last evaluation."""
    out, n = [], 0
    for t, v in zip(train, val, strict=True):
        for mode, loss, count in ((ModeKeys.TRAIN, t, 3), (ModeKeys.EVAL, v, 2)):
            for _ in range(count):
                out.append(step(n, [tensor("loss", np.float32(loss), ["losses"])], mode))
                n += 1
    out.append(step(n, [tensor("loss", np.float32(train[-1]), ["losses"])], ModeKeys.TRAIN))
    return out
