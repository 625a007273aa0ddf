"""Row ids: the sort-based ids and the shortcut for rows that all differ name the same
partition of the rows as the exact (void-bytes) grouping."""
import numpy as np

from simcore.compiler.rows import distinct_row_ids, row_ids


def _exact(rows):
    void = np.ascontiguousarray(rows, dtype=np.int64)
    void = void.view(np.dtype((np.void, 8 * void.shape[1]))).ravel()
    _, first, ids = np.unique(void, return_index=True, return_inverse=True)
    return ids.ravel(), first


def _same_partition(a, b):
    pairs = np.unique(a * (int(b.max()) + 1) + b).size
    return pairs == np.unique(a).size == np.unique(b).size


def test_ids_group_equal_rows_and_first_is_the_earliest_row():
    rng = np.random.default_rng(5)
    for width in (1, 4, 9):
        rows = rng.integers(-3, 4, (5000, width))
        ids, first = row_ids(rows)
        want_ids, want_first = _exact(rows)
        assert _same_partition(ids, want_ids)
        assert np.array_equal(np.sort(first), np.sort(want_first))
        assert np.array_equal(rows[first][ids], rows)
        assert np.all(first[ids] <= np.arange(len(rows)))        # the earliest of its rows


def test_distinct_rows_are_their_own_ids_and_repeats_fall_back():
    rows = np.stack([np.arange(1000), np.arange(1000) * 64, np.arange(1000) * 64 + 64], 1)
    ids, first = distinct_row_ids(rows)
    assert np.array_equal(ids, np.arange(1000)) and np.array_equal(first, np.arange(1000))
    twice = np.concatenate([rows, rows[::-1]])
    ids, first = distinct_row_ids(twice)
    assert np.unique(ids).size == 1000 and np.array_equal(twice[first][ids], twice)
