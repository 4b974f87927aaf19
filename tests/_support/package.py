"""The trainspect under test, for the child processes a test starts."""

from __future__ import annotations

from pathlib import Path

import trainspect

PACKAGE_ROOT = Path(trainspect.__file__).resolve().parents[1]
"""The directory holding the trainspect this test process imported: the repository, or the package copy that a
mutation run tests (``scripts/mutation.py`` puts it on ``PYTHONPATH``). A child process started with it on its
``PYTHONPATH`` runs the same trainspect, so a mutant is tested in the launchers' ranks too."""
