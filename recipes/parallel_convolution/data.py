"""Datasets for the parallel_convolution recipe: CIFAR-10 (local or synthetic).

The same data as the cifar recipe (``mnframe.recipes.cifar.data``); in this recipe
rank 0's batches are shared with every rank by the multi-node iterator.
"""

from mnframe.recipes.cifar.data import get_datasets as _cifar_datasets


def get_datasets(path=None, synthetic=True, n_synthetic=512):
    """Return ``(train, test)``: see ``mnframe.recipes.cifar.data.get_datasets``."""
    return _cifar_datasets(path=path, synthetic=synthetic, n_synthetic=n_synthetic)
