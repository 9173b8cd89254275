"""Bytes per step on the wire: float32 averaging vs compression=powersgd, for the mnist MLP.

Run:  .venv/bin/mpiexec -n 2 .venv/bin/python bench/bench_powersgd_bytes.py [--units 1000] [--rank 4]
(one rank works too: the counts are what the allreduces are handed, computed there as well).

No timing (the machine is shared): it counts. For the mnist recipe's MLP (28x28 inputs, ``--units``
hidden units, 10 classes) it prints, per step and rank, the elements and bytes handed to the
allreduce with float32 gradients, with ``allreduce_grad_dtype=float16`` and with PowerSGD (P and Q
of each compressed matrix, the rest whole), computed from the shapes
(``powersgd.wire_elements``) and counted by the communicator while it averages
(``comm.powersgd.last``), plus a ring allreduce's bytes sent per rank (2 (n-1)/n of the payload).
Exit status 1 when PowerSGD's bytes exceed 1/20 of float32's or the two counts disagree.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import mnframe  # noqa: E402  (applies the NumPy compatibility shim before chainer)
from mnframe.communicators import powersgd  # noqa: E402
from mnframe.recipes.mnist.model import MLP  # noqa: E402

TARGET = 20  # PowerSGD's bytes at most 1/TARGET of float32's (issue 40)


def counted_bytes(model, rank, wire, steps=3):
    """Bytes the communicator hands to its allreduces in one compressed step (counted)."""
    comm = mnframe.create_communicator(
        "flat", allreduce_grad_dtype=wire, compression="powersgd", powersgd_rank=rank, powersgd_start_iter=0
    )
    rs = np.random.RandomState(comm.rank)
    for _ in range(steps):
        for _, p in model.namedparams():
            p.grad = rs.standard_normal(p.shape).astype(np.float32)
        comm.multi_node_mean_grad(model)
    last, size, me = dict(comm.powersgd.last), comm.size, comm.rank
    comm.finalize()
    return last, size, me


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--rank", type=int, default=powersgd.DEFAULT_RANK)
    args = parser.parse_args()
    model = MLP(n_units=args.units)
    model(np.zeros((1, 784), np.float32))  # materialise the lazy first layer
    shapes = [p.shape for _, p in sorted(model.namedparams())]
    sent, full = powersgd.wire_elements(shapes, args.rank)
    last, size, me = counted_bytes(model, args.rank, None)
    last16, _, _ = counted_bytes(model, args.rank, "float16")
    ring = 2 * (size - 1) / size if size > 1 else 0.0
    rows = [
        ("float32", full, 4 * full),
        ("float16 wire", full, 2 * full),
        (f"powersgd rank {args.rank}", sent, 4 * sent),
        (f"powersgd rank {args.rank} + float16 wire", sent, 2 * sent),
    ]
    if me != 0:
        return 0
    print(f"mnist MLP ({args.units} units), shapes {shapes}, {size} rank(s)")
    print(f"{'averaging':<34} {'elements':>10} {'bytes/step':>12} {'ring bytes/rank':>16} {'vs float32':>10}")
    for label, elements, nbytes in rows:
        print(f"{label:<34} {elements:>10} {nbytes:>12} {int(nbytes * ring):>16} {nbytes / (4 * full):>10.4f}")
    print(f"counted in the communicator: powersgd {last['bytes']} bytes, with float16 wire {last16['bytes']} bytes")
    ok = last["bytes"] == 4 * sent and last16["bytes"] == 2 * sent and 4 * sent * TARGET <= 4 * full
    print(
        f"powersgd / float32 = 1/{full / sent:.1f} (target: at most 1/{TARGET}): {'ok' if ok else 'NOT MET'}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
