"""ChainerMN's module path ``chainermn.functions.pseudo_connect``."""

from mnframe.functions.connect import PseudoConnect, pseudo_connect

__all__ = ["PseudoConnect", "pseudo_connect"]
