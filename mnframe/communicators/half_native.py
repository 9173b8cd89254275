"""float32 <-> float16 with the CPU's own conversion instructions (x86 F16C), built at first use.

NumPy converts float16 one element at a time (about 11 ns per element here) and ``half``'s
table lookups take about 2.5 ns; F16C converts eight per instruction, so the conversions of
a float16 wire run at memory speed and the halved bytes pay on fast links too.

Built from ``SOURCE`` with the system's C compiler (``$CC``, else ``cc``) in a private
temporary directory that is removed once the library is loaded: nothing is cached, so no
file that anyone else could have written is ever loaded. Where there is no compiler, the
CPU lacks F16C, the build fails or ``MNFRAME_NATIVE_HALF=0``, ``kernels()`` is None and
``half`` keeps its table. F16C rounds to nearest even, NumPy's bits exactly.

Ranks need not agree on which conversion they use: every float16 value on the wire is
encoded by one rank and decoded exactly by all, and the encoding rank keeps the decoded value
(``encode_rounding``), so the replicas stay identical whichever way each rank rounds a tie.
"""

import ctypes
import functools
import logging
import os
import platform
import shutil
import subprocess
import tempfile

from mnframe.runtime import settings

log = logging.getLogger("mnframe.communicators")

SOURCE = r"""
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <cpuid.h>

#define NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* only the conversions use AVX/F16C: the CPU check must run on any x86-64 */
#define F16C __attribute__((target("avx,f16c")))

int mnframe_has_f16c(void) {  /* F16C (CPUID.1:ECX bit 29) and AVX state enabled by the OS */
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 29)) || !(c & (1u << 27)) || !(c & (1u << 28))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

/* dst = float16(scale * src) */
F16C void mnframe_encode(const float *src, uint16_t *dst, size_t n, float scale) {
    __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(src + i), s), NEAREST));
    for (; i < n; i++)
        dst[i] = _cvtss_sh(src[i] * scale, NEAREST);
}

/* dst = float16(acc); acc = float32(dst): the bits sent and the value every receiver decodes */
F16C void mnframe_encode_rounding(float *acc, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(acc + i), NEAREST);
        _mm_storeu_si128((__m128i *)(dst + i), h);
        _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) {
        dst[i] = _cvtss_sh(acc[i], NEAREST);
        acc[i] = _cvtsh_ss(dst[i]);
    }
}

/* dst = float32(src), or dst += float32(src) */
F16C void mnframe_decode(const uint16_t *src, float *dst, size_t n, int add) {
    size_t i = 0;
    if (add) {
        for (; i + 8 <= n; i += 8) {
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
            _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), x));
        }
        for (; i < n; i++) dst[i] += _cvtsh_ss(src[i]);
    } else {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
        for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
    }
}
"""

_FLAGS = ["-O2", "-shared", "-fPIC"]
_BUILD_TIMEOUT_S = 60
_P = ctypes.c_void_p


class Kernels:
    """The built library's three conversions, on 1-d contiguous arrays (ctypes releases the GIL)."""

    def __init__(self, lib):
        self._encode, self._rounding, self._decode = lib.mnframe_encode, lib.mnframe_encode_rounding, lib.mnframe_decode
        self._encode.argtypes = [_P, _P, ctypes.c_size_t, ctypes.c_float]
        self._rounding.argtypes = [_P, _P, ctypes.c_size_t]
        self._decode.argtypes = [_P, _P, ctypes.c_size_t, ctypes.c_int]
        for fn in (self._encode, self._rounding, self._decode):
            fn.restype = None

    def encode(self, src, dst, scale):
        self._encode(src.ctypes.data, dst.ctypes.data, src.size, scale)

    def encode_rounding(self, acc, dst):
        self._rounding(acc.ctypes.data, dst.ctypes.data, acc.size)

    def decode(self, src, dst, add):
        self._decode(src.ctypes.data, dst.ctypes.data, src.size, int(bool(add)))


def _build(workdir):
    """The compiled library's path in ``workdir``, or None (logged) when it cannot be built."""
    compiler = shutil.which(os.environ.get("CC") or "cc")
    if compiler is None:
        log.debug("float16 conversions: no C compiler, using the table")
        return None
    src, lib = os.path.join(workdir, "half.c"), os.path.join(workdir, "half.so")
    with open(src, "w") as f:
        f.write(SOURCE)
    try:
        proc = subprocess.run(
            [compiler, *_FLAGS, "-o", lib, src], capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("float16 conversions: %s failed (%s), using the table", compiler, exc)
        return None
    if proc.returncode != 0:
        log.debug("float16 conversions: %s failed, using the table:\n%s", compiler, proc.stderr[-2000:])
        return None
    return lib


@functools.lru_cache(maxsize=None)
def kernels():
    """The F16C conversions of this process, built once; None where they are not available."""
    if not settings.parse("MNFRAME_NATIVE_HALF") or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    with tempfile.TemporaryDirectory(prefix="mnframe-half-") as workdir:  # private (0700), removed after loading
        path = _build(workdir)
        if path is None:
            return None
        try:
            lib = ctypes.CDLL(path)  # mapped: the file can go once loaded
        except OSError as exc:  # e.g. a temporary directory on a noexec mount
            log.debug("float16 conversions: cannot load the built library (%s), using the table", exc)
            return None
    if not lib.mnframe_has_f16c():
        log.debug("float16 conversions: this CPU has no F16C, using the table")
        return None
    return Kernels(lib)


def for_arrays(*arrays):
    """The kernels when they are available and can take these arrays (each one contiguous, read
    flat), else None: ``half``'s one dispatch point."""
    native = kernels()
    return native if native is not None and all(a.flags.c_contiguous for a in arrays) else None


def describe():
    """Which conversions this process uses, in words (benchmarks print it beside their figures)."""
    if kernels() is not None:
        return "F16C instructions (half_native)"
    return "NumPy table lookups (half.py: MNFRAME_NATIVE_HALF=0, no C compiler, or no F16C)"
