#!/usr/bin/env bash
# Sets up .venv and runs the whole test suite: ruff, mypy, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TRAINSPECT_TESTING=1 OMP_NUM_THREADS=1
.venv/bin/ruff check trainspect tests benchmarks examples
.venv/bin/mypy
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 tests --doctest-modules trainspect --ignore=trainspect/_bootstrap
