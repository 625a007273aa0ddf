"""Tile-level dependencies from the GM regions each leaf task reads and writes.

A reader depends on the latest earlier writer of every distinct box it
overlaps (read after write); a writer likewise on earlier writers (write after
write).  Aligned producer and consumer tiles therefore give one-to-one edges and
misaligned ones many-to-many, as on the chip.  Split-K partial sums write one
box several times under different tags: a reader waits for all of them, while the
partial writes do not wait for each other.
Vectorised per buffer: candidates come from a window on the first axis, so the
cost follows the number of overlapping boxes, not the square of the tasks.
"""
from __future__ import annotations

import numpy as np

from .rows import row_ids


def _box_ids(buf, lo, hi, tag) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (buffer, box, tag) rows -> ids, and the first row of each id."""
    return row_ids(np.concatenate([buf[:, None], lo, hi, tag[:, None]], axis=1))


def _expand_windows(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query index, position) pairs for every position in [start, stop) of every query."""
    counts = np.maximum(stop - start, 0)
    q = np.repeat(np.arange(start.size), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return q, np.repeat(start, counts) + offsets


def region_edges(task, buf, lo, hi, write, tag, n_tasks: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges (src, dst), sorted, for accesses of tasks numbered in program order."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    w = np.flatnonzero(write)
    if w.size == 0:
        return empty
    box_id, first = _box_ids(buf[w], lo[w], hi[w], tag[w])
    box_buf, box_lo, box_hi = buf[w][first], lo[w][first], hi[w][first]
    box_tag = tag[w][first]
    # writes of each box ordered by task, keyed box * n + task for searchsorted
    keys = np.sort(box_id.astype(np.int64) * (n_tasks + 1) + task[w])
    src, dst = [], []
    for b in np.unique(buf):
        boxes = np.flatnonzero(box_buf == b)
        if boxes.size == 0:
            continue
        order = boxes[np.argsort(box_lo[boxes, 0], kind="stable")]
        lo0 = box_lo[order, 0]
        reach = int((box_hi[order, 0] - box_lo[order, 0]).max())
        queries = np.flatnonzero(buf == b)
        qlo, qhi = lo[queries], hi[queries]
        start = np.searchsorted(lo0, qlo[:, 0] - reach, side="right")
        stop = np.searchsorted(lo0, qhi[:, 0], side="left")
        qi, pos = _expand_windows(start, stop)
        cand = order[pos]
        hit = np.all((box_lo[cand] < qhi[qi]) & (qlo[qi] < box_hi[cand]), axis=1)
        # partial sums accumulate in any order: one chunk's write never waits for another's
        both_partial = write[queries][qi] & (tag[queries][qi] > 0) & (box_tag[cand] > 0)
        hit &= ~both_partial
        qi, cand = qi[hit], cand[hit]
        qtask = task[queries][qi]
        k = np.searchsorted(keys, cand * (n_tasks + 1) + qtask, side="left") - 1
        ok = k >= 0
        found = keys[np.maximum(k, 0)]
        ok &= found // (n_tasks + 1) == cand
        pred = found % (n_tasks + 1)
        ok &= pred != qtask
        src.append(pred[ok])
        dst.append(qtask[ok])
    if not src:
        return empty
    s, d = np.concatenate(src), np.concatenate(dst)
    pairs = np.unique(s * (n_tasks + 1) + d)
    return pairs // (n_tasks + 1), pairs % (n_tasks + 1)
