"""MultiNodeChainList: a model whose components run on different ranks.

Each component is a link plus where its inputs come from (``rank_in``: ranks
to receive from, or None for the model's own inputs) and where its outputs go
(``rank_out``: ranks to send to, or None when they are the model's outputs).
``__call__`` runs the components in the order they were added. Every
communication is chained to the previous one (``recv(delegate_variable=...)``
and ``pseudo_connect``), so backward visits them in exactly the reverse order
on every rank and matching ranks never wait on each other in a cycle.

A component may send to its own rank, and a later one receive from it
(ChainerMN's branching and twisting models: ``rank_in=comm.rank,
rank_out=comm.rank``, ``rank_in=[comm.rank, comm.rank]``). Such a hand-off
stays inside the process: a first-in first-out queue of variables, chained to
the other communications like a send/receive, with no MPI message, so it never
waits on anything whatever the size; backward flows through it like any
variable.

The wiring is validated when a link is added (ranks outside the communicator,
a receive from this rank with no earlier send to it, a second output
component) and is readable with :meth:`MultiNodeChainList.wiring` for static
rank-graph checks.
"""

import collections
import numbers
import typing

import chainer

from mnframe.functions.connect import pseudo_connect
from mnframe.functions.point_to_point import recv, send


class ComponentWiring(typing.NamedTuple):
    """One component's wiring: ``name`` is ``"<index>:<LinkClass>"``; ``rank_in``
    and ``rank_out`` are tuples of ranks, or None for model inputs/outputs."""

    name: str
    rank_in: typing.Optional[tuple]
    rank_out: typing.Optional[tuple]


def _is_rank(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _as_variables(y):
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def _connect_inputs(delegate, inputs):
    """The model inputs, with the array ones pseudo-connected to ``delegate`` so
    backward from this component continues to the previous communication.
    Returns (inputs, delegate still to connect or None)."""
    arrays = [i for i, v in enumerate(inputs) if isinstance(v, (chainer.Variable,) + chainer.get_array_types())]
    if not arrays:
        return inputs, delegate
    connected = pseudo_connect(delegate, *[inputs[i] for i in arrays])
    args = list(inputs)
    for i, v in zip(arrays, connected):
        args[i] = v
    return tuple(args), None


def _take_handoff(handoffs, delegate, name):
    """The oldest hand-off to this rank, chained after ``delegate`` (the previous communication)."""
    if not handoffs:
        raise ValueError(
            f"MultiNodeChainList component {name}: receives from its own rank but no earlier component sent to it"
        )
    x = handoffs.popleft()
    xs = _as_variables(x)
    if delegate is None or delegate is xs[0]:
        return x
    xs = pseudo_connect(delegate, *xs)
    return xs if isinstance(x, (tuple, list)) else xs[0]


class MultiNodeChainList(chainer.ChainList):
    """Combines the non-connected graph components of a model-parallel model.

    Calling it runs the components in the order added and returns the model
    outputs (those of the ``rank_out=None`` component, connected to the last
    communication), or, on a rank without outputs, the last send's delegate
    variable. Run backward from what it returns (the updater does): backward
    visits the components in reverse order. A component receiving from one
    rank gets that rank's variable (or tuple, as sent); from several ranks, one
    argument per rank. ``rank_in=None`` components get the model's inputs.
    ``rank_in``/``rank_out`` may name this rank: what a component sends to its
    own rank is handed, in order, to the components that receive from it.

    Args:
        comm: mnframe communicator (any, including one made by ``comm.split``).
    """

    mnframe_model_parallel = True  # create_multi_node_optimizer refuses gradient compression with it

    def __init__(self, comm):
        super().__init__()
        self._comm = comm
        self._wiring = []
        self._handoffs = 0  # hand-offs to this rank sent and not yet received, in add order

    # -- wiring -------------------------------------------------------------

    def add_link(self, link, rank_in=None, rank_out=None):
        """Register ``link`` receiving from ``rank_in`` and sending to ``rank_out``.

        Each is an int, a list/tuple of ints, or None (model inputs / model
        outputs); this process's own rank means a hand-off inside the process.
        Raises ValueError naming the component and the ranks when a rank is
        outside the communicator, when a component receives from its own rank
        more often than earlier components sent to it, or when a second
        component would produce the model outputs. The check is local (each
        rank builds its own model), so a wrong rank raises where it was
        written; the launcher's abort guard then stops the other ranks.
        """
        index = len(self._wiring)
        name = f"{index}:{type(link).__name__}"
        ins = self._normalize(rank_in, "rank_in", name)
        outs = self._normalize(rank_out, "rank_out", name)
        own = self._comm.rank
        taken = ins.count(own) if ins else 0
        if taken > self._handoffs:
            raise ValueError(
                f"MultiNodeChainList component {name}: rank_in={rank_in!r} receives from this process's "
                f"own rank {own} {taken} time(s), but earlier components sent to it only {self._handoffs} "
                "time(s). A hand-off to the own rank is a queue inside the process: add the component "
                "that sends to it (rank_out) before the one that receives it."
            )
        if outs is None:
            earlier = [w.name for w in self._wiring if w.rank_out is None]
            if earlier:
                raise ValueError(
                    f"MultiNodeChainList component {name}: rank_out=None (model outputs) but "
                    f"component {earlier[0]} already returns the model outputs; only one "
                    "component may. Send the other one's outputs to a rank instead."
                )
        super().add_link(link)
        self._wiring.append(ComponentWiring(name, ins, outs))
        self._handoffs += (outs.count(own) if outs else 0) - taken

    def _normalize(self, ranks, arg, name):
        if ranks is None:
            return None
        seq = [ranks] if _is_rank(ranks) else ranks
        try:
            seq = list(seq)
        except TypeError:
            seq = None
        if not seq or not all(_is_rank(r) for r in seq):
            raise ValueError(
                f"MultiNodeChainList component {name}: {arg}={ranks!r} must be an int, a "
                "non-empty list of ints, or None."
            )
        seq = [int(r) for r in seq]
        comm = self._comm
        outside = [r for r in seq if not 0 <= r < comm.size]
        if outside:
            raise ValueError(
                f"MultiNodeChainList component {name}: {arg}={ranks!r} names rank(s) {outside} "
                f"outside the communicator (ranks 0..{comm.size - 1}, size {comm.size}). "
                "Launch more processes or fix the rank."
            )
        return tuple(seq)

    def wiring(self):
        """The components' wiring, in call order: a list of ``ComponentWiring``
        ``(name, rank_in, rank_out)`` tuples (read-only copies)."""
        return list(self._wiring)

    # -- forward ------------------------------------------------------------

    def __call__(self, *inputs):
        comm = self._comm
        delegate = None  # the graph node the next communication must chain to
        output = None  # the model outputs (rank_out=None component)
        handoffs = collections.deque()  # what components sent to this rank, first in first out
        if self._handoffs:  # checked before any communication (ChainerMN raises after the forward)
            raise ValueError(
                f"MultiNodeChainList: {self._handoffs} hand-off(s) to this process's own rank {comm.rank} "
                "are sent but never received; add a component with rank_in naming this rank for each, "
                f"or remove the rank from rank_out (wiring: {[tuple(w) for w in self._wiring]})"
            )
        for link, wiring in zip(self._children, self._wiring):
            if wiring.rank_in is None:
                args = inputs
                if delegate is not None:
                    args, delegate = _connect_inputs(delegate, inputs)
                y = link(*args)
            else:
                received = []
                for rank in wiring.rank_in:
                    if rank == comm.rank:
                        x = _take_handoff(handoffs, delegate, wiring.name)
                    else:
                        x = recv(comm, rank, delegate_variable=delegate)
                    received.append(x)
                    delegate = _as_variables(x)[0]  # chain the next receive to this one
                y = link(*received)
            if wiring.rank_out is None:
                ys = _as_variables(y)
                if delegate is not None:
                    ys = pseudo_connect(delegate, *ys)
                output = ys if isinstance(y, (tuple, list)) else ys[0]
                delegate = ys[0]
            else:
                for rank in wiring.rank_out:
                    ys = _as_variables(y)
                    if delegate is not None:
                        ys = pseudo_connect(delegate, *ys)
                    # a tuple stays a tuple on the receiving side, even of one variable
                    value = ys if isinstance(y, (tuple, list)) else ys[0]
                    if rank == comm.rank:
                        handoffs.append(value)  # chained like a send: the next communication follows it
                        delegate = ys[0]
                    else:
                        delegate = send(value, comm, rank)
        return self._result(output, delegate)

    @staticmethod
    def _result(output, delegate):
        """The model outputs, connected to the last communication so backward
        from them reaches every component; the delegate when nothing is output."""
        if output is None:
            return delegate
        outputs = _as_variables(output)
        if delegate is outputs[0]:
            return output
        connected = pseudo_connect(delegate, *outputs)
        return connected if isinstance(output, (tuple, list)) else connected[0]
