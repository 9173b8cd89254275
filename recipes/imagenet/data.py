"""Datasets for the imagenet recipe.

As in ChainerMN's ImageNet example, the training and validation sets are
``LabeledImageDataset`` file lists (each line ``path label``, paths relative to
``root``) wrapped in a preprocessing step that subtracts the mean image, crops
``insize`` x ``insize`` (random position and random horizontal flip for
training, the center for validation) and scales to [0, 1).

``synthetic=True`` replaces the files with deterministic random images (the
same on every rank and every run, generated per index so nothing large is held
in memory): for benchmarks and CI, where no ImageNet is at hand.
"""

import os
import random

import chainer
import numpy as np
from chainer.datasets import LabeledImageDataset

from mnframe.recipes import blame

# Per-channel ImageNet mean (RGB, 0..255), used when no mean file is given.
IMAGENET_CHANNEL_MEAN = np.array([123.68, 116.78, 103.94], dtype=np.float32)
SYNTHETIC_SEED = {"train": 0, "val": 1}


class CroppedImageDataset(chainer.dataset.DatasetMixin):
    """Mean subtraction, a crop of ``crop_size`` and scaling by 1/255.

    ``random=True`` picks the crop position at random and flips horizontally
    with probability 1/2 (training); otherwise it takes the center crop.
    ``mean`` is a (3, H, W) mean image (cropped with the same window) or a
    (3,) per-channel mean.
    """

    def __init__(self, base, mean, crop_size, random=True):
        self.base = base
        self.mean = np.asarray(mean, dtype=np.float32)
        self.crop_size = crop_size
        self.random = random

    def __len__(self):
        return len(self.base)

    def get_example(self, i):
        image, label = self.base[i]
        _, h, w = image.shape
        size = self.crop_size
        if h < size or w < size:
            raise ValueError(
                f"image {i} is {h}x{w}, smaller than the crop size {size}: "
                f"resize the images (e.g. to 256x256) or lower insize"
            )
        if self.random:
            top, left = random.randint(0, h - size), random.randint(0, w - size)
        else:
            top, left = (h - size) // 2, (w - size) // 2
        window = (slice(None), slice(top, top + size), slice(left, left + size))
        image = image[window].astype(np.float32)  # a copy: the base dataset is never modified
        image -= self.mean[window] if self.mean.ndim == 3 else self.mean[:, None, None]
        if self.random and random.randint(0, 1):
            image = image[:, :, ::-1]
        image *= 1.0 / 255.0
        return image, label


class SyntheticImageDataset(chainer.dataset.DatasetMixin):
    """``n`` random uint8-valued RGB images of ``size`` x ``size`` with random labels.

    Example ``i`` is a pure function of ``(seed, i)``: every rank and every
    run sees the same data, and only the labels are held in memory.
    """

    def __init__(self, n, size, n_class, seed=0):
        self.n, self.size, self.seed = n, size, seed
        self.labels = np.random.RandomState(seed).randint(0, n_class, size=n).astype(np.int32)

    def __len__(self):
        return self.n

    def get_example(self, i):
        rng = np.random.RandomState((self.seed * 1000003 + i) % (2**32))
        image = rng.randint(0, 256, size=(3, self.size, self.size)).astype(np.float32)
        return image, self.labels[i]


def get_datasets(train=None, val=None, root=".", mean=None, synthetic=False, n_synthetic=256, insize=224, n_class=1000):
    """Return ``(train, val)`` datasets of ``(float32 image (3, insize, insize), int32 label)``.

    ``train``/``val``: file lists for ``LabeledImageDataset``; ``root``: the
    directory their paths are relative to; ``mean``: a ``.npy`` mean image
    (default: the per-channel ImageNet mean).
    """
    mean_array = _load_mean(mean)
    if synthetic:
        bases = (
            SyntheticImageDataset(n_synthetic, insize, n_class, SYNTHETIC_SEED["train"]),
            SyntheticImageDataset(max(1, n_synthetic // 4), insize, n_class, SYNTHETIC_SEED["val"]),
        )
    else:
        lists = {"train": train, "val": val}
        missing = [
            name for name, path in lists.items() if path is None or not os.path.isfile(os.path.expanduser(str(path)))
        ]
        if missing:
            given = ", ".join(f"{name}={lists[name]!r}" for name in missing)
            raise blame(
                tuple(missing),
                FileNotFoundError(
                    f"imagenet file lists not found ({given}): give train and val as files "
                    f"of 'relative/path.jpg label' lines (paths relative to root={root!r}), "
                    f"or set synthetic=true to benchmark on generated images"
                ),
            )
        root = os.path.expanduser(str(root))
        bases = (
            LabeledImageDataset(os.path.expanduser(str(train)), root),
            LabeledImageDataset(os.path.expanduser(str(val)), root),
        )
    return (
        CroppedImageDataset(bases[0], mean_array, insize, random=True),
        CroppedImageDataset(bases[1], mean_array, insize, random=False),
    )


def _load_mean(mean):
    if mean is None:
        return IMAGENET_CHANNEL_MEAN
    path = os.path.expanduser(str(mean))
    if not os.path.isfile(path):
        raise blame(
            "mean",
            FileNotFoundError(
                f"mean file {path!r} not found: compute it with Chainer's compute_mean.py (a (3, H, W) "
                f".npy), or leave mean unset to use the per-channel ImageNet mean"
            ),
        )
    return np.load(path, allow_pickle=False).astype(np.float32)
