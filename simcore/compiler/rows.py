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
    rows = np.asarray(rows, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (rows * _multipliers(rows.shape[1])).sum(axis=1, dtype=np.uint64)
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return h


def row_ids(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id per row, index of the first row of each id); ids ordered by hash."""
    if len(rows) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    h = row_hash(rows)
    _, first, ids = np.unique(h, return_index=True, return_inverse=True)
    ids = ids.ravel()
    if not np.array_equal(np.asarray(rows)[first][ids], np.asarray(rows)):
        void = np.ascontiguousarray(rows, dtype=np.int64)
        void = void.view(np.dtype((np.void, 8 * void.shape[1]))).ravel()
        _, first, ids = np.unique(void, return_index=True, return_inverse=True)
        ids = ids.ravel()
    return ids.astype(np.int64), first
