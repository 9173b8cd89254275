"""Links: MultiNodeChainList, multi-node batch normalization, multi-node n-step RNN."""

from mnframe._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "MultiNodeBatchNormalization": "mnframe.links.batch_normalization:MultiNodeBatchNormalization",
        "create_mnbn_model": "mnframe.links.mnbn_model:create_mnbn_model",
        "MultiNodeChainList": "mnframe.links.chain_list:MultiNodeChainList",
        "create_multi_node_n_step_rnn": "mnframe.links.n_step_rnn:create_multi_node_n_step_rnn",
    },
)

# ChainerMN has both a module and a function named ``links.create_mnbn_model``: load the module
# now and bind the function over it, so importing the module path later keeps the function.
from mnframe.links.create_mnbn_model import create_mnbn_model as create_mnbn_model  # noqa: E402
