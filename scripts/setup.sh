#!/usr/bin/env bash
# Create .venv with everything mnframe needs, on a fresh machine with Python >= 3.10.
#
# Chainer 7.8.1 is only published as an sdist whose setup.py imports
# pkg_resources, so it is built without build isolation against the venv's own
# setuptools<70; constraints.txt keeps NumPy < 2 for Chainer. MPI comes from the
# `mpich` wheel (mpiexec lands in .venv/bin). To use a cluster's MPI instead, set
# MNFRAME_SYSTEM_MPI=1: mpi4py is then built against the `mpicc` on PATH.
#
# MNFRAME_NUMPY=2 sets up the NumPy 2 leg instead: constraints-numpy2.txt
# (numpy>=2, setuptools<70), in MNFRAME_VENV (default .venv-np2). Chainer's
# metadata only asks numpy>=1.9, so it installs beside NumPy 2 and imports
# there through mnframe/_numpy_compat.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${MNFRAME_NUMPY:-1}" in
  1) CONSTRAINTS=constraints.txt; NUMPY_REQ="numpy<2"; VENV=${MNFRAME_VENV:-.venv} ;;
  2) CONSTRAINTS=constraints-numpy2.txt; NUMPY_REQ="numpy>=2"; VENV=${MNFRAME_VENV:-.venv-np2} ;;
  *) echo "scripts/setup.sh: MNFRAME_NUMPY must be 1 or 2 (got '${MNFRAME_NUMPY}')" >&2; exit 2 ;;
esac
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install -c "$CONSTRAINTS" "setuptools<70" wheel "$NUMPY_REQ"
# mnframe first (from this checkout): under NumPy 2 it lets Chainer import.
if ! "$VENV/bin/python" -c "import mnframe, chainer" 2>/dev/null; then
  pip install -c "$CONSTRAINTS" --no-build-isolation "chainer==7.8.1"
fi
if [ "${MNFRAME_SYSTEM_MPI:-0}" = "1" ]; then
  # Build mpi4py from source against the system MPI (mpicc on PATH).
  pip install -c "$CONSTRAINTS" --no-binary=mpi4py "mpi4py>=4"
  extras="recipes,test,tensorboard"
else
  pip install -c "$CONSTRAINTS" "mpi4py>=4"
  extras="mpich,recipes,test,tensorboard"
fi
pip install -c "$CONSTRAINTS" --no-build-isolation -e ".[$extras]"
echo "mnframe is set up in $VENV ($("$VENV/bin/python" -c 'import mnframe, chainer, numpy, mpi4py; print("chainer", chainer.__version__, "numpy", numpy.__version__, "mpi4py", mpi4py.__version__)'))"
