"""The one CUDA probe, and the fix hints that name packages matching the CuPy installed.

``probe()`` answers "can this process use CUDA, NCCL and cuDNN through CuPy,
and with how many GPUs?" for everything that asks: the communicator factory
and registry, the runner's device choice, ``doctor``, the GPU tests. It never
raises and imports CuPy only when it is installed. Tests fake CUDA by
replacing ``probe`` (the answer is cached per process: CUDA does not appear
or vanish while a job runs).

Package names depend on the CUDA major version CuPy was built for:
``cupy-cuda13x`` wants ``nvidia-nccl-cu13``, ``cupy-cuda12x`` wants
``nvidia-nccl-cu12``. ``package_for`` derives them from CuPy's distribution
name (or its CUDA runtime version), never from a fixed "cu12".
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
import re
import warnings
from typing import Optional

log = logging.getLogger("mnframe.cuda")

CUPY_HINT = "pip install cupy-cuda13x (CUDA 13) or cupy-cuda12x (CUDA 12), matching the driver's CUDA (nvidia-smi)"
# The last CuPy line with cuDNN (CuPy 14 removed ``cupy.cudnn``): CuPy 13 built for CUDA 12 plus the
# cuDNN wheel (cupy-cuda13x 13.6.0 ships no cuDNN module; a CUDA 13 driver runs CUDA 12 builds).
CUDNN_INSTALL = "pip install 'cupy-cuda12x<14' nvidia-cudnn-cu12"


@dataclasses.dataclass(frozen=True)
class CudaProbe:
    """What CuPy can use here. ``problem`` is None when CUDA works with ``device_count`` GPUs."""

    problem: Optional[str]
    device_count: int = 0
    cupy_version: Optional[str] = None  # None: CuPy is not installed
    cupy_package: Optional[str] = None  # its distribution name, e.g. "cupy-cuda13x"
    cuda_major: Optional[int] = None  # the CUDA major version CuPy was built for
    nccl_problem: Optional[str] = "not checked"  # None when NCCL loads through CuPy
    nccl_version: Optional[int] = None  # e.g. 22703 for NCCL 2.27.3
    has_cudnn: bool = False  # CuPy ships cupy.cudnn (CuPy <= 13, with a cuDNN library)

    @property
    def usable(self) -> bool:
        return self.problem is None and self.device_count > 0

    @property
    def cupy_major(self) -> Optional[int]:
        m = re.match(r"(\d+)", self.cupy_version or "")
        return int(m.group(1)) if m else None


def cuda_major_of(distribution: Optional[str]) -> Optional[int]:
    """12 for "cupy-cuda12x", 13 for "cupy-cuda13x", None for a source build ("cupy")."""
    m = re.fullmatch(r"cupy-cuda(\d+)x?", (distribution or "").lower().replace("_", "-"))
    if not m:
        return None
    digits = m.group(1)
    return int(digits[:2]) if len(digits) > 2 else int(digits)  # "cupy-cuda114" (old names) -> 11


def package_for(library: str, cuda_major: Optional[int]) -> str:
    """The PyPI package of an NVIDIA ``library`` (nccl, nvrtc, cudnn) for CUDA ``cuda_major``.

    CUDA 13 dropped the ``-cuNN`` suffix for the toolkit's own libraries
    (``nvidia-cuda-nvrtc``) but kept it for NCCL and cuDNN (``nvidia-nccl-cu13``).
    """
    major = cuda_major or 12
    if library == "nvrtc":
        return "nvidia-cuda-nvrtc" if major >= 13 else f"nvidia-cuda-nvrtc-cu{major}"
    if library in ("nccl", "cudnn"):
        return f"nvidia-{library}-cu{major}"
    raise ValueError(f"no package known for {library!r}")


def _cupy_distribution() -> Optional[str]:
    try:
        from importlib.metadata import packages_distributions

        names = packages_distributions().get("cupy") or []
    except Exception:
        return None
    return names[0] if names else None


def _examine() -> CudaProbe:
    if importlib.util.find_spec("cupy") is None:
        return CudaProbe(problem=f"CuPy is not installed ({CUPY_HINT})")
    dist = _cupy_distribution()
    major = cuda_major_of(dist)
    try:
        with warnings.catch_warnings():  # CuPy warns about missing optional libraries on import
            warnings.simplefilter("ignore")
            import cupy
    except Exception as e:
        return CudaProbe(problem=f"CuPy does not import ({type(e).__name__}: {e})", cupy_package=dist, cuda_major=major)
    version = getattr(cupy, "__version__", None)
    if major is None:
        try:
            major = cupy.cuda.runtime.runtimeGetVersion() // 1000
        except Exception:
            pass
    fields = dict(cupy_version=version, cupy_package=dist, cuda_major=major, has_cudnn=_cudnn_loads())
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device, broken install
        return CudaProbe(problem=f"CuPy cannot use CUDA ({type(e).__name__}: {e})", **fields)
    if count < 1:
        return CudaProbe(problem="no CUDA device is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)", **fields)
    nccl_problem = _nccl_problem(major)
    return CudaProbe(
        problem=None,
        device_count=count,
        nccl_problem=nccl_problem,
        nccl_version=None if nccl_problem else _nccl_version(),
        **fields,
    )


def _cudnn_loads() -> bool:
    """CuPy <= 13 with a loadable cuDNN library (CuPy 14 has no ``cupy.cudnn``)."""
    if importlib.util.find_spec("cupy.cudnn") is None:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import cupy.cudnn  # noqa: F401
        return True
    except Exception:
        return False


def _nccl_problem(major) -> Optional[str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from cupy.cuda import nccl
    except Exception as e:
        return f"NCCL is not available through CuPy ({e}; pip install {package_for('nccl', major)})"
    if not getattr(nccl, "available", True):  # CuPy sets this instead of raising
        return f"CuPy cannot load NCCL (pip install {package_for('nccl', major)})"
    return None


def _nccl_version() -> Optional[int]:
    """NCCL's version code (22803 for 2.28.3), None where CuPy cannot say."""
    try:
        from cupy.cuda import nccl

        return int(nccl.get_version())
    except Exception:
        return None


def nccl_version_text(code: Optional[int]) -> str:
    """``22803`` -> ``"2.28.3"`` (NCCL >= 2.9 codes major*10000 + minor*100 + patch); "unknown" for None."""
    if code is None:
        return "unknown"
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


@functools.lru_cache(maxsize=None)
def _cached() -> CudaProbe:
    return _examine()


def probe() -> CudaProbe:
    """This process's CUDA situation (examined once, then cached)."""
    return _cached()


def training_device(choice: str, usable: bool) -> str:
    """``"gpu"`` or ``"cpu"`` for ``trainer.device`` (cpu | gpu | auto) where CUDA is
    ``usable`` or not: ``auto`` trains on the GPU when there is one. The one place
    ``auto`` is resolved (the validator, the communicator's ``auto`` and the device
    builder ask here)."""
    if choice == "auto":
        return "gpu" if usable else "cpu"
    return choice


def nccl_hint() -> str:
    """The install command for NCCL matching the CuPy installed (cu12 or cu13)."""
    return f"pip install {package_for('nccl', probe().cuda_major)}"


# --------------------------------------------------------------------------- cuDNN on CuPy 14

CUDNN_WARNING = r"cuDNN is not enabled"


def cudnn_note(info: Optional[CudaProbe] = None) -> Optional[str]:
    """A sentence for CuPy builds without cuDNN (CuPy 14), None when cuDNN is there or CUDA is not."""
    info = probe() if info is None else info
    if info.cupy_version is None or info.has_cudnn:
        return None
    major = info.cuda_major or 12
    cudnn = package_for("cudnn", major)
    effect = (
        "Chainer uses its own convolution and pooling kernels (slower), and compute_mode='cudnn_fast' "
        "and cuDNN dropout states fail"
    )
    if (info.cupy_major or 0) >= 14 or major >= 13:
        return (
            f"CuPy {info.cupy_version} ({info.cupy_package or 'CUDA ' + str(major)}) has no cuDNN (CuPy 14 "
            f"removed it; CuPy 13 for CUDA 13 ships none): {effect}. For cuDNN use CuPy 13 for CUDA 12 "
            f"with the cuDNN wheel: {CUDNN_INSTALL}"
        )
    return f"CuPy {info.cupy_version} cannot load cuDNN: {effect}. Install it: pip install {cudnn}"


_NOTED = []


def quiet_cudnn_warning(rank: int) -> None:
    """On a CuPy without cuDNN: one note on rank 0 instead of Chainer's warning on every rank.

    Filters only Chainer's "cuDNN is not enabled" UserWarning (by message and
    module); every other warning stays. Idempotent.
    """
    note = cudnn_note()
    if note is None or _NOTED:
        return
    _NOTED.append(True)
    warnings.filterwarnings("ignore", message=CUDNN_WARNING, category=UserWarning, module=r"chainer(\.|$)")
    if rank == 0:
        log.warning("%s", note)
