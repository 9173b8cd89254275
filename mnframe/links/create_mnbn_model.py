"""ChainerMN's module path ``chainermn.links.create_mnbn_model``."""

from mnframe.links.mnbn_model import create_mnbn_model

__all__ = ["create_mnbn_model"]
