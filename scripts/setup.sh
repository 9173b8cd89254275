#!/usr/bin/env bash
# Create .venv with everything mnframe needs, on a fresh machine with Python >= 3.10.
#
# Chainer 7.8.1 is only published as an sdist whose setup.py imports
# pkg_resources, so it is built without build isolation against the venv's own
# setuptools<70; constraints.txt keeps NumPy < 2 for Chainer. MPI comes from the
# `mpich` wheel (mpiexec lands in .venv/bin). To use a cluster's MPI instead, set
# MNFRAME_SYSTEM_MPI=1: mpi4py is then built against the `mpicc` on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${MNFRAME_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install -c constraints.txt "setuptools<70" wheel "numpy<2"
if ! "$VENV/bin/python" -c "import chainer" 2>/dev/null; then
  pip install -c constraints.txt --no-build-isolation "chainer==7.8.1"
fi
if [ "${MNFRAME_SYSTEM_MPI:-0}" = "1" ]; then
  # Build mpi4py from source against the system MPI (mpicc on PATH).
  pip install -c constraints.txt --no-binary=mpi4py "mpi4py>=4"
  extras="recipes,test"
else
  pip install -c constraints.txt "mpi4py>=4"
  extras="mpich,recipes,test"
fi
pip install -c constraints.txt --no-build-isolation -e ".[$extras]"
echo "mnframe is set up in $VENV ($("$VENV/bin/python" -c 'import chainer, numpy, mpi4py; print("chainer", chainer.__version__, "numpy", numpy.__version__, "mpi4py", mpi4py.__version__)'))"
