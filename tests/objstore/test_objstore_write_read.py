"""A hook writing to s3:// (moto's S3 server on 127.0.0.1), the Trial and the commands reading it back."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _support.package import PACKAGE_ROOT
from _support.polling import wait_for
from _support.s3 import BUCKET, S3Server, make_fs
from _train import Job

import trainspect as ts
from trainspect.cli import main
from trainspect.store.remote import UnsupportedURL

URL = f"s3://{BUCKET}/exp1"
ROOT = Path(__file__).resolve().parents[2]


def assert_bit_exact(trial: ts.Trial, job: Job) -> None:
    weights = trial.tensor("Net_fc1.weight")
    assert trial.steps() == list(range(len(job.weights)))
    for step, expected in enumerate(job.weights):
        assert np.array_equal(weights.value(step), expected)
    assert [float(trial.tensor("loss").value(s)) for s in trial.steps()] == pytest.approx(job.losses, rel=1e-6)


@pytest.mark.parametrize("url", ["gs://bucket/run", "az://container/run", "nosuch://x/run"])
def test_unsupported_url_is_refused_in_one_line(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedURL, match=r"pip install trainspect\[|fsspec implementation") as err:
        Job(url)
    assert url in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UnsupportedURL, match="no storage backend"):
        ts.create_trial(url)
    assert list(tmp_path.iterdir()) == []  # no local folder named "gs:" or similar


def test_cli_refuses_unsupported_urls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["info", "gs://b/run"],
        ["rules", "gs://b/run"],
        ["report", "gs://b/run"],
        ["run", "--out", "gs://b/run", "--", sys.executable, "-c", "pass"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "gs://b/run" in err and "pip install trainspect[gcs]" in err and len(err.splitlines()) == 1, err


def _uploaded(run: str, *parts: str) -> bool:
    """Whether the store holds, under ``run``, a non-empty object whose key contains each of ``parts``.

    A sweep of the uploader may send a file that has no bytes yet (an index before its first entries) as an empty
    part at offset 0, which a later part at the same offset replaces: it does not count.
    """
    found = make_fs().find(f"{BUCKET}/{run}", detail=True)
    return all(any(p in key and info["size"] > 0 for key, info in found.items()) for p in parts)


def test_hook_writes_parts_and_trial_reads_bit_exact(s3: S3Server) -> None:
    job = Job(URL, save_all=True)
    spool = job.hook.collector.remote.spool
    job.train(12)
    assert wait_for(lambda: _uploaded("exp1", "tensors/worker_0/index-000000.idx.parts/", "data-000000.bin.parts/"))
    job.train(12)  # after an upload in the middle of the run (waited for, not slept: a busy machine uploads late)
    job.hook.close()
    assert not spool.exists()  # everything reached the store: the spool is gone
    keys = [k.removeprefix(f"{BUCKET}/exp1/") for k in make_fs().find(f"{BUCKET}/exp1")]
    assert "training_job_end.ts" in keys and "trainspect.json" in keys and "workers/worker_0.json" in keys
    index_parts = [k for k in keys if k.startswith("tensors/worker_0/index-000000.idx.parts/")]
    data_parts = [k for k in keys if k.startswith("tensors/worker_0/data-000000.bin.parts/")]
    assert len(index_parts) >= 2 and len(data_parts) >= 2, keys  # uploaded while training ran, not only at close
    assert any("tfevents" in k and ".parts/" in k for k in keys)
    trial = ts.create_trial(URL)
    assert trial.job_ended and trial.workers() == ["worker_0"] and trial.name == "exp1"
    assert_bit_exact(trial, job)
    assert trial.problems == []
    mirror = trial._source.mirror
    assert mirror.requests <= 2 + len(keys)  # one listing, one read per object


def test_a_losses_only_run_reads_back_whole(s3: S3Server) -> None:
    # the default configuration writes no raw values: the data file is empty, and must still exist in the store
    job = Job(URL, include_collections=["losses"])
    job.train(6)
    job.hook.close()
    keys = [k.removeprefix(f"{BUCKET}/exp1/") for k in make_fs().find(f"{BUCKET}/exp1")]
    assert "tensors/worker_0/data-000000.bin.parts/0000000000000000" in keys
    trial = ts.create_trial(URL)
    assert trial.problems == []
    assert [float(trial.tensor("MSELoss_output_0").value(s)) for s in trial.steps()] == pytest.approx(job.losses)


def test_commands_read_and_write_back(s3: S3Server, capsys: pytest.CaptureFixture[str]) -> None:
    job = Job(URL)
    job.train(15)
    job.hook.close()
    assert main(["info", URL, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["steps"] == 15 and info["ended"] and info["workers"] == ["worker_0"]
    assert main(["rules", URL, "--rule", "LossNotDecreasing"]) in (0, 1)
    capsys.readouterr()
    verdicts = json.loads(make_fs().cat_file(f"{BUCKET}/exp1/rules/verdicts.json"))
    assert [v["rule"] for v in verdicts["verdicts"]] == ["LossNotDecreasing"]
    assert main(["report", URL]) == 0
    assert b"LossNotDecreasing" in make_fs().cat_file(f"{BUCKET}/exp1/report.html")
    assert main(["compare", URL, URL]) == 0


def test_tensorboard_plugin_routes_over_a_url(s3: S3Server) -> None:
    from tensorboard.backend import application
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from werkzeug import test as wtest
    from werkzeug import wrappers

    from trainspect.store.remote.reader import open_mirror
    from trainspect.tb_plugin.plugin import TrainspectPlugin

    job = Job(URL, rules=["LossNotDecreasing"])
    job.train(10)
    job.hook.close()
    mirror = open_mirror(URL)  # what `trainspect ui URL` serves (kept up to date by a thread)
    logdir = str(mirror.local.parent)
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, logdir)
    plugin = TrainspectPlugin(base_plugin.TBContext(logdir=logdir, data_provider=provider, multiplexer=mux))
    client = wtest.Client(application.TensorBoardWSGI([plugin], data_provider=provider), wrappers.Response)
    runs = json.loads(client.get("/data/plugin/trainspect/runs").data)["runs"]
    assert [r["name"] for r in runs] == ["exp1"] and runs[0]["ended"] and runs[0]["verdicts"]
    rules = json.loads(client.get("/data/plugin/trainspect/rules").data)
    assert "LossNotDecreasing" in json.dumps(rules)
    tags = mux.GetAccumulator("exp1").Tags()  # the TensorBoard summaries went up as parts too
    assert any("loss" in tag for tag in tags.get("tensors", []) + tags.get("scalars", []))


def test_two_nodes_write_one_run_under_trainspect_run(s3: S3Server, tmp_path: Path) -> None:
    """Two ranks on two "hosts" (own spools, own node names), each under ``trainspect run --out URL``."""
    import os

    script = tmp_path / "train.py"  # an unmodified training script
    here = str(Path(__file__).parent)
    script.write_text(
        f"import sys; sys.path.insert(0, {here!r})\nfrom _train import Net\nimport torch\nm = Net()\n"
        "opt = torch.optim.SGD(m.parameters(), 0.1)\nfor _ in range(8):\n    opt.zero_grad()\n"
        "    m(torch.randn(4, 8)).pow(2).mean().backward()\n    opt.step()\n"
    )
    config = tmp_path / "hook.json"
    config.write_text(
        json.dumps(
            {
                "HookParameters": {"include_workers": "all", "save_interval": 1},
                "CollectionConfigurations": [{"CollectionName": "weights"}],
            }
        )
    )
    procs = []
    for rank, node in ((0, "node-a"), (1, "node-b")):
        env = {
            **os.environ,
            "PYTHONPATH": str(PACKAGE_ROOT),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "TRAINSPECT_NODE_ID": node,
            "TRAINSPECT_JOB_ID": "job-2nodes",
            "TRAINSPECT_SPOOL_DIR": str(tmp_path / node),
        }
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainspect.cli",
                    "run",
                    "--out",
                    URL,
                    "--config",
                    str(config),
                    "--",
                    sys.executable,
                    str(script),
                ],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        _out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        assert f"recorded into {URL}" in err
    trial = ts.create_trial(URL)
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.job_ended and trial.incomplete_steps() == {} and trial.steps() == list(range(8))
    assert "loss" in trial.tensor_names()
    for step in trial.steps():
        values = [trial.tensor("Net_fc1.weight").value(step, worker=w) for w in trial.workers()]
        assert values[0].shape == (16, 8) and values[1].shape == (16, 8)
    nodes = {json.loads(make_fs().cat_file(k))["node"] for k in make_fs().find(f"{BUCKET}/exp1/workers")}
    assert nodes == {"node-a", "node-b"}
    assert not [k for k in make_fs().find(f"{BUCKET}/exp1") if "lock" in k]  # no coordination files


def test_live_reading_and_rules_watch(s3: S3Server, tmp_path: Path) -> None:
    import os

    job = Job(URL)
    job.train(5)
    trial = wait_for(lambda: _trial_with_steps(5))
    assert trial is not None and not trial.job_ended
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainspect.cli",
            "rules",
            URL,
            "--watch",
            "--poll",
            "0.5",
            "--rule",
            "LossNotDecreasing",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job.train(5)
    assert wait_for(lambda: len(trial.steps()) == 10)  # the same Trial sees the new steps (upload + listing)
    assert not trial.job_ended
    job.hook.close()
    assert wait_for(lambda: trial.loaded_all_steps)
    assert_bit_exact(trial, job)
    out, err = watch.communicate(timeout=60)
    assert watch.returncode in (0, 1), err
    assert "LossNotDecreasing" in out


def _trial_with_steps(n: int) -> ts.Trial | None:
    try:
        trial = ts.create_trial(URL)
    except FileNotFoundError:
        return None
    return trial if len(trial.steps()) >= n else None


def test_unreachable_store_at_start_is_one_line(
    s3: S3Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["run", "--out", "s3://no-such-bucket/x", "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err.strip()
    assert "s3://no-such-bucket/x" in err and "no-such-bucket" in err and len(err.splitlines()) == 1
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    for key in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(key, "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["run", "--out", URL, "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err.strip()
    assert URL in err and "credentials" in err.lower() and len(err.splitlines()) == 1, err
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    assert main(["run", "--out", URL, "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err.strip()
    assert URL in err and "cannot be reached" in err and len(err.splitlines()) == 1


def test_url_with_file_scheme_is_a_local_directory(tmp_path: Path) -> None:
    job = Job(f"file://{tmp_path}/run")
    job.train(3)
    job.hook.close()
    assert (tmp_path / "run" / "trainspect.json").is_file()
    assert ts.create_trial(f"file://{tmp_path}/run").steps() == [0, 1, 2]


def test_logs_nothing_alarming_on_a_clean_run(s3: S3Server, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        job = Job(URL)
        job.train(3)
        job.hook.close()
        ts.create_trial(URL).steps()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_spool_is_removed_and_close_is_idempotent(s3: S3Server, caplog: pytest.LogCaptureFixture) -> None:
    unused = Job(URL)
    unused_spool = unused.hook.collector.remote.spool
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        unused.hook.close()
    assert not unused_spool.exists()  # a hook that never recorded leaves nothing behind
    assert any(f"nothing was recorded in {URL}" in r.getMessage() for r in caplog.records)  # and says so
    caplog.clear()
    job = Job(f"s3://{BUCKET}/exp3")
    job.train(3)
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        job.hook.close()
        job.hook.close()
    assert not job.hook.collector.remote.spool.exists()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert ts.create_trial(f"s3://{BUCKET}/exp3").steps() == [0, 1, 2]


def test_ui_and_watch_follow_a_live_run_on_a_local_copy(s3: S3Server) -> None:
    import argparse

    from trainspect.store.remote.cli import run_with_urls

    job = Job(URL)
    job.train(3)
    assert wait_for(lambda: _trial_with_steps(3))

    def command(args: argparse.Namespace) -> int:  # what `trainspect ui` runs, given the local copy
        local = Path(args.dir)
        assert local.is_dir() and local.name == "exp1"
        job.train(3)
        assert wait_for(lambda: len(ts.create_trial(str(local)).steps()) == 6)  # the copy follows the store
        return 0

    assert run_with_urls(argparse.Namespace(command_name="ui", dir=URL), command) == 0
    job.hook.close()


def test_profiler_data_goes_up_and_reads_back(s3: S3Server) -> None:
    from trainspect.profiler import load_profiler_data
    from trainspect.profiler.config import ProfilerConfig

    job = Job(URL, profiler_config=ProfilerConfig(system_monitor_interval_millis=100))
    job.train(10)
    assert wait_for(lambda: _uploaded("exp1", ".tsys.parts/"))  # system samples taken and on their way up
    job.hook.close()
    data = load_profiler_data(URL)
    assert data.job_ended and data.problems == []
    assert list(data.framework) == ["worker_0"] and len(data.system) == 1
    keys = make_fs().find(f"{BUCKET}/exp1/profiler")
    assert any(".tsys.parts/" in k for k in keys) and any(".tfw.parts/" in k for k in keys)
