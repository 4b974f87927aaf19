"""The one writer of synthetic run directories for tests and benchmarks, through trainspect's own writers (no torch).

Each test package shapes its data (``tests/report/synth_run.py``, ``tests/tb_plugin/tb_synth.py``,
``tests/rules/rules_synth.py``) and writes it with these functions: system samples of a node, a worker's steps and
spans, tensor step records, verdicts and the end of the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.collections import CollectionManager
from trainspect.profiler import schema
from trainspect.profiler.writers import FrameFile, SystemChunkWriter
from trainspect.rules.verdict import Verdict, write_verdicts
from trainspect.step import StepRecord
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import claim_run_directory, mark_job_end
from trainspect.store.run_writer import RunWriter


def start_run(run: Path, job_id: str, info: dict[str, Any]) -> RunLayout:
    """Claim ``run`` as a run directory of a job: its manifest, with ``info`` (``{"framework": ...}``)."""
    layout = RunLayout(run)
    claim_run_directory(layout, job_id, info)
    return layout


def write_system(
    run: Path, node: str, interval_ms: int, times: np.ndarray, keys: Sequence[str], values: np.ndarray, flush_every: int
) -> None:
    """One node's system samples: row ``i`` of ``values`` at ``times[i]``, a chunk flushed every ``flush_every``."""
    writer = SystemChunkWriter(RunLayout(run).system_dir(node), node, interval_ms)
    for i, t in enumerate(times):
        writer.append(float(t), dict(zip(keys, values[i].tolist(), strict=True)))
        if (i + 1) % flush_every == 0:
            writer.flush()
    writer.close()


def write_steps(
    run: Path,
    worker: str,
    node: str,
    started: tuple[float, float],
    tables: Sequence[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]],
    closed: float | None,
) -> None:
    """One worker's framework file: its start event, (steps, spans) tables, and its close event unless None.

    Args:
        started: (time of the start event, process start time); the file is named after the process start.
    """
    when, process_start = started
    frames = FrameFile(
        RunLayout(run).framework_dir(worker) / f"{int(process_start * 1000):013d}{schema.FRAMEWORK_SUFFIX}"
    )
    frames.write_json(
        schema.KIND_EVENT,
        {
            "event": "start",
            "time": when,
            "process_start": process_start,
            "worker": worker,
            "node": node,
            "host": node,
            "pid": 1,
            "config": {},
        },
    )
    for steps, spans in tables:
        frames.write(schema.KIND_TABLE, schema.encode_table("steps", dict(steps)))
        frames.write(schema.KIND_TABLE, schema.encode_table("spans", dict(spans)))
    if closed is not None:
        frames.write_json(schema.KIND_EVENT, {"event": "close", "time": closed})
    frames.close()


def _submit(run: Path, worker: str, records: list[StepRecord], chief: bool = False) -> RunWriter:
    """Hand one worker's step records to a started writer, and the collections they name; return the writer."""
    writer = RunWriter(RunLayout(run), worker, tensorboard=False, chief=chief)
    writer.start()
    manager = CollectionManager()
    members: dict[str, set[str]] = {}
    for rec in records:
        writer.submit(rec)
        for t in rec.tensors.values():
            for c in t.collections:
                members.setdefault(c, set()).add(t.name)
    for cname in members:
        manager.get(cname)
    doc: dict[str, Any] = manager.to_dict()
    for cname, names in members.items():
        doc[cname]["tensor_names"] = sorted(set(doc[cname].get("tensor_names", [])) | names)
    writer.write_collections(doc)
    return writer


def write_tensors(run: Path, records: list[StepRecord], end: bool = True) -> None:
    """Write tensor step records of ``worker_0`` through the store's writer, with the collections they name."""
    writer = _submit(run, "worker_0", records, chief=True)
    if end:
        writer.close(end_job=True)
    else:
        writer.wait_idle(10)


def end_run(run: Path, verdicts: list[Verdict] | None = None, end: bool = True) -> Path:
    """Write the final verdicts (when given) and the end-of-job marker (when ``end``)."""
    layout = RunLayout(run)
    if verdicts is not None:
        write_verdicts(layout.verdicts, verdicts, final=True)
    if end:
        mark_job_end(layout)
    return run


def write_worker_tensors(run: Path, worker: str, records: list[StepRecord], end: bool = False) -> None:
    """Write one worker's tensor step records (a run of several workers: one call per worker, ``end`` on the last).

    The collections the records name are written with them; ``end`` also writes the end-of-job marker.
    """
    _submit(run, worker, records, chief=end).close(end_job=end)
