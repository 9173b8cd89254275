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
    device = chainer.get_device(f"@cupy:{intra_rank}" if use_gpu else "@numpy")
    device.use()
    return device
