#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with every wheel scripts/gpu_check.sh installs on a GPU
# machine that reaches no package registry (Python 3.12, x86_64, CuPy/NumPy/pytest
# already there). Run it here, on a machine with the registry:
#
#     bash scripts/fetch_gpu_wheels.sh            # -> .whl/*.whl, about 20 MiB
#
# What it brings and why:
#   mnframe      this checkout, as a wheel (pure Python: mnframe + recipes)
#   chainer      7.8.1 is only an sdist: built here into a pure-Python wheel
#                (pip wheel --no-deps --no-build-isolation, against setuptools<70)
#   antlr4-python3-runtime  4.9.3 (hydra's parser) is only an sdist: built here too
#   hydra-core omegaconf pydantic pydantic-core annotated-types typing-inspection
#   setuptools<70 (Chainer imports pkg_resources)  mpi4py  mpich (the MPI library
#   and mpiexec; installed there with --prefix, which keeps lib/libmpi.so)
# Binary wheels are the cp312 manylinux x86_64 ones, whatever this machine runs.
# Set MNFRAME_WHEEL_DIR to fill another folder, MNFRAME_WHEEL_PYTHON (default 3.12) for
# another target Python.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${MNFRAME_WHEEL_DIR:-.whl}
PY=${PYTHON:-python3}
BUILD_VENV=${MNFRAME_WHEEL_BUILD_VENV:-/tmp/mnframe-wheel-build}

# versions tested together here (scripts/setup.sh resolves the same ones today)
PURE=(hydra-core==1.3.8 omegaconf==2.3.1 pydantic==2.14.4 annotated-types==0.8.0
      typing-inspection==0.4.5 "setuptools<70")
BINARY=(pydantic-core==2.50.5 mpi4py==4.1.2 mpich==5.0.2)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)

mkdir -p "$DEST"
rm -f "$DEST"/*.whl
pip_() { "$@" --disable-pip-version-check -q; }

# a build venv with setuptools<70 (pkg_resources) for the two sdists and mnframe
if [ ! -x "$BUILD_VENV/bin/python" ]; then
  "$PY" -m venv "$BUILD_VENV"
fi
pip_ "$BUILD_VENV/bin/python" -m pip install "setuptools<70" wheel "numpy<2"
pip_ "$BUILD_VENV/bin/python" -m pip wheel --no-deps --no-build-isolation -w "$DEST" \
  chainer==7.8.1 antlr4-python3-runtime==4.9.3
pip_ "$BUILD_VENV/bin/python" -m pip wheel --no-deps --no-build-isolation -w "$DEST" .

plat=()
for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
pip_ "$PY" -m pip download --no-deps --only-binary=:all: --python-version "${MNFRAME_WHEEL_PYTHON:-3.12}" \
  --implementation cp \
  "${plat[@]}" -d "$DEST" "${PURE[@]}" "${BINARY[@]}"

count=$(ls "$DEST"/*.whl | wc -l)
size=$(du -sm "$DEST" | cut -f1)
echo "fetch_gpu_wheels: $count wheels, ${size} MiB in $DEST:"
ls -1 "$DEST"
if [ "$size" -ge 64 ]; then
  echo "fetch_gpu_wheels: $DEST is ${size} MiB, over the 64 MiB a GPU machine call can carry" >&2
  exit 1
fi
