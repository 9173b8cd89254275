"""mnframe: a ChainerMN implementation with a declarative runner.

``import mnframe as chainermn`` gives every public name of ChainerMN. Names are
resolved lazily from the table below, so importing mnframe costs almost nothing
and CUDA/NCCL code is only imported when a GPU path is actually used.
"""

from mnframe._internal import chainermn_paths as _chainermn_paths
from mnframe._internal import numpy_compat as _numpy_compat
from mnframe._internal import path_finder as _path_finder
from mnframe.runtime import early_hook, mpi_start

_path_finder.install()  # ChainerMN's module paths without a file (communicators.flat_communicator, ...)
_numpy_compat.apply()
early_hook.install()  # an exception once MPI runs aborts the job, even before create_communicator
mpi_start.install()  # launcher defaults before MPI starts; a launcher/MPI mismatch ends the job as it starts

__version__ = "0.1.0"

# public name -> "module:attribute" (or "module" for a subpackage): ChainerMN's table, the row ""
_EXPORTS = _chainermn_paths.PATHS[""]

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'mnframe' has no attribute {name!r}")
    from mnframe._internal.import_path import resolve  # import-light

    value = globals()[name] = resolve(target)  # cache: the next lookup is a plain dict hit
    return value


def __dir__():
    return __all__
