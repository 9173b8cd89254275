"""BLAS/OpenMP thread pools per rank (mnframe.runtime.threads)."""

import pytest

from mnframe.runtime import threads as T

ALL = frozenset(range(8))


@pytest.mark.parametrize("ranks", [1, 2, 3, 8, 16])
def test_unbound_ranks_split_the_node(ranks):
    assert T.fair_share(ALL, [ALL] * ranks) == max(1, 8 // ranks)


def test_bound_ranks_keep_their_own_cores():
    mine, other = frozenset({0, 1, 2}), frozenset({3, 4, 5})
    assert T.fair_share(mine, [mine, other]) == 3


@pytest.mark.parametrize("var", T.ENV_VARS)
def test_auto_respects_a_users_variable(var):
    assert T.plan("auto", True, ALL, [ALL, ALL], {var: "3"}) is None


def test_auto_only_on_cpus_and_explicit_values_always():
    assert T.plan("auto", False, ALL, [ALL, ALL], {}) is None
    assert T.plan("auto", True, ALL, [ALL, ALL], {}) == 4
    assert T.plan(3, False, ALL, [ALL], {"OMP_NUM_THREADS": "1"}) == 3
    assert T.plan("keep", True, ALL, [ALL], {}) is None


class _OneRank:
    inter_rank = 0

    def allgather_obj(self, obj):
        return [obj]


def test_configure_limits_the_blas_pool():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(limits=None):  # restore the pools afterwards
        assert T.configure(1, _OneRank(), on_cpu=True, env={}) == 1
        blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
        assert blas and all(p["num_threads"] == 1 for p in blas)
        assert T.configure("auto", _OneRank(), on_cpu=True, env={"OMP_NUM_THREADS": "2"}) is None


class _NodesOfOneMachine:
    """Ranks on ``nodes`` node names (inter_rank), ``same_kernel``: all on this machine (the simulated cluster)."""

    def __init__(self, nodes, same_kernel):
        self.inter_rank, self.nodes, self.same_kernel = 0, nodes, same_kernel

    def allgather_obj(self, obj):
        key, cpus = obj
        return [(key if self.same_kernel or n == 0 else f"boot:other{n}", cpus) for n in range(self.nodes)]


def test_auto_counts_every_rank_on_the_same_kernel_not_only_the_node_name():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    mine = T.usable_cpus()
    assert T.machine_key(3).startswith("boot:") and T.machine_key(3) == T.machine_key(0)
    with threadpoolctl.threadpool_limits(limits=None):
        # 2 x len(mine) one-rank nodes on this kernel share its CPUs: 1 thread each
        assert T.configure("auto", _NodesOfOneMachine(2 * len(mine), True), on_cpu=True, env={}) == 1
        # the same node names on machines of their own: each rank keeps its CPUs
        assert T.configure("auto", _NodesOfOneMachine(2 * len(mine), False), on_cpu=True, env={}) == len(mine)


def test_spare_core_counts_the_ranks_of_each_machine():
    """optimizer.autotune tries overlap only where every rank has a core for its thread."""
    assert T.has_spare_core(4, 2) and not T.has_spare_core(3, 2) and not T.has_spare_core(2, 2)
    cpus = len(T.usable_cpus())
    # ranks on machines of their own: one rank per machine has a spare core where the machine has 2 CPUs
    spare, words = T.spare_core_everywhere(_NodesOfOneMachine(3, False))
    assert spare == (cpus >= 2) and words == f"1 rank(s) on {cpus} CPUs of one machine"
    # as many one-rank nodes on this kernel as it has CPUs (the simulated cluster): none to spare
    spare, words = T.spare_core_everywhere(_NodesOfOneMachine(cpus, True))
    assert not spare and words == f"{cpus} rank(s) on {cpus} CPUs of one machine"
