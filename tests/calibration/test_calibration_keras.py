"""Issue 13: a healthy Keras ``fit`` with validation data gets no issues from `trainspect rules DIR`."""

from __future__ import annotations

import json

from keras_corpus import healthy_keras_fit
from test_calibration import JUDGED_ON_HEALTHY, cli, explain


def test_a_healthy_keras_fit_gets_no_issues(tmp_path):
    healthy_keras_fit(tmp_path / "run")
    proc = cli(tmp_path / "run")
    found = json.loads(proc.stdout)
    assert proc.returncode == 0, explain((proc.returncode, found))
    judged = {v["rule"] for v in found if v["status"] == "NoIssuesFound"}
    assert JUDGED_ON_HEALTHY <= judged, JUDGED_ON_HEALTHY - judged
