"""The GM boxes leaf tasks read and write: dependencies, loads and L2 traffic come from them."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from .columns import mapped, shifted
from .values import MAX_RANK


@dataclass(frozen=True)
class GmBuffer:
    name: str
    shape: tuple[int, ...]      # the whole buffer, for its flat byte layout
    elem: int                   # bytes per element
    storage: str = ""           # the tensor whose bytes these are: an inplace reshape is
                                # another geometry of its base's bytes ("": its own)
    format: str = "ND"          # NZ: 16-row fractals of 32 bytes, column block by column block
    dtype: str = ""             # the tensor's dtype ("": a workspace the compiler made)

    @property
    def base(self) -> str:
        return self.storage or self.name

    @property
    def bytes(self) -> int:
        return int(np.prod(self.shape)) * self.elem


@dataclass(frozen=True)
class Accesses:
    """One row per (leaf task, GM box) read or written."""
    buffers: tuple[GmBuffer, ...]
    task: np.ndarray
    buffer: np.ndarray          # index into buffers
    lo: np.ndarray              # N x MAX_RANK box corners (unused dims 0 .. 1)
    hi: np.ndarray
    write: np.ndarray
    tag: np.ndarray             # a split-K chunk writing partial sums (0: a plain access)
    bytes: np.ndarray
    burst: np.ndarray           # bytes of one contiguous run of the box
    bypass: np.ndarray          # set_cache_policy bypass
    operand: np.ndarray         # reads: the op input it feeds; writes: -1
    pieces: np.ndarray          # copies the box is read in (a cube operand's L1 blocks), >= 1

    @classmethod
    def empty(cls) -> "Accesses":
        z = np.zeros(0, np.int64)
        box = np.zeros((0, MAX_RANK), np.int64)
        return cls((), z, z, box, box, z.astype(bool), z, z, z, z.astype(bool), z, z)

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        return _ACCESS_COLUMNS

    @property
    def size(self) -> int:
        return int(self.task.size)

    def take(self, rows: np.ndarray) -> "Accesses":
        return replace(self, **{k: getattr(self, k)[rows] for k in self.columns()})

    def moved(self, task: np.ndarray) -> "Accesses":
        """The same accesses, task ``i`` renumbered ``task[i]``."""
        return replace(self, task=task[self.task] if self.size else self.task)

    @classmethod
    def concat(cls, parts: list["Accesses"], offsets=None) -> "Accesses":
        """Rows of every part, tasks shifted by ``offsets``; buffers numbered by first use."""
        if not parts:
            return cls.empty()
        offsets = np.zeros(len(parts), np.int64) if offsets is None else offsets
        ids: dict[str, int] = {}
        table: list[GmBuffer] = []
        maps = []
        for p in parts:
            for b in p.buffers:
                if b.name not in ids:
                    ids[b.name] = len(table)
                    table.append(b)
            maps.append(np.asarray([ids[b.name] for b in p.buffers] or [0], np.int64))
        cols = {k: np.concatenate([getattr(p, k) for p in parts]) for k in cls.columns()
                if k not in ("task", "buffer")}
        return cls(tuple(table), shifted([p.task for p in parts], offsets),
                   mapped([p.buffer for p in parts], maps), **cols)


def used_rank(buffers, lo: np.ndarray, hi: np.ndarray) -> int:
    """How many leading box columns matter: the rank of the largest buffer when every
    box has the unused dims after it as 0 .. 1 (each a dim of size 1 covered whole),
    else every column."""
    rank = min(max([len(b.shape) for b in buffers] + [1]), lo.shape[1])
    if rank < lo.shape[1] and not ((lo[:, rank:] == 0).all() and (hi[:, rank:] == 1).all()):
        return lo.shape[1]
    return rank


# dataclasses.fields is slow enough to show in the tiler's per-group work: compute once
_ACCESS_COLUMNS = tuple(f.name for f in fields(Accesses) if f.name != "buffers")
