"""optimizer.autotune's candidate sets (mnframe/optimizers/autotune.py: candidates): small, the old
default first, only what the user left unset."""

from mnframe.optimizers.autotune import Candidate, candidates


def _c(name="two_dimensional", size=2, inter=1, overlap=None, cap=None, free=True, spare=True):
    return candidates(name, size, inter, overlap=overlap, bucket_cap_mb=cap, communicator_free=free, spare_core=spare)


def test_one_node_tries_overlap_and_two_bucket_sizes():
    assert _c() == [
        Candidate("two_dimensional", False),
        Candidate("two_dimensional", True, sized_buckets=4),
        Candidate("two_dimensional", True, sized_buckets=2),
    ]
    assert _c(size=2, inter=2) == _c()  # one rank per node: hierarchical would run the same steps


def test_several_ranks_per_node_across_nodes_also_try_hierarchical():
    got = _c(size=4, inter=2)
    assert [c.communicator for c in got] == ["two_dimensional"] * 3 + ["hierarchical"] * 2
    assert got[3:] == [Candidate("hierarchical", False), Candidate("hierarchical", True, sized_buckets=4)]
    assert len(_c(size=3, inter=2)) == 5  # uneven 2 + 1: decided from size and nodes, the same on every rank


def test_explicit_options_are_not_tried_otherwise():
    assert _c(size=4, inter=2, free=False) == _c()  # a named communicator
    assert _c(overlap=True) == [Candidate("two_dimensional", True, sized_buckets=4)]
    assert _c(overlap=False, size=4, inter=2) == [Candidate("two_dimensional", False), Candidate("hierarchical", False)]
    assert _c(cap=0.5) == [Candidate("two_dimensional", False), Candidate("two_dimensional", True, bucket_cap_mb=0.5)]
    # a communicator named by the user that sums through MPI_Allreduce: its order may depend on the
    # message size, so buckets are not tried either (nothing left: no trial)
    assert _c(name="flat", size=4, inter=2) == [Candidate("flat", False)]
    assert len(_c(name="single_node")) == 3


def test_without_a_spare_core_overlap_is_not_tried():
    assert _c(spare=False) == [Candidate("two_dimensional", False)]  # one node: nothing left, no trial
    assert _c(size=4, inter=2, spare=False) == [Candidate("two_dimensional", False), Candidate("hierarchical", False)]
    assert _c(overlap=True, spare=False) == [Candidate("two_dimensional", True, sized_buckets=4)]  # set: kept
