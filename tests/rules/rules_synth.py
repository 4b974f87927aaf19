"""Synthetic step data for rule tests: build StepData and StepRecord values from plain arrays."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

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
) -> StepData:
    if not isinstance(roles, Mapping):
        roles = {"main": roles}
    return StepData(
        n,
        mode,
        n if mode_step is None else mode_step,
        float(n) if wall is None else wall,
        "worker_0",
        {k: tuple(v) for k, v in roles.items()},
    )


def record(
    n: int, tensors: list[TensorRecord], mode: ModeKeys = ModeKeys.TRAIN, wall: float | None = None
) -> StepRecord:
    return StepRecord(mode, n, n, float(n) if wall is None else wall, "worker_0", {t.name: t for t in tensors})


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
    from pathlib import Path

    from trainspect.collections import CollectionManager
    from trainspect.store.layout import RunLayout
    from trainspect.store.manifest import claim_run_directory
    from trainspect.store.run_writer import RunWriter

    layout = RunLayout(Path(str(path)))
    claim_run_directory(layout, "test-job", {"framework": "numpy", "config": {}})
    writer = RunWriter(layout, "worker_0", tensorboard=False)
    writer.start()
    manager = CollectionManager()
    members: dict[str, set[str]] = {}
    for rec in records:
        writer.submit(rec)
        for t in rec.tensors.values():
            for c in t.collections:
                members.setdefault(c, set()).add(t.name)
    doc = manager.to_dict()
    for cname in members:
        manager.get(cname)
    doc = manager.to_dict()
    for cname, names in members.items():
        doc[cname]["tensor_names"] = sorted(set(doc[cname].get("tensor_names", [])) | names)
    writer.write_collections(doc)
    if end:
        writer.close(end_job=True)
    else:
        writer.wait_idle(10)
    return str(path)
