#!/usr/bin/env bash
# Sets up .venv and runs the demo (offline, about a minute on 2 cores): a learning rate far too high, caught and
# stopped by the rules; the fixed run, clean; `trainspect compare` of the two; then how to open the reports,
# TensorBoard and MLflow. Runs go to runs/demo (or --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py "$@"
