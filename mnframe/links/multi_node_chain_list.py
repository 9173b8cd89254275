"""ChainerMN's module path ``chainermn.links.multi_node_chain_list``."""

from mnframe.links.chain_list import MultiNodeChainList

__all__ = ["MultiNodeChainList"]
