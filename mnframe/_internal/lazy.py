"""Lazy attribute tables for mnframe's subpackages (PEP 562).

A subpackage lists ``name -> "module:attribute"`` (``mnframe._internal.import_path``);
the module is imported the first time the name is used. This keeps ``import mnframe`` cheap and lets GPU
code stay unimported on machines without CUDA. A ChainerMN package takes its
table from its row of ``mnframe._internal.chainermn_paths``.
"""

import importlib
import importlib.util

from mnframe._internal import chainermn_paths
from mnframe._internal.import_path import resolve


def lazy_exports(package_name, table=None):
    """Return (__getattr__, __dir__, __all__) for a package exporting ``table`` (default: its ChainerMN row).

    A name that is also a module path of the package (ChainerMN's ``functions.pseudo_connect``
    and ``links.create_mnbn_model`` are both, as are ``checkpoint.attach`` and ``checkpoint.resume``)
    is bound now, after importing that module, so a later import of the module path does not
    shadow the function (as ChainerMN's ``__init__`` does)."""
    namespace = importlib.import_module(package_name).__dict__
    if table is None:
        table = chainermn_paths.row(package_name)

    def __getattr__(name):
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package_name!r} has no attribute {name!r}")
        value = namespace[name] = resolve(target)
        return value

    for name, target in table.items():
        if _is_module_path(f"{package_name}.{name}"):
            importlib.import_module(f"{package_name}.{name}")
            namespace[name] = resolve(target)

    names = sorted(table)
    return __getattr__, (lambda: names), names


def _is_module_path(module_name):
    """Whether ``module_name`` is a module of the package (a ChainerMN path, or a file of mnframe's own)."""
    path = chainermn_paths.relative(module_name)
    if path is not None and path in chainermn_paths.PATHS:
        return True
    try:
        return importlib.util.find_spec(module_name) is not None
    except ImportError:
        return False
