"""Run code written for ChainerMN, unchanged, on mnframe.

``python -m mnframe.compat script.py args...`` (under ``mpiexec``) runs a ChainerMN
script as ``python script.py args...`` would, with ``chainermn`` and every
``chainermn.*`` module resolving to mnframe's module of the same path and
mnframe's abort guard on (see launcher.py). ``install_alias()`` does the
aliasing alone, for code that wants it in-process (see alias.py).
"""

from mnframe.compat.alias import ALIASED_PACKAGE, ChainermnAliasFinder, install_alias, uninstall_alias  # noqa: F401
