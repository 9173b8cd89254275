"""The entry commands: what ``python -m mnframe`` (and the ``mnframe`` script) runs.

``cli`` (training, the default; ``--check``, ``--graph``, sweeps), ``evaluate`` and
``predict`` (a trained run rebuilt by ``trained``), ``checkpoint_inspect``
(``checkpoint list|verify``), ``doctor`` (with ``doctor_nodes`` across hosts) and ``tune``
(a search's trial value). The top layer: nothing below imports this package.
"""
