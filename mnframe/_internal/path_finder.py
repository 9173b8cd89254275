"""The ChainerMN module paths that have no file, made from their row of ``mnframe._internal.chainermn_paths``.

``install()`` (run by ``import mnframe``) puts ``RowFinder`` first on
``sys.meta_path``. For ``mnframe.<path>`` whose row lists names (and that is
not a package), it makes a plain module on first import whose attributes are
those names resolved (``mnframe._internal.import_path``): ``import
mnframe.communicators.flat_communicator``, ``importlib.import_module`` and
``from ... import`` work as for a file, and the objects are mnframe's own, with
their home module as ``__module__`` (so pickles name that module). Any other
name costs one dict lookup and falls through to the normal finders.

It also finds ``mnframe.recipes`` in a source checkout used without an install
(``python -m mnframe`` in the repository's root shadows an installed mnframe):
the wheel and the editable install map it to the top-level ``recipes/``, which a
bare checkout's ``mnframe`` package does not hold.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

from mnframe._internal import chainermn_paths as paths


class _RowLoader(importlib.abc.Loader):
    """Fills a new module with the names of its row."""

    def create_module(self, _spec):
        return None  # the default module

    def exec_module(self, module):
        from mnframe._internal.import_path import resolve

        path = paths.relative(module.__name__)
        row = paths.PATHS[path]
        for name, target in row.items():
            setattr(module, name, resolve(target))
        module.__all__ = sorted(n for n in row if not n.startswith("_"))
        module.__doc__ = f"ChainerMN's module path ``chainermn.{path}``: {', '.join(sorted(row))} (mnframe's objects)."


class RowFinder(importlib.abc.MetaPathFinder):
    """Finds the file-less ChainerMN paths of ``mnframe`` (see the module docstring)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002 - the protocol's names (keyword callers)
        if fullname == "mnframe.recipes":
            return _checkout_recipes()
        relative = paths.relative(fullname)
        if relative is None or not paths.made_from_row(relative):
            return None
        return importlib.machinery.ModuleSpec(fullname, _LOADER, origin=paths.__name__)


def _checkout_recipes():
    """``mnframe.recipes`` from a source checkout's ``recipes/``; None where the package has its own."""
    package = Path(__file__).resolve().parents[1]  # .../mnframe
    if (package / "recipes").is_dir():
        return None  # an installed wheel
    init = package.parent / "recipes" / "__init__.py"
    if not init.is_file():
        return None
    return importlib.util.spec_from_file_location(
        "mnframe.recipes", init, submodule_search_locations=[str(init.parent)]
    )


_LOADER = _RowLoader()
_FINDER = RowFinder()


def install():
    """Put the finder first on ``sys.meta_path``, replacing one of an earlier import of this module."""
    sys.meta_path[:] = [_FINDER] + [f for f in sys.meta_path if type(f).__module__ != __name__]
