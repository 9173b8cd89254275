"""Pieces of the communicators that need no second rank: kernels, packing, config, topology env."""

import chainer
import chainer.links as L
import numpy as np
import pytest

from mnframe.communicators import host_kernels, options, packing


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n_src", [1, 2, 3])
def test_mean_into(dtype, n_src, monkeypatch):
    monkeypatch.setattr(host_kernels, "BLOCK_BYTES", 64)  # many blocks
    rng = np.random.default_rng(1)
    srcs = [rng.standard_normal(1001).astype(dtype) for _ in range(n_src)]
    want = sum(s.astype(np.float64) for s in srcs) / 4
    # in place (dest is a source) and into an outside buffer
    other = np.empty(1001, dtype)
    host_kernels.mean_into(srcs, srcs + [other], 0.25)
    for d in srcs + [other]:
        tol = 1e-2 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(d.astype(np.float64), want, rtol=tol, atol=tol)


def test_slice_bounds_cover():
    for n in (0, 1, 7, 100):
        for parts in (1, 2, 3, 4):
            bounds = [host_kernels.slice_bounds(n, parts, i) for i in range(parts)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def _model():
    m = chainer.Chain()
    with m.init_scope():
        m.a = L.Linear(3, 2)
        m.b = L.Linear(2, 2)
    m.b.W.array = m.b.W.array.astype(np.float64)
    m.b.W.grad = None
    return m


def test_pack_unpack_roundtrip_and_views():
    m = _model()
    for _, p in m.namedparams():
        p.grad = np.arange(p.size, dtype=p.dtype).reshape(p.shape) + 1
    params, sig = packing.describe(m, zero_fill=False)
    layout = packing.build_layout(params, sig, None)
    assert [g.dtype for g in layout.groups] == [np.dtype(np.float32), np.dtype(np.float64)]
    buf = np.empty(layout.nbytes, np.uint8)
    views = layout.entry_views(buf)
    packing.pack(views, params)
    for arr in layout.group_arrays(buf):
        arr *= 2
    packing.unpack(views, params)
    for _, p in params:
        np.testing.assert_array_equal(p.grad, 2 * (np.arange(p.size).reshape(p.shape) + 1))
        assert np.shares_memory(p.grad, buf)  # views, no copy back
    packing.pack(views, params)  # resident: nothing to copy, values unchanged
    np.testing.assert_array_equal(params[0][1].grad, 2 * (np.arange(params[0][1].size).reshape(params[0][1].shape) + 1))
    packing.release(views, params)
    assert not any(np.shares_memory(p.grad, buf) for _, p in params)


def test_wire_dtype_casts_back():
    m = _model()
    for _, p in m.namedparams():
        p.grad = np.full(p.shape, 1.5, p.dtype)
    params, sig = packing.describe(m, zero_fill=False)
    layout = packing.build_layout(params, sig, np.float16)
    assert [g.dtype for g in layout.groups] == [np.dtype(np.float16)]
    views = layout.entry_views(np.empty(layout.nbytes, np.uint8))
    packing.pack(views, params)
    packing.unpack(views, params)
    for _, p in params:
        assert p.grad.dtype == p.array.dtype and np.all(p.grad == 1.5)


def test_signature_tracks_missing_grads_and_zero_fill():
    m = _model()
    params, sig_missing = packing.describe(m, zero_fill=False)
    _, sig_filled = packing.describe(m, zero_fill=True)
    assert packing.signature_key(sig_missing, None) != packing.signature_key(sig_filled, None)
    assert packing.signature_key(sig_filled, None) != packing.signature_key(sig_filled, np.float16)
    assert 0 <= packing.signature_key(sig_filled, None) < 2**62


def test_config_table():
    assert options.defaults() == {
        "batched_copy": False,
        "allreduce_grad_dtype": None,
        "compression": None,  # PowerSGD (docs/powersgd.md)
        "powersgd_rank": 4,
        "powersgd_start_iter": 10,
    }
    assert options.check("allreduce_grad_dtype", "float16") == np.float16
    with pytest.raises(ValueError, match="unknown communicator config 'nope'; known: allreduce_grad_dtype"):
        options.check("nope", 1)
    with pytest.raises(KeyError) as info:  # ChainerMN's get_config raises KeyError, its set_config ValueError
        options.check("nope", 1)
    assert isinstance(info.value, ValueError) and str(info.value).startswith("unknown communicator config 'nope'")
