"""ChainerMN's module path ``chainermn.datasets.empty_dataset``: mnframe's ``create_empty_dataset``."""

from mnframe.datasets.empty import create_empty_dataset

__all__ = ["create_empty_dataset"]
