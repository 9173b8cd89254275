"""Recipe code: the models and datasets that the shipped recipe YAMLs point at.

Each ``recipes/<name>/`` holds the recipe's YAML (composed by the runner) and
its Python code (``model.py``/``models.py``, ``data.py``, ...), referenced from
the YAML by ``_target_``. The modules import only Chainer/NumPy at import time;
mnframe's communication functions are imported where a model actually uses
them, so the data-parallel recipes stay cheap to import.
"""


def communicator_or_default(comm):
    """``comm`` itself, or (when the builder passed none) a naive communicator over MPI.COMM_WORLD.

    Models that communicate take ``comm`` as an argument; the runner passes the
    model communicator. The fallback keeps such a model usable from a plain
    script or a test that does not build a communicator itself.
    """
    if comm is not None:
        return comm
    import mnframe

    return mnframe.create_communicator('naive')
