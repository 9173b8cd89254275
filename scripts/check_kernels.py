"""Compile every CuPy kernel mnframe generates with NVRTC for one GPU architecture, without a GPU.

mnframe's only generated kernels are the batched packing kernels of
``mnframe/communicators/device_packing.py``: ``mnframe_pack_SRC_DST`` and
``mnframe_unpack_SRC_DST`` for every pair of float16/float32/float64 (18), each
in CuPy's 32-bit and 64-bit indexing (36 variants). For each one this builds
the ``cupy.ElementwiseKernel`` exactly as mnframe does, asks CuPy for the CUDA
source it would compile for such a call (``_get_elementwise_kernel_code``: CuPy's
own code generation, the same function a launch uses) and compiles it with
NVRTC through CuPy's compiler, with the options CuPy uses for a launch, into a
cubin for ``--arch`` (default sm_90, the H100). No device is touched: a launch would
compile this very source for the device's architecture.

Run it in a venv with ``cupy-cuda13x`` and ``nvidia-cuda-nvrtc`` (scripts/check_kernels.sh makes one).
Prints one line per variant and a summary; exit 1 if any variant fails.
"""

import argparse
import os
import sys
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

DTYPES = ("float16", "float32", "float64")
ARG_NDARRAY, ARG_INDEXER, ARG_SCALAR = 1, 2, 3  # CuPy's _ArgKind values


def _arginfos(kernel, index_32_bits):
    """CuPy's per-call argument metadata for a launch of ``kernel`` on C-contiguous 1-d arrays."""
    import cupy
    import numpy as np
    from cupy._core import _carray, _kernel, _scalar

    infos = []
    for p in kernel.params:
        if p.name == "_ind":
            infos.append(_kernel._ArgInfo(ARG_INDEXER, _carray.Indexer, None, 1, True, index_32_bits))
        elif (
            p.raw
            or not np.dtype(p.dtype).shape == ()
            or p.name in ("ptrs", "starts", "offsets", "f16tag", "out", "buf")
        ):
            infos.append(_kernel._ArgInfo(ARG_NDARRAY, cupy.ndarray, np.dtype(p.dtype), 1, True, index_32_bits))
        else:
            infos.append(_kernel._ArgInfo(ARG_SCALAR, _scalar.CScalar, np.dtype(p.dtype), 0, True, index_32_bits))
    return tuple(infos)


def source_of(kernel, index_32_bits):
    from cupy._core import _kernel

    return _kernel._get_elementwise_kernel_code(
        _arginfos(kernel, index_32_bits),
        _kernel._TypeMap(()),
        kernel.params,
        kernel.operation,
        kernel.name,
        kernel.preamble,
    )


def compile_one(kernel, index_32_bits, arch):
    """NVRTC on the source, with the options CuPy's compiler adds for a launch (its
    ``_compile_using_nvrtc_no_warning``), the architecture given instead of the device's."""
    from cupy._core import core
    from cupy.cuda import compiler

    code = source_of(kernel, index_32_bits)
    options = core.assemble_cupy_compiler_options(()) + (
        f"-arch=sm_{arch.replace('sm_', '')}",
        "--device-as-default-execution-space",
    )
    program = compiler._NVRTCProgram(code, kernel.name + ".cu", (), (), name_expressions=None, method="cubin")
    binary, _ = program.compile(options)
    if not binary:
        raise RuntimeError("NVRTC returned no cubin")
    return code


def variants():
    from mnframe.communicators import device_packing as dp

    for src in DTYPES:
        for dst in DTYPES:
            yield f"pack {src}->{dst}", dp._gather_kernel(src, dst)
            yield f"unpack {src}->{dst}", dp._scatter_kernel(src, dst)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90", help="NVRTC target (default %(default)s: H100)")
    parser.add_argument(
        "--show-source", metavar="VARIANT", help="print the CUDA source of one variant, e.g. 'pack float16->float32'"
    )
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # CuPy warns that NCCL/cuTENSOR are missing: not needed to compile
    import cupy
    from cupy.cuda import nvrtc

    import mnframe  # noqa: F401  (NumPy 2 shim, before anything imports chainer)

    print(
        f"check_kernels: CuPy {cupy.__version__}, NVRTC {'.'.join(map(str, nvrtc.getVersion()))}, "
        f"target {args.arch}, no GPU used",
        flush=True,
    )
    ok = failed = 0
    for what, kernel in variants():
        for bits in (True, False):
            label = f"{what} ({32 if bits else 64}-bit indexing)"
            if args.show_source and args.show_source == what and bits:
                print(source_of(kernel, bits))
            try:
                compile_one(kernel, bits, args.arch)
            except Exception as e:
                failed += 1
                print(f"FAIL {label}: {type(e).__name__}: {str(e)[:2000]}", flush=True)
            else:
                ok += 1
                print(f"ok   {label}", flush=True)
    print(f"check_kernels: {ok} compiled, {failed} failed (of {ok + failed} variants) for {args.arch}")
    return 1 if failed or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
