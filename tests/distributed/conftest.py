"""Distributed launchers (issue 27): real mp.spawn, Lightning, accelerate and Ray Train jobs on CPU/gloo."""

from __future__ import annotations

collect_ignore = ["scripts"]  # training scripts run as subprocesses, not test modules (--doctest-modules imports them)
