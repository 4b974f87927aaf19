"""The store going away: mid-run (and back before close: nothing lost), for good at close (spool kept, synced later),
and a spool that fills up (capture pauses, training does not)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from _support.polling import wait_for
from _support.s3 import BUCKET, S3Server, make_fs
from _train import Job

import trainspect as ts
from trainspect.cli import main

URL = f"s3://{BUCKET}/exp2"


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


def test_server_killed_mid_run_and_restarted_loses_nothing(s3: S3Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="trainspect")
    job = Job(URL)
    job.train(8)
    fs = make_fs()
    assert wait_for(lambda: any("index-000000.idx.parts" in k for k in fs.find(f"{BUCKET}/exp2")))
    with job.hook.collector.remote._lock:  # no upload between the copy and the kill (moto forgets what it got)
        saved = {k: fs.cat_file(k) for k in fs.find(f"{BUCKET}/exp2")}
        s3.kill()  # the server dies with the run half uploaded
    job.train(8)
    assert wait_for(lambda: warnings_about(caplog, "cannot upload to"))
    job.train(4)  # training goes on while the store is down
    with job.hook.collector.remote._lock:  # a retry between the start and the restore would be overwritten
        s3.start()  # back on the same port; moto keeps objects in memory, so the fixture restores what it held
        fs = make_fs()
        fs.mkdir(BUCKET)
        fs.pipe(saved)
    job.train(4)
    job.hook.close()
    assert len(warnings_about(caplog, "cannot upload to")) == 1 and warnings_about(caplog, "uploads to")
    trial = ts.create_trial(URL)
    assert trial.job_ended and trial.steps() == list(range(24))
    for step, expected in enumerate(job.weights):
        assert np.array_equal(trial.tensor("Net_fc1.weight").value(step), expected)


def test_server_down_at_close_keeps_the_spool_for_sync(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRAINSPECT_UPLOAD_CLOSE_S", "1")
    monkeypatch.setenv("TRAINSPECT_UPLOAD_INTERVAL_MS", "600000")  # nothing goes up before the server dies
    caplog.set_level(logging.WARNING, logger="trainspect")
    job = Job(URL)
    spool = job.hook.collector.remote.spool
    job.train(10)
    s3.kill()
    job.hook.close()
    [warning] = warnings_about(caplog, "unreachable at close")
    assert f"trainspect sync {spool} {URL}" in warning
    assert (spool / "trainspect.json").is_file() and (spool / "training_job_end.ts").is_file()
    s3.start()
    make_fs().mkdir(BUCKET)
    assert main(["sync", str(spool)]) == 0  # the URL is recorded in the spool
    assert "is complete" in capsys.readouterr().out
    assert not spool.exists()
    trial = ts.create_trial(URL)
    assert trial.job_ended and trial.steps() == list(range(10))
    assert np.array_equal(trial.tensor("Net_fc1.weight").value(9), job.weights[9])


def test_sync_refuses_what_is_not_a_spool(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    assert main(["sync", str(tmp_path), URL]) == 2
    assert "not a trainspect spool" in capsys.readouterr().err


def test_full_spool_pauses_capture_not_training(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRAINSPECT_SPOOL_MB", "1")
    monkeypatch.setenv("TRAINSPECT_UPLOAD_CLOSE_S", "1")
    caplog.set_level(logging.WARNING, logger="trainspect")
    job = Job(URL, width=2048, export_tensorboard=False)  # fc1.weight and its gradient: 128 KiB a step
    s3.kill()  # nothing drains the spool
    trained = 0
    while not warnings_about(caplog, "tensor capture pauses") and trained < 400:
        job.train(2)
        trained += 2
    assert warnings_about(caplog, "tensor capture pauses")
    spool = job.hook.collector.remote.spool
    job.hook.flush()  # what was queued before the pause reaches the spool

    def data() -> int:
        return sum(p.stat().st_size for p in spool.rglob("data-*.bin"))

    before = data()
    job.train(20)  # these steps are dropped: the spool stops growing
    job.hook.flush()
    assert data() == before
    job.hook.close()
    assert len(warnings_about(caplog, "tensor capture pauses")) == 1
    s3.start()
