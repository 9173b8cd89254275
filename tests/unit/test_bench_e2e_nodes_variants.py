"""bench_e2e_nodes: each variant's overrides replace the workload's own choice of the same group,
and the exact options the default is judged against leave out the MPI_Allreduce communicators;
the probe records each side's BLAS pool."""

import pytest

from bench import bench_e2e_nodes as b
from bench.bench_e2e import COMMANDS, FULL


def _argv(variant):
    argv, _ = COMMANDS["mnist"](FULL["mnist"], "/tmp/run")
    return [str(a) for a in b._with(argv, b.VARIANTS[variant])]


def test_diagnostic_variants_compose():
    flat = _argv("flat")
    assert "communicator=flat" in flat and "communicator=two_dimensional" not in flat
    assert "optimizer.autotune=false" in flat
    threads = _argv("base+threads1")
    assert "communicator=two_dimensional" in threads and "trainer.threads=1" in threads
    assert "communicator=naive" in _argv("naive")


def test_exact_options_are_the_rank_order_communicators_only():
    assert not {"flat", "naive", "base+threads1"} & set(b.EXACT)
    assert set(b.EXACT) <= set(b.VARIANTS)


def test_the_probe_records_the_blas_pool():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from bench.peer import probe

    with threadpoolctl.threadpool_limits(limits=1):
        assert probe.Probe(warmup=0).result()["blas_threads"] == 1
