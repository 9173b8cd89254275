"""Lets the peer scripts import Chainer 7.8.1 under NumPy 2 (``numpy.sctypes`` was removed).

Import it before ``chainer``. Under NumPy 1.x it does nothing (the peer is then
measured alone); under NumPy 2 it applies mnframe's compatibility table, the
only thing the peer takes from mnframe.
"""

import numpy

if not hasattr(numpy, "sctypes"):
    from mnframe._internal.numpy_compat import apply

    apply()
