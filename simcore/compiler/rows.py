"""Fast ids for rows of small integer arrays (boxes, access keys).

Sorting rows as void bytes is slow; instead each row is hashed to one int64 by
a fixed set of odd multipliers (deterministic, no per-process salt) and the
hashes are ranked.  With 64-bit hashes a collision among a few million rows
has a probability below 1e-6; ``row_ids`` checks for one and falls back to the
exact method if it ever happens.
"""
from __future__ import annotations

import numpy as np

def _multipliers(width: int) -> np.ndarray:
    """Odd 64-bit multipliers, one per column, the same in every process."""
    golden = 0x9E3779B97F4A7C15
    return np.array([(golden * (2 * i + 1) + (i << 7)) % 2**64 | 1 for i in range(width)],
                    dtype=np.uint64)


def row_hash(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows)
    mult = _multipliers(rows.shape[1])
    # column by column: no N x width temporaries
    h = np.zeros(len(rows), np.uint64)
    with np.errstate(over="ignore"):
        for c in range(rows.shape[1]):
            col = rows[:, c]
            col = col.view(np.uint64) if col.dtype == np.int64 else \
                col.astype(np.int64).astype(np.uint64)
            h += col * mult[c]
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return h


def row_ids(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id per row, index of the first row of each id); ids ordered by hash."""
    if len(rows) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.asarray(rows)
    h = row_hash(rows)
    # np.unique's return_index needs a stable sort; an unstable one and the least
    # row of each run of equal hashes give the same ids and first rows, faster
    order = np.argsort(h)
    sorted_h = h[order]
    head = np.empty(h.size, bool)
    head[0] = True
    np.not_equal(sorted_h[1:], sorted_h[:-1], out=head[1:])
    del sorted_h
    starts = np.flatnonzero(head)
    first = np.minimum.reduceat(order, starts)
    ids = np.empty(h.size, np.int64)
    ids[order] = np.cumsum(head) - 1
    rep = first[ids]
    if not all(np.array_equal(rows[rep, c], rows[:, c]) for c in range(rows.shape[1])):
        void = np.ascontiguousarray(rows, dtype=np.int64)
        void = void.view(np.dtype((np.void, 8 * void.shape[1]))).ravel()
        _, first, ids = np.unique(void, return_index=True, return_inverse=True)
        ids = ids.ravel()
    return ids.astype(np.int64), first


def distinct_row_ids(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``row_ids`` for callers to whom the numbering of the ids does not matter: when
    every row hashes apart (then every row differs, the usual case for the boxes of a
    long run of tiles), each row is its own id in row order, found with one plain sort;
    otherwise ``row_ids``."""
    if len(rows) > 1:
        h = np.sort(row_hash(rows))
        if not np.any(h[1:] == h[:-1]):
            every = np.arange(len(rows))
            return every, every
    return row_ids(rows)
