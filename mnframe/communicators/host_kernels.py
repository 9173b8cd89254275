"""The fused averaging kernel of the shared-memory reducers.

``mean_into`` sums the same slice of several buffers, scales it and writes the
result to several destinations in one pass over memory: it works block by block
(``BLOCK_BYTES``, sized for L2) so every input is read once and every output
written once. Sources are summed in the order given (rank order), so an element's
result does not depend on how the buffer is cut. When the first destination is
one of the first two sources, the block is accumulated in it directly (no
scratch copy). float16 is accumulated in float32.
"""

import numpy as np

from mnframe.communicators import half

BLOCK_BYTES = 1 << 20  # 1 MiB: measured best of 64 KiB..4 MiB on 2 ranks (1 MiB L2 per core)
_ACC = {np.dtype(np.float16): np.dtype(np.float32)}


def mean_into(sources, dests, scale):
    """dests[k][:] = scale * sum(sources) for 1-d arrays of one length and dtype."""
    n = sources[0].size
    if n == 0:
        return
    if len(sources) == 1 and scale == 1 and all(d is sources[0] for d in dests):
        return
    dtype = sources[0].dtype
    if dtype == np.float16:
        return _mean_into_half(sources, dests, scale)
    acc_dtype = _ACC.get(dtype, dtype)
    # Sums run in the order of ``sources`` (callers pass rank order), so every element is computed by
    # the same operations however the buffer is cut into slices or buckets (overlap's bitwise claim).
    # dests[0] accumulates in place when it is one of the first two sources (read before written).
    in_place = acc_dtype == dtype and any(dests[0] is s for s in sources[:2])
    copies = dests[1:] if in_place else dests
    step = max(1, BLOCK_BYTES // acc_dtype.itemsize)
    scratch = None if in_place else np.empty(min(step, n), dtype=acc_dtype)
    for s in range(0, n, step):
        e = min(n, s + step)
        acc = dests[0][s:e] if in_place else scratch[: e - s]
        if len(sources) > 1:
            np.add(sources[0][s:e], sources[1][s:e], out=acc, dtype=acc_dtype, casting="unsafe")
        elif not in_place:
            np.copyto(acc, sources[0][s:e], casting="unsafe")
        for src in sources[2:]:
            np.add(acc, src[s:e], out=acc, dtype=acc_dtype, casting="unsafe")
        if scale != 1:
            np.multiply(acc, scale, out=acc, casting="unsafe")
        for d in copies:
            np.copyto(d[s:e], acc, casting="unsafe")


def _mean_into_half(sources, dests, scale):
    """``mean_into`` for float16: decoded and summed in float32 (rank order), scaled and rounded once
    (``half``: table lookups, several times faster than NumPy's float16 casts)."""
    n = sources[0].size
    step = max(1, BLOCK_BYTES // 4)
    acc = np.empty(min(step, n), np.float32)
    for s in range(0, n, step):
        e = min(n, s + step)
        a = acc[: e - s]
        half.decode(sources[0][s:e], a)
        for src in sources[1:]:
            half.decode(src[s:e], a, add=True)
        half.encode(a, dests[0][s:e], scale)
        for d in dests[1:]:
            np.copyto(d[s:e], dests[0][s:e])


def slice_bounds(n, parts, i):
    """[start, stop) of part ``i`` when ``n`` elements are split into ``parts`` near-equal parts."""
    base, extra = divmod(n, parts)
    start = i * base + min(i, extra)
    return start, start + base + (1 if i < extra else 0)
