"""Multi-node stacked RNN: receive the initial states, run the RNN, send the final ones.

``create_multi_node_n_step_rnn(link, comm, rank_in, rank_out)`` wraps one of
Chainer's ``NStep*`` links (encoder/decoder split over ranks, e.g. seq2seq).
The wrapped link receives its initial hidden (and cell) states from
``rank_in`` (or starts from None), and sends its final states to ``rank_out``.
It returns the RNN's outputs plus a delegate variable (None when nothing is
sent); when it sends, backward must reach that delegate (return it, or
``pseudo_connect`` it to the loss).
"""

import chainer
from chainer.links.rnn.n_step_rnn import NStepRNNBase

from mnframe.functions import _transport
from mnframe.functions.connect import pseudo_connect
from mnframe.functions.point_to_point import recv, send


class MultiNodeNStepRNN(chainer.Chain):
    """An ``NStepRNNBase`` link whose states come from / go to other ranks."""

    mnframe_model_parallel = True  # create_multi_node_optimizer refuses gradient compression with it

    def __init__(self, link, communicator, rank_in=None, rank_out=None):
        if not isinstance(link, NStepRNNBase):
            raise ValueError(
                f"create_multi_node_n_step_rnn: link must be a chainer NStep RNN link "
                f"(NStepLSTM, NStepGRU, NStepRNNTanh, ...; a NStepRNNBase), got {type(link).__name__}"
            )
        for arg, rank in (("rank_in", rank_in), ("rank_out", rank_out)):
            if rank is not None:
                _transport.check_peer(communicator, rank, f"create_multi_node_n_step_rnn {arg}")
        super().__init__()
        with self.init_scope():
            self.actual_rnn = link
        self.communicator = communicator
        self.rank_in = rank_in
        self.rank_out = rank_out
        self.n_cells = link.n_cells

    def forward(self, *inputs):
        """``inputs`` are the RNN's inputs after its states (e.g. ``xs``).

        Returns the RNN's outputs (e.g. ``hy, cy, ys``) followed by the delegate.
        """
        cells = (None,) * self.n_cells
        if self.rank_in is not None:
            # Each state is chained to the previous receive, so backward sends
            # the gradients back in the reverse order the sender expects them.
            received, delegate = [], None
            for _ in range(self.n_cells):
                cell = recv(self.communicator, self.rank_in, delegate_variable=delegate)
                received.append(cell)
                delegate = cell
            cells = tuple(received)
        outputs = self.actual_rnn(*(cells + tuple(inputs)))
        delegate = None
        if self.rank_out is not None:
            for cell in outputs[: self.n_cells]:
                if delegate is not None:
                    (cell,) = pseudo_connect(delegate, cell)
                delegate = send(cell, self.communicator, self.rank_out)
        return tuple(outputs) + (delegate,)


def create_multi_node_n_step_rnn(actual_link, communicator, rank_in=None, rank_out=None):
    """Wrap a Chainer stacked RNN link for model parallelism (see module doc)."""
    return MultiNodeNStepRNN(actual_link, communicator, rank_in, rank_out)
