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
