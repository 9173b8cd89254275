"""ChainerMN's module path ``chainermn.nccl``: CuPy's NCCL binding, loaded on first use.

The names (``get_build_version``, ``get_unique_id``, ``get_version``, the
``NCCL_*`` constants, ``NcclCommunicator``, ``NcclError``) come from
``cupy.cuda.nccl`` the first time one is read, so ``import mnframe.nccl`` never
imports CuPy. As in ChainerMN they exist only where CuPy's NCCL imports;
``_available`` says whether it does.
"""

NAMES = (
    "get_build_version",
    "get_unique_id",
    "get_version",
    "NCCL_FLOAT",
    "NCCL_FLOAT16",
    "NCCL_FLOAT32",
    "NCCL_FLOAT64",
    "NCCL_SUM",
    "NcclCommunicator",
    "NcclError",
)


def _load():
    """cupy.cuda.nccl, or None where CuPy or its NCCL binding does not import."""
    try:
        from cupy.cuda import nccl
    except Exception:  # no CuPy, no CUDA driver, CuPy built without NCCL: all mean "not available"
        return None
    return nccl


def __getattr__(name):
    if name == "_available":
        value = _load() is not None
    elif name in NAMES:
        nccl = _load()
        if nccl is None:
            raise AttributeError(f"mnframe.nccl.{name} needs CuPy with NCCL, which does not import here")
        value = getattr(nccl, name)
    else:
        raise AttributeError(f"module 'mnframe.nccl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(NAMES + ("_available",))
