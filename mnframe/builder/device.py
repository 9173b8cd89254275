"""Device choice: CPU, or the GPU numbered by the rank's ``intra_rank``."""
from __future__ import annotations


def has_cuda() -> bool:
    """Whether CuPy is importable and sees at least one GPU (never raises)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def select_device(choice: str, intra_rank: int):
    """A chainer device for ``trainer.device`` (cpu | gpu | auto)."""
    import chainer

    use_gpu = choice == "gpu" or (choice == "auto" and has_cuda())
    if use_gpu:
        _check_gpu_for(intra_rank)
    device = chainer.get_device(f"@cupy:{intra_rank}" if use_gpu else "@numpy")
    device.use()
    return device


def _check_gpu_for(intra_rank: int) -> None:
    """Each rank trains on GPU ``intra_rank``: there must be one for every rank on the node."""
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if intra_rank >= count:
        raise RuntimeError(
            f"rank {intra_rank} of this node needs GPU {intra_rank}, but only {count} GPU(s) are visible: "
            f"start at most {count} rank(s) per node (mpiexec -n / --ppn), or check CUDA_VISIBLE_DEVICES")
