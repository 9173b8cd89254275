"""What changed between the configuration a checkpoint was written with and now.

Resuming with a different model, optimizer or dataset silently produces a
different run (or fails deep inside a load). Changes under ``UNSAFE_PREFIXES``
are refused unless ``checkpoint.allow_unsafe_config_change`` is set; everything
else (epochs, logging, extensions, communicator, world size) is shown and allowed.
"""

UNSAFE_PREFIXES = ("model", "optimizer", "dataset", "data")


def flatten(tree, prefix=""):
    """{'a': {'b': 1}} -> {'a.b': 1}."""
    out = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
    else:
        out[prefix[:-1]] = tree
    return out


def diff(old, new):
    """[(key, old value, new value)] for every dotted key that differs (missing: '<absent>')."""
    a, b = flatten(old or {}), flatten(new or {})
    absent = "<absent>"
    return [
        (k, a.get(k, absent), b.get(k, absent)) for k in sorted(set(a) | set(b)) if a.get(k, absent) != b.get(k, absent)
    ]


def is_unsafe(key):
    return any(key == p or key.startswith(p + ".") for p in UNSAFE_PREFIXES)


def format_diff(changes):
    return "\n".join(f"  {'!' if is_unsafe(k) else ' '} {k}: {o!r} -> {n!r}" for k, o, n in changes)
