"""ChainerMN's control-message codec of its multi-node iterator (``_build_ctrl_msg``/``_parse_ctrl_msg``).

Kept for code that imports them from ``chainermn.iterators.multi_node_iterator``
(ChainerMN's tests do; ``mnframe._internal.chainermn_paths`` serves them there).
mnframe's multi-node iterator does not use them: it broadcasts one pickled
``(kind, batch, state)`` message per batch (see multi_node.py).
"""

import numpy as np

_CTRL_FIELDS = ("stop", "is_valid_data_type", "is_paired_dataset", "is_new_epoch", "current_position")


def build_ctrl_msg(stop, is_valid_data_type, is_paired_dataset, is_new_epoch, current_position):
    """The five control fields as one int64 array (the flags as 0/1)."""
    return np.array(
        [int(stop), int(is_valid_data_type), int(is_paired_dataset), int(is_new_epoch), int(current_position)],
        dtype=np.int64,
    )


def parse_ctrl_msg(msg):
    """The inverse of ``build_ctrl_msg``: ``(stop, is_valid_data_type, is_paired_dataset, is_new_epoch,
    current_position)``."""
    values = [int(v) for v in np.asarray(msg).reshape(-1)[: len(_CTRL_FIELDS)]]
    return tuple(bool(v) for v in values[:4]) + (values[4],)
