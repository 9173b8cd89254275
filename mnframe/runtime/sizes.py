"""Byte counts as people read them (``1.5 GiB``): one formatter for the memory report,
out-of-memory lines and disk-full messages. Imports nothing of mnframe, so the runtime's
out-of-memory line can use it without importing the rest of ``utils``.
"""


def human_bytes(n):
    """``1.5 GiB``-style size (exact bytes below 1 KiB)."""
    n = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
