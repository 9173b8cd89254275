#!/usr/bin/env bash
# Create a venv with everything mnframe needs (editable install of this
# checkout), on a fresh machine with CPython 3.10-3.13; exits non-zero unless
# the installed stack imports and computes.
#
#   PYTHON=python3.12 bash scripts/setup.sh        # the interpreter (default python3)
#   MNFRAME_NUMPY=1|2|auto                          # NumPy line (default auto: 1.26 where
#                                                   #   NumPy publishes wheels, i.e. Python <= 3.12; else 2.x)
#   MNFRAME_VENV=dir                                # default .venv (.venv-np2 with MNFRAME_NUMPY=2)
#   MNFRAME_SYSTEM_MPI=1                            # build mpi4py against the mpicc on PATH (or $MPICC), no
#                                                   #   mpich wheel; launch with that MPI's mpiexec (docs/cluster_mpi.md)
#
# Chainer 7.8.1 is only an sdist whose setup.py imports pkg_resources, so it
# is built without build isolation against setuptools<70, installed into the
# venv for that (Python >= 3.12 venvs start without setuptools). At run time
# Chainer needs neither setuptools nor numpy.distutils nor NumPy 1.x: mnframe's
# import hook (_mnframe_chainer_hook, installed as mnframe-chainer-hook.pth)
# supplies what it reads. MPI comes from the `mpich` wheel (mpiexec lands in
# $VENV/bin) unless MNFRAME_SYSTEM_MPI=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
die() { echo "scripts/setup.sh: $*" >&2; exit 1; }
command -v "$PY" >/dev/null || die "no Python '$PY' (set PYTHON=/path/to/python3.X)"
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$PYVER" in
  3.10|3.11|3.12|3.13) ;;
  *) die "mnframe supports CPython 3.10-3.13, '$PY' is $PYVER" ;;
esac
NUMPY_LINE=${MNFRAME_NUMPY:-auto}
if [ "$NUMPY_LINE" = auto ]; then
  if [ "$PYVER" = 3.13 ]; then NUMPY_LINE=2; else NUMPY_LINE=1; fi
fi
case "$NUMPY_LINE" in
  1|1.26) CONSTRAINTS=constraints.txt; VENV=${MNFRAME_VENV:-.venv} ;;
  2) CONSTRAINTS=constraints-numpy2.txt; VENV=${MNFRAME_VENV:-.venv-np2} ;;
  *) echo "scripts/setup.sh: MNFRAME_NUMPY must be 1, 2 or auto (got '${MNFRAME_NUMPY}')" >&2; exit 2 ;;
esac
[ "$PYVER" = 3.13 ] && [ "$NUMPY_LINE" != 2 ] && die "NumPy 1.26 has no wheels for Python 3.13: use MNFRAME_NUMPY=2"
if [ "${MNFRAME_NUMPY:-auto}" = auto ] && [ -z "${MNFRAME_VENV:-}" ]; then VENV=.venv; fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
VPY=$(cd "$VENV/bin" && pwd)/python
[ "$("$VPY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$PYVER" ] \
  || die "$VENV holds another Python than $PY ($PYVER): remove it or set MNFRAME_VENV"
pip() { "$VPY" -m pip --disable-pip-version-check -q "$@"; }
# Build tools for Chainer's sdist and mnframe's editable install; the NumPy line.
pip install -c "$CONSTRAINTS" "setuptools<70" wheel numpy
pip install -c "$CONSTRAINTS" --no-build-isolation "chainer==7.8.1"
if [ "${MNFRAME_SYSTEM_MPI:-0}" = "1" ]; then
  # Build mpi4py from source against the system MPI: $MPICC, else the mpicc on PATH. Never from
  # pip's cache: it keeps the wheels it built, and would hand back an mpi4py built against
  # another MPI (--no-binary and --force-reinstall do not bypass it; issue 42). Rebuilt only when
  # the installed one links another MPI than MPICC's (the check compiles a probe with MPICC).
  MPICC=${MPICC:-$(command -v mpicc || true)}
  [ -n "$MPICC" ] || die "MNFRAME_SYSTEM_MPI=1 builds mpi4py with your MPI's mpicc, and none is on PATH: install the MPI's development package (Debian/Ubuntu: libopenmpi-dev or libmpich-dev), or load it (module load openmpi), or set MPICC=/path/to/mpicc"
  if "$VPY" -m pip show -q mpich >/dev/null 2>&1; then pip uninstall -y mpich; fi  # the wheel's MPI: not with yours
  if ! PYTHONPATH=$PWD "$VPY" -m mnframe.runtime.mpi_library --check-build "$MPICC" >/dev/null 2>&1; then
    echo "scripts/setup.sh: building mpi4py against $MPICC (takes 2-3 minutes)"
    MPICC=$MPICC pip install -c "$CONSTRAINTS" --no-cache-dir --no-binary=mpi4py --force-reinstall --no-deps "mpi4py>=4"
  fi
  extras="recipes,test,tensorboard,tune,mlflow"
else
  pip install -c "$CONSTRAINTS" "mpi4py>=4"
  extras="mpich,recipes,test,tensorboard,tune,mlflow"
fi
pip install -c "$CONSTRAINTS" --no-build-isolation -e ".[$extras]"

# Prove the stack works: Chainer in a script that never imports mnframe (the
# import hook from the .pth), then mnframe with MPI.
if ! report=$("$VPY" scripts/check_stack.py 2>&1); then
  echo "$report" >&2
  die "the stack installed in $VENV does not work (see above)"
fi
if [ "${MNFRAME_SYSTEM_MPI:-0}" = "1" ]; then
  # mpi4py must link the MPI of MPICC, vendor and version: else one line saying what to run
  linked=$("$VPY" -m mnframe.runtime.mpi_library --check-build "$MPICC" 2>&1) || die "$linked"
  report="$report; $linked"
fi
echo "mnframe is set up in $VENV ($report)"
