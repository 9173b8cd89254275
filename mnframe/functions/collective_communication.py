"""ChainerMN's module path ``chainermn.functions.collective_communication``: mnframe's
differentiable collectives and their function nodes."""

from mnframe.functions.collective import (
    AllGather,
    AllToAll,
    Bcast,
    Gather,
    Scatter,
    allgather,
    alltoall,
    bcast,
    gather,
    scatter,
)

__all__ = ["AllGather", "AllToAll", "Bcast", "Gather", "Scatter", "allgather", "alltoall", "bcast", "gather", "scatter"]
