"""Lazy attribute tables for mnframe's subpackages (PEP 562).

A subpackage lists ``name -> "module:attribute"`` (``mnframe._import_path``);
the module is imported the first time the name is used. This keeps ``import mnframe`` cheap and lets GPU
code stay unimported on machines without CUDA.
"""

import importlib

from mnframe._import_path import resolve


def lazy_exports(package_name, table):
    """Return (__getattr__, __dir__, __all__) for a package exporting ``table``."""
    namespace = importlib.import_module(package_name).__dict__

    def __getattr__(name):
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package_name!r} has no attribute {name!r}")
        value = namespace[name] = resolve(target)
        return value

    names = sorted(table)
    return __getattr__, (lambda: names), names
