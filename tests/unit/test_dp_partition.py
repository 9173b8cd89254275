"""Partition rules, the chunk schedule and the evaluator's weighting, without MPI."""

import numpy as np
import pytest

from mnframe.datasets import partition, transport
from mnframe.extensions.evaluator import weighted_mean


@pytest.mark.parametrize("n", [0, 1, 2, 5, 10, 11, 100])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_exact_partition_tiles_everything_once(n, size):
    ranges = partition.shard_ranges(n, size, force_equal_length=False)
    assert len(ranges) == size and ranges[0][0] == 0 and ranges[-1][1] == n
    for (_, e), (b, _) in zip(ranges, ranges[1:]):
        assert e == b
    lengths = [e - b for b, e in ranges]
    assert max(lengths) - min(lengths) <= 1 and lengths == sorted(lengths, reverse=True)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 10, 11, 100])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_equal_length_partition_covers_everything(n, size):
    ranges = partition.shard_ranges(n, size, force_equal_length=True)
    assert {e - b for b, e in ranges} == {-(-n // size)}
    assert all(0 <= b <= e <= n for b, e in ranges)
    covered = set()
    for b, e in ranges:
        covered.update(range(b, e))
    assert covered == set(range(n))


def test_permutation_is_seeded_like_chainermn():
    np.testing.assert_array_equal(partition.permutation(10, True, 7), np.random.RandomState(7).permutation(10))
    assert partition.permutation(10, False, 7) is None


@pytest.mark.parametrize("n_rows,row_bytes,chunk", [(10, 12, 40), (3, 100, 7), (5, 4, 1000), (0, 4, 8), (4, 0, 8)])
def test_pieces_cover_the_bytes_in_order_within_the_limit(n_rows, row_bytes, chunk):
    pos, rows = 0, 0
    for r0, r1, parts in transport.pieces(n_rows, row_bytes, chunk):
        assert r0 == rows and r1 > r0
        rows = r1
        for off, count in parts:
            assert off == pos and 0 < count <= chunk
            pos += count
    assert pos == n_rows * row_bytes


def test_weighted_mean_counts_examples_not_ranks():
    merged = weighted_mean([(1, {"loss": 1.0}), (3, {"loss": 5.0, "acc": 0.5}), (0, {})])
    assert merged["loss"] == pytest.approx((1 * 1 + 3 * 5) / 4)
    assert merged["acc"] == pytest.approx(0.5)


def test_weighted_mean_falls_back_to_equal_weights_when_nothing_was_counted():
    merged = weighted_mean([(0, {"x": 1.0}), (0, {"x": 3.0})])
    assert merged["x"] == pytest.approx(2.0)
