"""Tile-level dependencies from the GM regions each leaf task reads and writes.

A reader depends on every earlier writer of an overlapping region (read after
write); a writer on every earlier writer of an overlapping region (write after
write).  Aligned producer and consumer tiles therefore give one-to-one edges and
misaligned ones many-to-many, as on the chip.
"""
from __future__ import annotations

import numpy as np

from .tiling import Box


class _Writes:
    """The writes of one GM buffer, with numpy copies for fast overlap tests."""

    def __init__(self, rank: int):
        self.tasks: list[int] = []
        self.lo: list[tuple[int, ...]] = []
        self.hi: list[tuple[int, ...]] = []
        self._arrays = None

    def add(self, task: int, box: Box) -> None:
        self.tasks.append(task)
        self.lo.append(box[0])
        self.hi.append(box[1])
        self._arrays = None

    def overlapping(self, box: Box) -> np.ndarray:
        if not self.tasks:
            return np.empty(0, dtype=np.int64)
        if self._arrays is None:
            self._arrays = (np.asarray(self.tasks, dtype=np.int64), np.asarray(self.lo),
                            np.asarray(self.hi))
        tasks, lo, hi = self._arrays
        lo_q, hi_q = np.asarray(box[0]), np.asarray(box[1])
        hit = np.all((lo < hi_q) & (lo_q < hi), axis=1)
        return tasks[hit]


def region_edges(reads: list[list[tuple[str, Box]]],
                 writes: list[list[tuple[str, Box]]]) -> tuple[np.ndarray, np.ndarray]:
    """Edges (src, dst) for tasks given in program order."""
    index: dict[str, _Writes] = {}
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    for task, (task_reads, task_writes) in enumerate(zip(reads, writes)):
        preds = [index[buf].overlapping(box) for buf, box in task_reads + task_writes
                 if buf in index]
        if preds:
            p = np.unique(np.concatenate(preds))
            p = p[p != task]
            src.append(p)
            dst.append(np.full(p.size, task, dtype=np.int64))
        for buf, box in task_writes:
            index.setdefault(buf, _Writes(len(box[0]))).add(task, box)
    if not src:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    s, d = np.concatenate(src), np.concatenate(dst)
    order = np.lexsort((d, s))
    return s[order], d[order]
