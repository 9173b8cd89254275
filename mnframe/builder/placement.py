"""Step 2: the device: CPU, or GPU ``intra_rank % GPU count`` of the rank's host.

More ranks on a host than GPUs is allowed: ranks then share GPUs, which the
communicators that move GPU data through host memory (non_cuda_aware, flat,
naive) handle. NCCL refuses two ranks of one NCCL group on one GPU, so a
communicator whose NCCL group would hold such ranks (pure_nccl: all ranks;
hierarchical, two_dimensional, single_node: the ranks of a node) is refused
at start-up, on every rank, with the fix. Rank 0 logs what was chosen.
"""

from __future__ import annotations

import logging
import socket

log = logging.getLogger("mnframe.device")


def has_cuda() -> bool:
    """Whether CuPy is importable and sees at least one GPU (never raises)."""
    from mnframe import cuda_env

    return cuda_env.probe().usable


def select_device(choice: str, comm):
    """A chainer device for ``trainer.device`` (cpu | gpu | auto) on the rank of ``comm``.

    ``comm``: the world communicator (an int is taken as the rank's
    ``intra_rank``, with no check of shared GPUs).
    """
    import chainer

    from mnframe import cuda_env

    info = cuda_env.probe()
    if cuda_env.training_device(choice, info.usable) == "cpu":
        device = chainer.get_device("@numpy")
        device.use()
        return device
    if not info.usable:
        from mnframe.runtime.errors import ConfigError

        raise ConfigError(f"trainer.device={choice}: {info.problem}")
    if isinstance(comm, int):
        gpu, rank = comm % info.device_count, 0
    else:
        gpu, line = gpu_plan(comm, info.device_count)
        rank = comm.rank
        if rank == 0:
            log.info("%s", line)
    cuda_env.quiet_cudnn_warning(rank)
    device = chainer.get_device(f"@cupy:{gpu}")
    device.use()
    return device


def nccl_scope(comm):
    """Which ranks one NCCL group of ``comm``'s GPU strategy spans: "world", "node" or None (no NCCL)."""
    if getattr(comm, "double_buffering", None) == "nccl":
        return "world"
    path = getattr(type(comm), "reducers", {}).get("cupy")
    if path is None:
        return None
    from mnframe._internal.import_path import resolve

    return getattr(resolve(path) if isinstance(path, str) else path, "nccl_scope", None)


def gpu_plan(comm, device_count: int):
    """(this rank's GPU, rank 0's log line); collective over ``comm``.

    Raises ConfigError on every rank when the communicator would run NCCL over
    ranks that share a GPU.
    """
    gpu = comm.intra_rank % device_count
    seen = comm.mpi_comm.allgather((socket.gethostname(), gpu, comm.inter_rank))
    owners = {}
    for rank, (host, g, node) in enumerate(seen):
        owners.setdefault((host, g), []).append((rank, node))
    shared = {key: ranks for key, ranks in owners.items() if len(ranks) > 1}
    name = type(comm).__name__
    if not shared:
        return gpu, f"device: one GPU per rank (GPU intra_rank of {device_count} per host), communicator {name}"
    scope = nccl_scope(comm)
    clashes = []
    for (host, g), ranks in shared.items():
        nodes = [node for _, node in ranks]
        if scope == "world" or (scope == "node" and len(set(nodes)) < len(nodes)):
            clashes.append(f"ranks {[r for r, _ in ranks]} on GPU {g} of {host}")
    if clashes:
        from mnframe.runtime.errors import ConfigError

        raise ConfigError(
            f"{name} runs NCCL over ranks that share a GPU ({'; '.join(clashes)}), and NCCL needs one GPU per "
            f"rank. Set communicator=non_cuda_aware (GPU data averaged through host memory), or start at most "
            f"{device_count} rank(s) per host (one per visible GPU)"
        )
    most = max(len(r) for r in shared.values())
    return gpu, (
        f"device: ranks share GPUs (up to {most} per GPU, GPU = intra_rank % {device_count}); "
        f"communicator {name} moves no GPU data through NCCL across them"
    )
