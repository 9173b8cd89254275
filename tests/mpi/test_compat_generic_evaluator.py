"""GenericMultiNodeEvaluator's contract, as ChainerMN's own test uses it.

``calc_local`` gets one converted batch (its arrays as positional arguments)
and returns any non-None value; ``aggregate`` runs once, on the root only, with
one flat list of every rank's results, batch by batch: the first batch of rank
0, of rank 1, ..., then the second batches, skipping ranks whose data ran out.
Every other rank's ``__call__`` returns None. Expected values come from rank and
size: rank r evaluates examples r, r + size, r + 2 size, ...
"""

import math

import chainer
import numpy as np
import pytest

import mnframe as chainermn
from mnframe.extensions import GenericMultiNodeEvaluator

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120

# (dataset length, batch size): unequal batch counts over more than one gather round; one batch per rank
CASES = [(97, 2), (97, 7), (9, 77)]


class SumOfInputs(chainer.Chain):
    def forward(self, a, b, c):
        return a + b + c


def _rank_examples(length, rank, size):
    return list(range(rank, length, size))


def _rank_batches(length, batch, rank, size):
    ids = _rank_examples(length, rank, size)
    return [ids[i : i + batch] for i in range(0, len(ids), batch)]


def _evaluator(cls, comm, length, batch, **kw):
    ids = _rank_examples(length, comm.rank, comm.size)
    data = chainer.datasets.TupleDataset(np.array(ids), np.array(ids), np.array(ids))
    it = chainer.iterators.SerialIterator(data, batch, shuffle=False, repeat=False)
    return cls(comm, it, SumOfInputs(), **kw)


@pytest.fixture(scope="module")
def comm():
    return chainermn.create_communicator("naive")


@pytest.mark.parametrize("length,batch", CASES)
def test_default_aggregate_is_every_result_batch_by_batch(comm, length, batch):
    root = comm.size - 1
    evaluator = _evaluator(GenericMultiNodeEvaluator, comm, length, batch, root=root)
    for _ in range(2):  # the iterator is reset: a second call gives the same
        results = evaluator(None)
        if comm.rank != root:
            assert results is None
            continue
        per_rank = [_rank_batches(length, batch, r, comm.size) for r in range(comm.size)]
        expected = [
            [3 * i for i in per_rank[r][k]]
            for k in range(max(len(b) for b in per_rank))
            for r in range(comm.size)
            if k < len(per_rank[r])
        ]
        assert isinstance(results, list) and len(results) == len(expected)
        for got, want in zip(results, expected):
            assert isinstance(got, np.ndarray)  # what the model returned (a + b + c of arrays), as it was
            np.testing.assert_array_equal(got, np.array(want))


class ConstantEvaluator(GenericMultiNodeEvaluator):
    """calc_local returns a plain number; aggregate sees every rank's numbers."""

    def calc_local(self, *args, **kwargs):
        assert len(args) == 3 and not kwargs
        return 2

    def aggregate(self, results):
        assert all(r == 2 for r in results)
        return sum(results)


@pytest.mark.parametrize("length,batch", CASES)
def test_custom_calc_local_and_aggregate(comm, length, batch):
    result = _evaluator(ConstantEvaluator, comm, length, batch)(None)
    batches = sum(math.ceil(len(_rank_examples(length, r, comm.size)) / batch) for r in range(comm.size))
    if comm.rank == 0:
        assert result == 2 * batches
    else:
        assert result is None


def test_progress_hook_sees_the_root_batches_only(comm):
    seen = []
    evaluator = _evaluator(GenericMultiNodeEvaluator, comm, 20, 3, progress_hook=seen.append)
    evaluator(None)
    if comm.rank == 0:
        assert sum(seen, []) == [tuple([i] * 3) for i in _rank_examples(20, 0, comm.size)]
    else:
        assert seen == []
