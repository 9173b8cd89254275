"""Let Chainer 7.8.1 import on today's Python, NumPy and setuptools, whoever imports it.

Chainer 7.8.1 (its last release) needs three things that are gone:

* ``numpy.sctypes``: removed in NumPy 2.0; Chainer reads it while importing and
  at run time (``F.as_strided``).
* ``numpy.distutils.system_info``: removed in NumPy 2.0, and unavailable on
  Python >= 3.12 with any NumPy; Chainer's ``_environment_check`` imports it.
* ``pkg_resources``: removed in setuptools 82, and a Python >= 3.12 venv has no
  setuptools at all; ``_environment_check`` and ``chainer.testing`` import it.

mnframe installs ``mnframe-chainer-hook.pth`` into site-packages, so every
interpreter of that environment runs ``install_from_pth()`` at start-up: it puts
one finder at the front of ``sys.meta_path`` and imports nothing else (cost:
well under a millisecond, see README "Supported platforms"). The finder does
nothing until ``chainer`` or ``chainer.testing`` is imported. Then it puts back
``numpy.sctypes`` (NumPy 2 only; it stays, Chainer needs it later) and, only
while that module executes and only where the real module cannot be imported,
provides the few names of ``numpy.distutils`` and ``pkg_resources`` Chainer
uses, removing them again afterwards so that no other code finds them. A
process that never imports Chainer is not touched. ``MNFRAME_CHAINER_HOOK=0``
keeps the .pth from installing it; ``import mnframe`` installs it regardless.

This is a top-level package, not part of ``mnframe``, so that the .pth line
does not import mnframe (or NumPy) into every interpreter; the stand-ins live
in ``stand_ins.py``, imported only when one is needed.
"""

import sys

ENV_SWITCH = "MNFRAME_CHAINER_HOOK"
# Modules whose execution needs the stand-ins: Chainer's package (its
# _environment_check runs inside it) and chainer.testing (helper.py keeps a
# reference to pkg_resources for with_requires()).
WATCHED = ("chainer", "chainer.testing")

_from_pth = False
_ABSENT = object()


def install_from_pth():
    """Called by the .pth line at interpreter start-up."""
    global _from_pth
    import os  # already imported by site: a dict lookup

    if os.environ.get(ENV_SWITCH, "1") != "0":
        _from_pth = True
        install()


def install():
    """Put the finder first on ``sys.meta_path``; return False if it was there already."""
    if ChainerFinder in sys.meta_path:
        return False
    sys.meta_path.insert(0, ChainerFinder)
    return True


def installed_by_pth():
    """True when this interpreter's site-packages .pth installed the finder (so
    every child interpreter of this environment gets it too)."""
    return _from_pth and ChainerFinder in sys.meta_path


class ChainerFinder:
    """Meta path finder: finds nothing itself, wraps the loader of WATCHED modules."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None

    @classmethod
    def invalidate_caches(cls):
        pass


class _PatchingLoader:
    """The real loader, executing the module with what Chainer needs in place."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # get_source, get_resource_reader, is_package, ...
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        undo = provide_for_chainer()
        try:
            self._loader.exec_module(module)
        finally:
            withdraw(undo)


# -- what Chainer needs ----------------------------------------------------------


def provide_for_chainer():
    """Put back ``numpy.sctypes``; add stand-ins for modules that cannot be
    imported. Returns what ``withdraw`` needs to undo the stand-ins."""
    import numpy

    if not hasattr(numpy, "sctypes"):  # NumPy 2 (its __getattr__ raises AttributeError)
        numpy.sctypes = {
            "int": [numpy.int8, numpy.int16, numpy.int32, numpy.int64],
            "uint": [numpy.uint8, numpy.uint16, numpy.uint32, numpy.uint64],
            "float": [numpy.float16, numpy.float32, numpy.float64],
            "complex": [numpy.complex64, numpy.complex128],
            "others": [bool, object, bytes, str, numpy.void],
        }
    added = {}
    if not _importable("numpy.distutils.system_info"):
        from _mnframe_chainer_hook import stand_ins

        added.update(stand_ins.numpy_distutils(numpy))
    if not _importable("pkg_resources"):
        from _mnframe_chainer_hook import stand_ins

        added.update(stand_ins.pkg_resources())
    undo = [(name, module, sys.modules.get(name, _ABSENT)) for name, module in added.items()]
    sys.modules.update(added)
    if "numpy.distutils" in added:
        numpy.distutils = added["numpy.distutils"]
    return undo


def withdraw(undo):
    """Take the stand-ins out of ``sys.modules`` again (modules that imported one
    keep their reference); whatever was there before comes back."""
    for name, module, previous in undo:
        if sys.modules.get(name) is module:
            if previous is _ABSENT:
                del sys.modules[name]
            else:
                sys.modules[name] = previous
        if name == "numpy.distutils":
            numpy = sys.modules.get("numpy")
            if getattr(numpy, "distutils", None) is module:
                del numpy.distutils


def _importable(name):
    if sys.modules.get(name) is not None:  # (None there means "import fails")
        return True
    import importlib

    try:
        importlib.import_module(name)
    except Exception:  # ImportError, or a broken module on this Python
        return False
    return True
