"""bench_wire_nodes: its worker on 2 fake one-rank nodes (no cluster): every contender runs, and the
pipelined exchange is bitwise MPI_Allreduce's sum at 2 nodes, with one chunk and with many."""

import json
from pathlib import Path

from mnframe.testing import run_mpi

ROOT = Path(__file__).resolve().parents[1]


def test_worker_on_two_fake_nodes():
    argv = [str(ROOT / "bench" / "bench_wire_nodes.py"), "--worker", "--repeat", "1", "--gemm", "64"]
    argv += ["--chunks", "65536", str(2 << 20)]
    result = run_mpi(argv, n=2, timeout=180, cwd=str(ROOT), env={"MNFRAME_FAKE_NODE_SIZE": "1"})
    assert not result.timed_out, result.output[-4000:]
    assert result.returncode == 0, result.output[-4000:]
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])
    assert out["size"] == 2 and out["bad"] == []
    labels = set(out["results"])
    assert {"exchange, 64 KiB chunks", "exchange, 2048 KiB chunks", "MPI.Allreduce"} <= labels
    assert {"MPI.Allreduce per parameter", "Isend/Irecv whole + Waitall", "2dim allreduce_grad"} <= labels
    assert all(t > 0 for t in out["results"].values())
