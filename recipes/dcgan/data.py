"""Datasets for the dcgan recipe: synthetic images or a local image directory.

Images are float32 (3, size, size) in [-1, 1], the generator's output range;
the dataset yields images only (no labels). A GAN has no test set: the second
element returned is a small slice of the training images, there only for an
optional evaluator or pipelines that always expect ``(train, test)``. ``path`` (a directory of
.png/.jpg files, read with Pillow, converted to RGB and resized) wins over
``synthetic``; synthetic images are deterministic smooth random patterns.
"""

import glob
import os

import chainer
import numpy as np

IMAGE_PATTERNS = ("*.png", "*.jpg", "*.jpeg", "*.PNG", "*.JPG", "*.JPEG")
SYNTHETIC_SEED = 0


class ImageDirectoryDataset(chainer.dataset.DatasetMixin):
    """The images of a directory, each resized to ``size`` x ``size`` and scaled to [-1, 1]."""

    def __init__(self, paths, size):
        self.paths, self.size = list(paths), size

    def __len__(self):
        return len(self.paths)

    def get_example(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as img:
            img = img.convert("RGB").resize((self.size, self.size))
            x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1)
        return x / 127.5 - 1.0


def get_datasets(path=None, synthetic=True, n_synthetic=256, size=32):
    """Return ``(train, test)``; ``test`` is the first eighth of ``train`` (see above)."""
    if path is not None:
        from mnframe.dependencies import require

        require(["PIL"])  # image folders need Pillow (the `recipes` extra): say so in one line, exit 3
        path = os.path.expanduser(str(path))
        files = sorted(f for pattern in IMAGE_PATTERNS for f in glob.glob(os.path.join(path, pattern)))
        if not files:
            raise FileNotFoundError(
                f"no images ({', '.join(IMAGE_PATTERNS)}) in {path!r}: point dataset "
                f"path at a directory of images, or leave it unset for synthetic data"
            )
        return ImageDirectoryDataset(files, size), ImageDirectoryDataset(files[: _n_test(len(files))], size)
    if not synthetic:
        raise ValueError("the dcgan recipe needs data: set dataset path to an image directory or synthetic=true")
    rng = np.random.RandomState(SYNTHETIC_SEED)
    # Low-frequency patterns (upsampled 4x4 noise) look more like images than white noise.
    coarse = rng.uniform(-1, 1, size=(n_synthetic, 3, 4, 4)).astype(np.float32)
    reps = -(-size // 4)
    images = np.repeat(np.repeat(coarse, reps, axis=2), reps, axis=3)[:, :, :size, :size]
    images = np.ascontiguousarray(images)
    return images, images[: _n_test(len(images))]


def _n_test(n):
    return max(1, n // 8)
