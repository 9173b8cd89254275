"""GPU tests: skipped, each with the reason, on machines without a usable CUDA device.

They run on a GPU machine with ``python -m pytest tests/gpu`` (see README,
"GPU"). Tests that need one GPU per rank (NCCL refuses two ranks on one device)
skip themselves when there are fewer GPUs.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

import mnframe  # noqa: E402,F401  (before chainer: NumPy 2 shim)
from mnframe.communicators import registry  # noqa: E402

_PROBLEM = registry.cuda_problem()


def pytest_collection_modifyitems(items):
    if not _PROBLEM:
        return
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=f"no GPU: {_PROBLEM}")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture
def cupy():
    import cupy

    cupy.cuda.Device(0).use()
    return cupy
