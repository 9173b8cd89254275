"""Differentiable communication functions for model parallelism."""

from mnframe._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "allgather": "mnframe.functions.collective:allgather",
        "alltoall": "mnframe.functions.collective:alltoall",
        "bcast": "mnframe.functions.collective:bcast",
        "gather": "mnframe.functions.collective:gather",
        "scatter": "mnframe.functions.collective:scatter",
        "send": "mnframe.functions.point_to_point:send",
        "recv": "mnframe.functions.point_to_point:recv",
        "pseudo_connect": "mnframe.functions.connect:pseudo_connect",
    },
)

# ChainerMN has both a module and a function named ``functions.pseudo_connect``. Loading the
# module now and binding the function over it (as ChainerMN's __init__ does) keeps the package
# attribute the function, also when a script imports the module path later.
from mnframe.functions.pseudo_connect import pseudo_connect as pseudo_connect  # noqa: E402
