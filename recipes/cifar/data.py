"""Datasets for the cifar recipe: CIFAR-10 from a local path, or synthetic images.

``path`` may be the directory of the Python-pickle batches
(``cifar-10-batches-py`` with ``data_batch_1..5`` and ``test_batch``; read by a
restricted unpickler that builds NumPy arrays, dicts, lists and strings only and
refuses any other callable, so a forged batch cannot run code) or
Chainer's cached ``cifar-10.npz`` (``train_x``, ``train_y``, ``test_x``,
``test_y``), or the directory holding it. When ``path`` is given it is used;
otherwise ``synthetic=True`` generates ``n_synthetic`` deterministic random
images (and a quarter as many test images) so that no download is needed.
Images are float32 (3, 32, 32) in [0, 1], labels int32.
"""

import os
import pickle

import numpy as np
from chainer.datasets import TupleDataset

from mnframe._internal.npz_read import load_arrays

N_CLASS = 10
SYNTHETIC_SEED = 0


def get_datasets(path=None, synthetic=True, n_synthetic=512):
    """Return ``(train, test)``."""
    if path is not None:
        return _local(os.path.expanduser(str(path)))
    if not synthetic:
        raise ValueError(
            "the cifar recipe needs data: set dataset path to a CIFAR-10 directory "
            "(cifar-10-batches-py or one holding cifar-10.npz), or synthetic=true"
        )
    rng = np.random.RandomState(SYNTHETIC_SEED)
    n_test = max(1, n_synthetic // 4)
    x = rng.uniform(0, 1, size=(n_synthetic + n_test, 3, 32, 32)).astype(np.float32)
    y = rng.randint(0, N_CLASS, size=n_synthetic + n_test).astype(np.int32)
    return TupleDataset(x[:n_synthetic], y[:n_synthetic]), TupleDataset(x[n_synthetic:], y[n_synthetic:])


def _local(path):
    npz = path if path.endswith(".npz") else os.path.join(path, "cifar-10.npz")
    batches = [os.path.join(path, f"data_batch_{i}") for i in range(1, 6)]
    test_batch = os.path.join(path, "test_batch")
    if os.path.isfile(npz):
        z = load_arrays(npz, ("train_x", "train_y", "test_x", "test_y"), what="Chainer cifar-10.npz")
        return _dataset(z["train_x"], z["train_y"]), _dataset(z["test_x"], z["test_y"])
    if all(os.path.isfile(f) for f in batches + [test_batch]):
        train = [_read_batch(f) for f in batches]
        test_x, test_y = _read_batch(test_batch)
        return (
            _dataset(np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])),
            _dataset(test_x, test_y),
        )
    raise FileNotFoundError(
        f"no CIFAR-10 data at {path!r}: expected {npz} or the pickle batches "
        f"data_batch_1..data_batch_5 and test_batch in that directory "
        f"(cifar-10-batches-py); or leave path unset to use synthetic images"
    )


# the only callables a CIFAR batch pickle names (NumPy 1 and 2 spellings)
_ARRAY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),  # bytes in a protocol-2 pickle written by Python 3
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles data only: NumPy arrays and Python containers, no other global."""

    def find_class(self, module, name):
        if (module, name) in _ARRAY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a CIFAR-10 batch (it could run code)")


def _read_batch(filename):
    with open(filename, "rb") as f:
        try:
            d = _ArrayUnpickler(f, encoding="bytes").load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"{filename} is not a CIFAR-10 batch: {exc}") from None
    if not isinstance(d, dict) or b"data" not in d or b"labels" not in d:
        raise ValueError(f"{filename} is not a CIFAR-10 batch (no data and labels)")
    return np.asarray(d[b"data"]), np.asarray(d[b"labels"])


def _dataset(x, y):
    x = np.asarray(x).reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
    return TupleDataset(x, np.asarray(y).reshape(-1).astype(np.int32))
