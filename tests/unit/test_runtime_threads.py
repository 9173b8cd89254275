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
