"""Lazy attribute tables for mnframe's subpackages (PEP 562).

A subpackage lists ``name -> "module:attribute"``; the module is imported the
first time the name is used. This keeps ``import mnframe`` cheap and lets GPU
code stay unimported on machines without CUDA.
"""
import importlib


def resolve(target):
    """``target`` itself, or for a ``"module:attribute"`` string that attribute
    (the module when there is no attribute), imported now."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    value = importlib.import_module(module_name)
    return getattr(value, attr) if attr else value


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
