#!/usr/bin/env bash
# Builds bench-env/smdebug: smdebug 1.0.34 (the peer the benchmarks compare with) in a venv of its own, beside .venv.
# smdebug 1.0.34 imports requests, psutil and pandas without declaring them, and calls NumPy's removed tostring():
# NumPy < 2 (and a pandas built for it). Torch is pinned first, as in setup.sh, so nothing pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x bench-env/smdebug/bin/python ]; then
  "$PY" -m venv bench-env/smdebug
fi
bench-env/smdebug/bin/python -m pip install -q --upgrade pip
bench-env/smdebug/bin/python -m pip install -q "torch==2.13.0"
bench-env/smdebug/bin/python -m pip install -q "smdebug==1.0.34" requests psutil "numpy<2" "pandas<2.3"
bench-env/smdebug/bin/python -c "import smdebug.pytorch, smdebug.trials; print('bench-env/smdebug: smdebug', __import__('smdebug').__version__)"
