"""Recipe code: the models and datasets that the shipped recipe YAMLs point at.

Each ``recipes/<name>/`` holds the recipe's YAML (composed by the runner) and
its Python code (``model.py``/``models.py``, ``data.py``, ...), referenced from
the YAML by ``_target_``. The modules import only Chainer/NumPy at import time;
mnframe's communication functions are imported where a model actually uses
them, so the data-parallel recipes stay cheap to import.

Models that communicate take the communicator as a required argument: under
the runner it is passed by the builder (a parameter named ``comm`` gets the
model communicator, see ``mnframe.builder.model.COMMUNICATOR_PARAMETERS``).
"""


def blame(argument, exc):
    """``exc`` marked as caused by the argument named ``argument``; returns it (``raise blame('path', ...)``).

    The runner then reports the error under that argument's key (e.g.
    ``dataset.source.path``) instead of the whole ``dataset.source``
    (``mnframe.builder.instantiate``); plain scripts see the exception unchanged.
    """
    exc.argument = argument
    return exc
