#!/usr/bin/env bash
# Compile every CuPy kernel mnframe generates with NVRTC for the H100 (sm_90), on a machine
# without a GPU. One command (needs the package registry the first time, ~250 MB download):
#
#     bash scripts/check_kernels.sh            # or: bash scripts/check_kernels.sh --arch sm_80
#
# It makes a separate venv (MNFRAME_KERNEL_VENV, default .venv-kernels; git-ignored) with
# cupy-cuda13x (CuPy 14 for CUDA 13) and nvidia-cuda-nvrtc (NVRTC for CUDA 13: the CUDA 13
# wheels dropped the -cu13 suffix), installs this checkout into it without dependencies
# (device_packing needs no Chainer), then runs scripts/check_kernels.py: CuPy generates each
# kernel's source as a launch would and NVRTC compiles it to a cubin. Exit 1 if any fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${MNFRAME_KERNEL_VENV:-.venv-kernels}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
if ! "$VENV/bin/python" -c "import cupy, cupy.cuda.nvrtc" 2>/dev/null; then
  pip install "numpy>=2" "cupy-cuda13x>=14" nvidia-cuda-nvrtc
fi
pip install --no-deps --no-build-isolation -e . 2>/dev/null || pip install --no-deps -e .
exec "$VENV/bin/python" scripts/check_kernels.py "$@"
