#!/usr/bin/env bash
# Sets up .venv and runs the whole test suite: ruff, mypy, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Browser tests drive Debian's Chromium through Playwright (never a browser download).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null;
  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi
fi
export TRAINSPECT_TESTING=1 OMP_NUM_THREADS=1
.venv/bin/ruff check trainspect tests benchmarks examples scripts
.venv/bin/ruff format --check trainspect tests benchmarks examples scripts
.venv/bin/mypy
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 tests --doctest-modules trainspect --ignore=trainspect/_bootstrap
