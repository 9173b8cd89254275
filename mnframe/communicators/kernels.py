"""The fused averaging kernel of the shared-memory reducers.

``mean_into`` sums the same slice of several buffers, scales it and writes the
result to several destinations in one pass over memory: it works block by block
(``BLOCK_BYTES``, sized for L2) so every input is read once and every output
written once. float16 is accumulated in float32.
"""
import numpy as np

BLOCK_BYTES = 1 << 18
_ACC = {np.dtype(np.float16): np.dtype(np.float32)}


def mean_into(sources, dests, scale):
    """dests[k][:] = scale * sum(sources) for 1-d arrays of one length and dtype."""
    n = sources[0].size
    if n == 0:
        return
    if len(sources) == 1 and scale == 1 and all(d is sources[0] for d in dests):
        return
    acc_dtype = _ACC.get(sources[0].dtype, sources[0].dtype)
    step = max(1, BLOCK_BYTES // acc_dtype.itemsize)
    scratch = np.empty(min(step, n), dtype=acc_dtype)
    for s in range(0, n, step):
        e = min(n, s + step)
        acc = scratch[:e - s]
        if len(sources) == 1:
            np.copyto(acc, sources[0][s:e], casting="unsafe")
        else:
            np.add(sources[0][s:e], sources[1][s:e], out=acc, dtype=acc_dtype, casting="unsafe")
        for src in sources[2:]:
            np.add(acc, src[s:e], out=acc, dtype=acc_dtype, casting="unsafe")
        if scale != 1:
            np.multiply(acc, scale, out=acc, casting="unsafe")
        for d in dests:
            np.copyto(d[s:e], acc, casting="unsafe")


def slice_bounds(n, parts, i):
    """[start, stop) of part ``i`` when ``n`` elements are split into ``parts`` near-equal parts."""
    base, extra = divmod(n, parts)
    start = i * base + min(i, extra)
    return start, start + base + (1 if i < extra else 0)
