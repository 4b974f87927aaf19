#!/usr/bin/env bash
# Creates .venv (if missing) and installs trainspect with every extra needed by the demo and the tests.
# Torch (and TensorFlow CPU) are pinned first (torch==2.13.0, a CPU build on these machines) so nothing pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q "tensorflow-cpu==2.21.0" "keras==3.15.1"
.venv/bin/python -m pip install -q -e ".[all,test]"
