"""``chainermn`` -> ``mnframe``: an import alias through a meta-path finder.

``install_alias()`` puts ``ChainermnAliasFinder`` first on ``sys.meta_path``.
For ``chainermn`` and every ChainerMN module path ``chainermn.x.y`` (the table
``mnframe._internal.chainermn_paths``) it finds ``mnframe.x.y`` and its loader hands back
mnframe's module object itself, so ``chainermn.x.y is mnframe.x.y`` and classes,
isinstance checks and pickles are mnframe's. Any other ``chainermn.*`` name (a
path ChainerMN does not have, or one of mnframe's own modules) raises
ModuleNotFoundError naming both modules: the ``chainermn`` package Chainer
installs is never imported in its place.
"""

import importlib
import importlib.abc
import importlib.util
import sys

from mnframe._internal import chainermn_paths

ALIASED_PACKAGE = "chainermn"
TARGET_PACKAGE = "mnframe"


def target_name(fullname):
    """``chainermn.x.y`` -> ``mnframe.x.y``; None for names outside ``chainermn``."""
    if fullname == ALIASED_PACKAGE:
        return TARGET_PACKAGE
    if fullname.startswith(ALIASED_PACKAGE + "."):
        return TARGET_PACKAGE + fullname[len(ALIASED_PACKAGE) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Returns the already imported mnframe module; there is nothing to execute."""

    def __init__(self, target):
        self.target = target

    def create_module(self, _spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass


class ChainermnAliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``chainermn.*`` modules as the mnframe modules of the same path."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002 - the protocol's names (keyword callers)
        mnframe_name = target_name(fullname)
        if mnframe_name is None:
            return None
        found = None
        if chainermn_paths.relative(fullname, ALIASED_PACKAGE) in chainermn_paths.PATHS:
            found = importlib.util.find_spec(mnframe_name)
        if found is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: running ChainerMN code on mnframe, which serves "
                f"ChainerMN's module paths only and has no {mnframe_name!r} among them "
                f"(mnframe/_internal/chainermn_paths.py)",
                name=fullname,
            )
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(mnframe_name), is_package=found.submodule_search_locations is not None
        )


_finder = ChainermnAliasFinder()


def install_alias():
    """Make ``import chainermn...`` give mnframe's modules from now on (idempotent).

    Raises RuntimeError if ChainerMN's own package is already imported in this
    process: its modules would stay in use beside mnframe's.
    """
    if _finder in sys.meta_path:
        return
    loaded = sorted(
        name
        for name, mod in sys.modules.items()
        if target_name(name) and mod is not None and getattr(mod, "__name__", name) == name
    )
    if loaded:
        raise RuntimeError(
            f"ChainerMN's own modules are already imported ({', '.join(loaded[:3])}...); "
            f"install the alias before anything imports chainermn"
        )
    sys.meta_path.insert(0, _finder)


def uninstall_alias():
    """Remove the finder and forget the aliased ``chainermn`` names (mnframe stays imported)."""
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    for name in [n for n in sys.modules if target_name(n)]:
        del sys.modules[name]
