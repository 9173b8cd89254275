"""half: float32 <-> float16 by F16C (NumPy's bits) or by table lookup (NumPy's bits except at exact
ties), and its uses. The tests of ``half`` run on both conversions."""

import warnings

import numpy as np
import pytest

from mnframe.communicators import half, half_native
from mnframe.communicators.host_kernels import mean_into


@pytest.fixture(params=["native", "table"])
def conversion(request, monkeypatch):
    if request.param == "table":
        monkeypatch.setattr(half_native, "kernels", lambda: None)
    elif half_native.kernels() is None:
        pytest.skip("no F16C conversions here (no C compiler, not x86-64 with F16C, or MNFRAME_NATIVE_HALF=0)")
    return request.param


def _numpy16(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return x.astype(np.float16)


def test_encode_is_numpys_rounding_but_for_ties(conversion):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(300_000) * np.exp(rng.uniform(-30, 13, 300_000))).astype(np.float32)
    specials = [0.0, -0.0, np.inf, -np.inf, 65504, 65519.9, 65520, 1e-8, 2.98e-8, 6.0e-8, -6.1e-5, 1 + 2**-11]
    x[: len(specials)] = specials
    x[len(specials)] = np.nan
    got = np.empty(x.size, np.float16)
    half.encode(x, got)
    ref = _numpy16(x)
    assert np.isnan(got[len(specials)])
    ok = np.isnan(ref) | (got.view(np.uint16) == ref.view(np.uint16))
    bits = x.view(np.uint32)
    # where they differ, x is an exact tie between two float16 values: one unit in the last place apart
    differ = ~ok
    assert differ.sum() < (1 if conversion == "native" else 200)
    assert np.all(bits[differ] & 0xFFF == 0)
    assert np.all(np.abs(got[differ].view(np.int16).astype(int) - ref[differ].view(np.int16).astype(int)) == 1)
    assert got[0].view(np.uint16) == 0 and got[1].view(np.uint16) == 0x8000  # signed zeros kept
    assert np.isposinf(got[2]) and np.isneginf(got[3]) and np.isinf(got[6]) and got[4] == got[5] == 65504


@pytest.mark.usefixtures("conversion")
def test_encode_scales_in_float32_and_decode_is_exact():
    x = np.linspace(-3, 3, 70_001, dtype=np.float32)
    got = np.empty(x.size, np.float16)
    half.encode(x, got, scale=0.25)
    ref = _numpy16(x * np.float32(0.25))
    assert np.count_nonzero(got.view(np.uint16) != ref.view(np.uint16)) < 20
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    out = np.empty(every.size, np.float32)
    half.decode(every, out)
    ref = every.astype(np.float32)
    same = (out.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(out) & np.isnan(ref))
    assert same.all()
    acc = np.ones(every.size, np.float32)
    half.decode(every, acc, add=True)
    finite = np.isfinite(ref)
    assert np.array_equal(acc[finite], (ref + 1)[finite])


@pytest.mark.usefixtures("conversion")
def test_mean_into_float16_sums_in_float32():
    parts = [np.full(300_000, v, np.float16) for v in (2048, 1, 1)]  # 2048 + 1 is not a float16
    out = np.empty(300_000, np.float16)
    mean_into(parts, [out], 1.0)
    assert np.all(out == 2050)


@pytest.mark.usefixtures("conversion")
def test_encode_rounding_is_encode_then_decode():
    """The wire path's fused step: the bits sent and the value kept are encode's and decode's."""
    rng = np.random.RandomState(3)
    x = np.concatenate([rng.standard_normal(70_000).astype(np.float32) * s for s in (1e-6, 1e-3, 1, 1e3, 1e5)])
    x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 70000, 1e-8], np.float32)])
    bits = np.empty(x.size, np.uint16)
    half.encode(x, bits)
    kept = np.empty(x.size, np.float32)
    half.decode(bits.view(np.float16), kept)
    acc, sent = x.copy(), np.empty(x.size, np.uint16)
    half.encode_rounding(acc, sent)
    assert sent.tobytes() == bits.tobytes()
    assert acc.tobytes() == kept.tobytes()


def test_native_rounds_exact_ties_to_even_as_numpy():
    """Every float16 tie (the midpoints between neighbours) and its neighbours, any sign and scale."""
    if half_native.kernels() is None:
        pytest.skip("no F16C conversions here")
    every = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)  # the finite positives
    mids = (every[:-1] + every[1:]) / 2  # exact in float32
    x = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf)])
    x = np.concatenate([x, -x])
    got = np.empty(x.size, np.uint16)
    half_native.kernels().encode(x, got, 1.0)
    assert got.tobytes() == _numpy16(x).view(np.uint16).tobytes()


def test_native_tail_and_any_length():
    """Lengths that are not a multiple of the vector width convert their last elements too."""
    if half_native.kernels() is None:
        pytest.skip("no F16C conversions here")
    for n in (0, 1, 7, 8, 9, 23):
        x = np.linspace(-2, 2, n, dtype=np.float32) + np.float32(1 / 3)
        got = np.empty(n, np.float16)
        half.encode(x, got, scale=0.5)
        assert got.tobytes() == _numpy16(x * np.float32(0.5)).tobytes()
        back = np.ones(n, np.float32)
        half.decode(got, back, add=True)
        assert back.tobytes() == (got.astype(np.float32) + 1).tobytes()


def _unloadable(path):
    raise OSError(f"{path}: failed to map segment from shared object")


def test_native_switched_off_or_unbuildable_falls_back_to_the_table(monkeypatch):
    try:
        monkeypatch.setenv("MNFRAME_NATIVE_HALF", "0")
        half_native.kernels.cache_clear()
        assert half_native.kernels() is None
        monkeypatch.setenv("MNFRAME_NATIVE_HALF", "1")
        monkeypatch.setenv("CC", "/nonexistent/cc")
        half_native.kernels.cache_clear()
        assert half_native.kernels() is None
        x = np.array([1.0, 2.5, -3.0], np.float32)
        got = np.empty(3, np.float16)
        half.encode(x, got)  # the table
        assert got.tolist() == [1.0, 2.5, -3.0]
        monkeypatch.delenv("CC")
        monkeypatch.setattr(half_native.ctypes, "CDLL", _unloadable)  # e.g. /tmp mounted noexec
        half_native.kernels.cache_clear()
        assert half_native.kernels() is None
    finally:
        half_native.kernels.cache_clear()  # rebuilt by the next caller with the real environment
