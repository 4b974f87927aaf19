"""A disk that fills up during training, for real (a small tmpfs in a private mount namespace): issue 14."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

TRAIN = textwrap.dedent(
    """
    import json, sys, torch, trainspect as ts
    torch.set_num_threads(1)
    out, record, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    hook = ts.torch.Hook(out, include_collections=["weights", "gradients", "losses"],
                         save_config=ts.SaveConfig(save_interval=1), rules=[ts.rules.ExplodingTensor()])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    x, y = torch.randn(16, 128), torch.randn(16, 1)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    json.dump(losses, open(record, "w"))
    print("trained", flush=True)
    hook.close()
    print("closed", flush=True)
    """
)

CHECK = textwrap.dedent(
    """
    import json, os, subprocess, sys, trainspect as ts
    out, result = sys.argv[1], sys.argv[2]
    trial = ts.create_trial(out)
    steps = trial.steps()
    loss = trial.tensor("MSELoss_output_0") if steps else None
    report = subprocess.run([sys.executable, "-m", "trainspect.cli", "report", out], capture_output=True, text=True)
    files = [os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs]
    json.dump({"steps": steps, "losses": {s: float(loss.value(s)) for s in steps} if loss else {},
               "weights_shape": list(trial.tensor("Sequential_0.weight").value(steps[-1]).shape) if steps else None,
               "files": files, "report_rc": report.returncode, "report_err": report.stderr}, open(result, "w"))
    """
)


def _namespace_prefix() -> list[str]:
    if shutil.which("unshare") and subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-Urm"]
    if os.geteuid() == 0 and shutil.which("unshare"):
        return ["unshare", "-m"]
    pytest.fail("this test needs a private mount namespace (util-linux unshare, user namespaces or root)")


@pytest.mark.parametrize("size", ["3m", "400k"])
def test_a_disk_that_fills_fast_keeps_every_step_written_before(tmp_path, size):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "check.py").write_text(CHECK)
    disk = tmp_path / "disk"
    disk.mkdir()
    out, record, result = disk / "run", tmp_path / "losses.json", tmp_path / "result.json"
    py = sys.executable
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {disk} && "
        f"{py} {tmp_path / 'train.py'} {out} {record} 40; rc=$?; "
        f"{py} {tmp_path / 'check.py'} {out} {result} >&2; exit $rc"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRAINSPECT_TESTING"}  # as users run it: failures are caught
    proc = subprocess.run(
        [*_namespace_prefix(), "sh", "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["trained", "closed"]
    assert "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("trainspect:")]
    assert 1 <= len(said) <= 2, said  # capture stops with one line; close says in one line what it could not write
    assert "No space left on device" in said[0]
    res = json.loads(result.read_text())
    losses = json.loads(record.read_text())
    assert len(res["steps"]) >= 1
    assert res["steps"] == list(range(len(res["steps"])))
    for step, value in res["losses"].items():
        assert value == pytest.approx(losses[int(step)], rel=1e-6)
    assert res["weights_shape"] == [256, 128]
    assert not [f for f in res["files"] if f.endswith(".tmp")], res["files"]
    if res["report_rc"] != 0:  # the report did not fit: one line, exit 2
        assert res["report_rc"] == 2 and len(res["report_err"].strip().splitlines()) == 1, res["report_err"]
