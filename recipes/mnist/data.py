"""Datasets for the mnist recipe.

Two sources, chosen by ``source``:

* ``'digits'``: the 8x8 handwritten digits scikit-learn ships (1797 images), read
  from the copy bundled beside this module (``digits.csv.gz``, see
  ``DIGITS_LICENSE.txt``): no download, no scikit-learn. Pixels become float32
  in [0, 1], labels int32; the train/test split is a fixed permutation, so every rank and
  every run sees the same split.
* ``'mnist'``: real MNIST read from a local ``path``. Accepted layouts are
  Chainer's cache (a directory with ``train.npz``/``test.npz`` holding ``x``
  and ``y``) and Keras' single ``mnist.npz`` (``x_train``, ``y_train``,
  ``x_test``, ``y_test``); ``path`` may be that file or its directory.

Both return ``(train, test)`` as ``chainer.datasets.TupleDataset`` of flat
float32 vectors and int32 labels, like ``chainer.datasets.get_mnist()``.
"""

import importlib.util
import os

import numpy as np
from chainer.datasets import TupleDataset

from mnframe._internal.npz_read import load_arrays
from mnframe.recipes import blame

DIGITS_N_TEST = 297  # 1797 = 1500 train + 297 test
DIGITS_SPLIT_SEED = 0


def get_datasets(source="digits", path=None):
    """Return ``(train, test)`` for ``source`` ('digits' or 'mnist')."""
    loader = _SOURCES.get(source)
    if loader is None:
        raise ValueError(f"unknown mnist data source {source!r}: use one of {sorted(_SOURCES)}")
    return loader(path)


DIGITS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.csv.gz")


def _digits_file():
    """Path of the digits CSV: the bundled copy, else scikit-learn's (found without importing sklearn)."""
    if os.path.isfile(DIGITS_FILE):
        return DIGITS_FILE
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
    return path if os.path.isfile(path) else None


def _digits(_path=None):
    found = _digits_file()
    if found is not None:  # the very rows load_digits() returns: 64 pixels, then the label
        raw = np.loadtxt(found, delimiter=",")
        data, target = raw[:, :-1], raw[:, -1].astype(int)
    else:
        from sklearn.datasets import load_digits  # raises a clear ImportError without scikit-learn

        bunch = load_digits()
        data, target = bunch.data, bunch.target
    x = (data / 16.0).astype(np.float32)
    y = target.astype(np.int32)
    order = np.random.RandomState(DIGITS_SPLIT_SEED).permutation(len(x))
    test_idx, train_idx = order[:DIGITS_N_TEST], order[DIGITS_N_TEST:]
    return TupleDataset(x[train_idx], y[train_idx]), TupleDataset(x[test_idx], y[test_idx])


def _mnist(path=None):
    if path is None:
        raise blame(
            "path",
            ValueError(
                "the 'mnist' source needs a path: set dataset path to a directory holding train.npz and "
                "test.npz (Chainer's cache, e.g. ~/.chainer/dataset/pfnet/chainer/mnist) or to Keras' mnist.npz"
            ),
        )
    path = os.path.expanduser(str(path))
    keras_file = path if path.endswith(".npz") else os.path.join(path, "mnist.npz")
    chainer_files = (os.path.join(path, "train.npz"), os.path.join(path, "test.npz"))
    try:
        if all(os.path.isfile(f) for f in chainer_files):
            splits = []
            for f in chainer_files:
                z = load_arrays(f, ("x", "y"), what="Chainer MNIST cache file")
                splits.append((z["x"], z["y"]))
        elif os.path.isfile(keras_file):
            z = load_arrays(keras_file, ("x_train", "y_train", "x_test", "y_test"), what="Keras mnist.npz")
            splits = [(z["x_train"], z["y_train"]), (z["x_test"], z["y_test"])]
        else:
            splits = None
    except OSError as exc:  # unreadable (a file that is not an .npz is NotAnNpzFile, a ConfigError naming it)
        raise blame("path", exc) from None
    if splits is None:
        raise blame(
            "path",
            FileNotFoundError(
                f"no MNIST data at {path!r}: expected either {chainer_files[0]} and {chainer_files[1]} "
                f"(arrays 'x', 'y', Chainer's cache layout) or {keras_file} (Keras' layout with "
                f"'x_train', 'y_train', 'x_test', 'y_test'); or use source='digits' which needs no files"
            ),
        )
    return tuple(_as_tuple_dataset(x, y) for x, y in splits)


def _as_tuple_dataset(x, y):
    x = np.asarray(x).reshape(len(x), -1).astype(np.float32)
    if x.max(initial=0) > 1.0:  # uint8 pixels -> [0, 1]
        x /= 255.0
    return TupleDataset(x, np.asarray(y).astype(np.int32))


_SOURCES = {"digits": _digits, "mnist": _mnist}
