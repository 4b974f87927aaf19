"""A run name that passes every earlier check but resolves outside the log directory is refused (issue 18).

TensorBoard lists ``link`` (a real folder of TensorBoard scalars when its data provider scanned the log directory);
the folder is then swapped for a symlink to a trainspect run outside the log directory. The run scan does not follow
symlinks, so only the stay-under-the-logdir check of the lookup stands between the request and the outside run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tb_synth as synth
from _support.tensorboard import PREFIX, make_client
from tensorboard import errors

from trainspect.tb_plugin.runs import RunIndex


def _tensorboard_run(folder: Path) -> None:
    """A folder TensorBoard lists as a run (an events file; no TensorFlow import needed to write an empty one)."""
    folder.mkdir(parents=True)
    (folder / "events.out.tfevents.1700000000.host").write_bytes(b"")


def _swap_for_symlink(folder: Path, target: Path) -> None:
    shutil.rmtree(folder)
    folder.symlink_to(target, target_is_directory=True)


def test_a_listed_run_that_became_a_symlink_outside_is_not_served(tmp_path: Path) -> None:
    root, outside = tmp_path / "logdir", tmp_path / "outside"
    synth.synthetic_run(outside, seconds=30, steps=50)
    _tensorboard_run(root / "link")
    _tensorboard_run(root / "inside")
    client, _plugin = make_client(root)
    runs = json.loads(client.get(PREFIX + "/runs").data)["runs"]
    assert {r["name"] for r in runs} == {"link", "inside"}  # both listed by TensorBoard, neither has trainspect data
    _swap_for_symlink(root / "link", outside)
    synth.synthetic_run(root / "elsewhere", seconds=30, steps=50)
    _swap_for_symlink(root / "inside", root / "elsewhere")  # a symlink that stays under the log directory is fine
    for route in ("/profiler", "/heatmap", "/timeseries"):
        response = client.get(PREFIX + route, query_string={"run": "link"})
        assert response.status_code == 404, (route, response.data[:300])
        assert json.loads(response.data)["error"].startswith("Not found")
    inside = client.get(PREFIX + "/profiler", query_string={"run": "inside"})
    assert inside.status_code == 200 and json.loads(inside.data)["run"] == "inside"


def test_run_index_lookup_stays_under_the_logdir(tmp_path: Path) -> None:
    root, outside = tmp_path / "logdir", tmp_path / "outside"
    synth.synthetic_run(outside, seconds=30, steps=50)
    root.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    synth.write_manifest(root / "real")
    index = RunIndex(str(root), ttl_s=0.0)
    assert list(index.runs()) == ["real"]  # the scan does not follow the symlink
    with pytest.raises(errors.NotFoundError):
        index.lookup("link", known={"link"})
    with pytest.raises(errors.NotFoundError):
        index.lookup("../outside", known={"../outside"})
    assert index.lookup("real", known={"real"}).path == (root / "real").resolve()
