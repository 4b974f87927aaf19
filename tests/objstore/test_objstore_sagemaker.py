"""smdebug's and SageMaker's layouts read in place from s3://bucket/<job>/debug-output and .../profiler-output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _support.s3 import BUCKET, S3Server, make_fs

import trainspect as ts
from trainspect.profiler import SystemMetricsReader, load_profiler_data

DATA = Path(__file__).resolve().parents[1] / "data"
FIX = Path(__file__).resolve().parents[1] / "data" / "smdebug_profiler_resources"  # see its README.md (Apache-2.0)
JOB = f"s3://{BUCKET}/job-42"


def upload(folder: Path, prefix: str) -> None:
    fs = make_fs()
    fs.pipe({f"{prefix}/{p.relative_to(folder).as_posix()}": p.read_bytes() for p in folder.rglob("*") if p.is_file()})


def test_debug_output_reads_as_the_local_trial(s3: S3Server) -> None:
    local = DATA / "smdebug_trial_raw"
    upload(local, f"{BUCKET}/job-42/debug-output")
    remote, here = ts.create_trial(f"{JOB}/debug-output"), ts.create_trial(str(local))
    assert remote.tensor_names() == here.tensor_names() and remote.steps() == here.steps()
    assert remote.workers() == here.workers() and remote.job_ended == here.job_ended
    for name in here.tensor_names():
        for step in here.tensor(name).steps():
            assert np.array_equal(remote.tensor(name).value(step), here.tensor(name).value(step))


def test_profiler_output_reads_as_the_local_folder(s3: S3Server) -> None:
    assert FIX.is_dir(), f"the fixtures are missing: {FIX}"
    upload(FIX / "test_traces", f"{BUCKET}/job-42/profiler-output")
    reader = SystemMetricsReader(f"{JOB}/profiler-output")
    assert reader.source == "sagemaker"
    assert len(reader.get_events(1591100000, 1692300000)) == 78  # smdebug's own expected count
    remote = load_profiler_data(f"{JOB}/profiler-output", final=True)
    here = load_profiler_data(FIX / "test_traces", final=True)
    assert remote.source == here.source == "sagemaker"
    assert len(remote.system) == len(here.system) and len(remote.framework) == len(here.framework)


def test_missing_prefix_is_one_line(s3: S3Server) -> None:
    with pytest.raises(FileNotFoundError, match=f"{JOB}/nothing does not exist"):
        ts.create_trial(f"{JOB}/nothing")
