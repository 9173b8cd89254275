import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

# Before any test module imports chainer: under NumPy 2, Chainer 7.8.1 imports
# only after mnframe's compatibility shim (mnframe/_numpy_compat.py) has run.
import mnframe  # noqa: E402,F401
