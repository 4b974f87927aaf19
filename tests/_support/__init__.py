"""Helpers shared by test modules of several directories (fixtures stay in the conftest.py files).

Test modules import them as ``from _support.<module> import …``: ``tests/`` is on ``sys.path`` because pytest
(rootdir-based ``prepend`` import mode, the default) inserts the directory of ``tests/conftest.py``, which is
loaded before any test module under ``tests/``, whether the whole suite or a single file is collected. Importing
from ``conftest`` instead depends on which of the suite's conftest modules was imported last.

- :mod:`_support.fakes`: a Trial holding one loss, and an MLflow sink that records what it is sent (no server).
- :mod:`_support.jobs`: a job of several ranks written in this process, as each rank's hook writes it.
- :mod:`_support.package`: where the trainspect under test lives, for the child processes a test starts.
- :mod:`_support.polling`: ``wait_for``, polling a condition up to a deadline.
- :mod:`_support.s3`: an S3-compatible server (moto) in a subprocess, and an s3fs client of it.
- :mod:`_support.tensorboard`: the TensorBoard plugin under a werkzeug client, or in a real TensorBoard process.
"""
