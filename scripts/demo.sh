#!/usr/bin/env bash
# Sets up .venv and runs the demo: instrumented training -> run directory -> how to open TensorBoard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py "$@"
