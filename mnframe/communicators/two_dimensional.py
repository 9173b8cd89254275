"""``two_dimensional``: shared-memory reduce-scatter in the node, allreduce across nodes, allgather.

Each node rank owns one slice of every dtype group. It sums that slice over the
segments of all node ranks (scaled by 1/size in the same pass), allreduces its
slice with the ranks that own the same slice on the other nodes, and writes the
result into every node segment. On one node the three steps fuse into a single
pass: read every segment's slice once, write it once (``host_kernels.mean_into``).
This is the default CPU communicator (registry.CPU_DEFAULT, see factory.default_name).

A rank's own slice is normally not packed: it reads its own gradients straight from
the parameters (only the parts its peers reduce are copied into its segment),
which saves 1/intra_size of the packing copy when gradients are fresh arrays.
On one node the mean of that slice is also accumulated in place in those
gradient arrays (they stay ``param.grad``; the parts of them outside the slice
are filled from the segment at the end), which saves the write-allocate reads
of a separate destination: fresh gradients, the case after every backward,
cost one pass over memory less. Two exceptions go through the segment instead:
gradients too small for a fused call of their own to pay (``DIRECT_MIN_BYTES``;
packed, they merge with their neighbours into one call), and gradients that
are still the arrays averaged in place by the previous call (nothing new was
computed since; once in the segment they stay there, and a repeated call is
one pass over each slice).

Nodes with different rank counts cannot pair slices across nodes; there the
hierarchical algorithm runs instead (decided identically on every rank).
"""

import weakref

import numpy as np

from mnframe.communicators import packing
from mnframe.communicators.hierarchical import HierarchicalReducer
from mnframe.communicators.host_kernels import mean_into, slice_bounds
from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.shm import ShmReducer

# A gradient smaller than this is packed even where it could be read in place:
# a separate fused call per small gradient costs more than copying it (measured
# with ResNet-50's 161 gradients on 2 ranks).
DIRECT_MIN_BYTES = 1 << 16


class TwoDimensionalReducer(ShmReducer):
    def mean(self, layout, params):
        if not self.topo.uniform:
            return super().mean(layout, params)
        buffer = self._buffer(layout)
        views = buffer.entry_views(layout)
        plans, in_place = self._pack(layout, params, views, buffer.kept)
        self._reduce(layout, buffer, plans)
        for _, flat, out, i, j in in_place:  # the parts the peers averaged, from this rank's segment
            flat[:i] = out[:i]
            flat[j:] = out[j:]
        packing.unpack(views, params, keep={index for index, *_ in in_place})
        buffer.params = params
        # weak: holding last step's arrays would keep them alive past the next backward
        buffer.kept = {index: weakref.ref(params[index][1].grad) for index, *_ in in_place}

    def reduce(self, layout, buffer):
        """Reduce an already packed buffer (the generic GradReducer flow)."""
        if not self.topo.uniform:
            return HierarchicalReducer.reduce(self, layout, buffer)
        plans = []
        for g in layout.groups:
            lo, hi = slice_bounds(g.size, self.topo.intra_size, self.topo.intra_rank)
            plans.append((lo, hi, [(lo, hi, None)]))
        self._reduce(layout, buffer, plans)

    def _pack(self, layout, params, views, kept):
        """Pack all but this rank's own slice.

        Returns (plans, in_place). ``plans``: per group (lo, hi, pieces of
        [lo, hi)); a piece is (start, stop, source) where ``source`` is the
        parameter's own gradient (flat) when it can be read directly, else None
        (read the segment). ``in_place``: on one node, (param index, flat
        gradient, its segment view, i, j) for every gradient whose part [i, j)
        is averaged in place; the rest of it is copied from the segment after
        the reduction. ``kept``: {param index: weak reference to the gradient
        averaged in place by the previous call} (see the module docstring).
        """
        topo = self.topo
        single = topo.inter_size == 1
        bounds = [slice_bounds(g.size, topo.intra_size, topo.intra_rank) for g in layout.groups]
        pieces_of = [[] for _ in layout.groups]
        in_place = []
        for e, dst, wire, gi in views:
            lo, hi = bounds[gi]
            pieces = pieces_of[gi]
            grad = params[e.index][1].grad
            a, b = max(lo, e.offset), min(hi, e.offset + e.size)
            if grad is dst:  # still our view from the last call: already in place
                direct = False
            else:
                direct = (
                    a < b
                    and isinstance(grad, np.ndarray)
                    and grad.dtype == wire
                    and grad.flags.c_contiguous
                    and grad.nbytes >= DIRECT_MIN_BYTES
                    and not _is_kept(kept, e.index, grad)
                )
                if direct:
                    flat, out = grad.reshape(-1), dst.reshape(-1)
                    i, j = a - e.offset, b - e.offset
                    out[:i] = flat[:i]
                    out[j:] = flat[j:]
                    pieces.append((a, b, flat[i:j]))
                    if single and grad.flags.writeable:
                        in_place.append((e.index, flat, out, i, j))
                    continue
                if grad is None:
                    dst.fill(0)
                else:
                    packing._copy(dst, grad)
            if a < b:
                if pieces and pieces[-1][2] is None and pieces[-1][1] == a:
                    pieces[-1] = (pieces[-1][0], b, None)  # merge neighbouring segment pieces
                else:
                    pieces.append((a, b, None))
        plans = [(lo, hi, pieces) for (lo, hi), pieces in zip(bounds, pieces_of)]
        return plans, in_place

    def _reduce(self, layout, buffer, plans):
        topo = self.topo
        scale = 1.0 / self.comm.size
        views = buffer.peer_group_arrays(layout)
        me = topo.intra_rank
        single = topo.inter_size == 1
        self.fence(buffer, "2d:packed")
        for gi, (lo, hi, pieces) in enumerate(plans):

            def node_mean(a, b, gi=gi, pieces=pieces, lo=lo):
                """The node's mean of slice elements [lo + a, lo + b) into this rank's segment."""
                for pa, pb, source in pieces:
                    x, y = max(pa, lo + a), min(pb, lo + b)
                    if x >= y:
                        continue
                    seg = [v[gi][x:y] for v in views]
                    mine = seg[me]
                    peers = seg[:me] + seg[me + 1 :]
                    src = None if source is None else source[x - pa : y - pa]
                    sources = seg[:me] + [mine if src is None else src] + seg[me + 1 :]  # rank order
                    # on one node a writable direct source is averaged in place (see _pack)
                    first = src if single and src is not None and src.flags.writeable else mine
                    mean_into(sources, [first] + (peers if single else []), scale)

            if single:
                node_mean(0, hi - lo)
                continue
            own = [v[gi][lo:hi] for v in views]

            def to_peers(a, b, own=own):
                for q, s in enumerate(own):
                    if q != me:
                        s[a:b] = own[me][a:b]

            # the node mean of chunk k+1 is computed while chunk k crosses the link (pipelined)
            self.inter_node_sum(own[me], layout.wire, prepare=node_mean, done=to_peers)
        self.fence(buffer, "2d:done")


def _is_kept(kept, index, grad):
    ref = kept.get(index)
    return ref is not None and ref() is grad


class TwoDimensionalCommunicator(MpiCommunicator):
    """Reduce-scatter in the node (shared memory), allreduce per slice across nodes, allgather."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {
        "numpy": TwoDimensionalReducer,
        "cupy": "mnframe.communicators.device_reducers:NcclTwoDimensionalReducer",
    }
