"""What a leaf task asks of each pipe, in units no chip defines: bytes, fractals, tiles.

The compiler says what every leaf task does; the machine (simcore/machine/costs.py)
says what that costs on a given chip, so a compiled Program runs on any chip with
the same mapping limits (limits.py).
Vector and Cube work is kept per op kind and per input dtype, because their rates
depend on it; the other pipes need only per-task totals.  An op tile counts by the
fraction of it that holds valid data (a tile past a view's ``valid_shape`` does
nothing), and that fraction scales its fixed cost as well as its bytes: ``tiles``
columns hold those fractions summed.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np


def _key_table(tables: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[np.ndarray]]:
    """The union of several key tables (first come first numbered) and each one's map."""
    ids: dict[str, int] = {}
    maps = [np.asarray([ids.setdefault(k, len(ids)) for k in t] or [0], np.int64)
            for t in tables]
    return tuple(ids), maps


@dataclass(frozen=True)
class VectorWork:
    """Vector pipe work: a row per leaf task and op kind.

    A kind is a key of the hardware's vector rate table ("add", "adds", "rowsum",
    "dup", "copy", "transpose", ...).  A task merged from several may hold several
    rows of one kind; pricing adds them up.
    """
    kinds: tuple[str, ...]
    task: np.ndarray
    kind: np.ndarray            # index into kinds
    bytes: np.ndarray           # bytes the kind's op tiles work on
    tiles: np.ndarray           # op tiles, each paying the kind's fixed cycles

    @classmethod
    def per_task(cls, table: dict[str, tuple[np.ndarray, np.ndarray]]) -> "VectorWork":
        """From {kind: (bytes per task, tiles per task)} over the same tasks."""
        return cls(tuple(table), *_rows_of(table))

    def moved(self, task: np.ndarray) -> "VectorWork":
        return replace(self, task=task[self.task] if self.task.size else self.task)

    @classmethod
    def concat(cls, parts: list["VectorWork"], offsets) -> "VectorWork":
        kinds, maps = _key_table([p.kinds for p in parts])
        return cls(kinds, *_concat_rows([(p.task, p.kind, p.bytes, p.tiles) for p in parts],
                                        maps, offsets))


@dataclass(frozen=True)
class CubeWork:
    """Cube pipe work: a row per leaf task and input dtype (cycles per fractal vary)."""
    dtypes: tuple[str, ...]
    task: np.ndarray
    dtype: np.ndarray           # index into dtypes
    fractals: np.ndarray        # 16x16x16 fractals multiplied
    tiles: np.ndarray           # cube tiles, each paying the Cube's fixed cycles

    @classmethod
    def per_task(cls, table: dict[str, tuple[np.ndarray, np.ndarray]]) -> "CubeWork":
        """From {dtype: (fractals per task, tiles per task)} over the same tasks."""
        return cls(tuple(table), *_rows_of(table))

    def moved(self, task: np.ndarray) -> "CubeWork":
        return replace(self, task=task[self.task] if self.task.size else self.task)

    @classmethod
    def concat(cls, parts: list["CubeWork"], offsets) -> "CubeWork":
        dtypes, maps = _key_table([p.dtypes for p in parts])
        return cls(dtypes, *_concat_rows([(p.task, p.dtype, p.fractals, p.tiles)
                                          for p in parts], maps, offsets))


def _rows_of(table: dict[str, tuple[np.ndarray, np.ndarray]]):
    n = len(next(iter(table.values()))[0]) if table else 0
    task = np.tile(np.arange(n, dtype=np.int64), len(table))
    key = np.repeat(np.arange(len(table), dtype=np.int64), n)
    amount = np.concatenate([a for a, _ in table.values()]).astype(float) if table \
        else np.zeros(0)
    tiles = np.concatenate([t for _, t in table.values()]).astype(float) if table \
        else np.zeros(0)
    return task, key, amount, tiles


def _concat_rows(parts, maps, offsets):
    if not parts:
        z = np.zeros(0)
        return z.astype(np.int64), z.astype(np.int64), z, z
    return (np.concatenate([p[0] + off for p, off in zip(parts, offsets)]),
            np.concatenate([m[p[1]] for p, m in zip(parts, maps)]),
            np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]))


@dataclass(frozen=True)
class Work:
    """Per leaf task, what it asks of every pipe."""
    vector: VectorWork
    cube: CubeWork
    mte1_bytes: np.ndarray      # L1 -> L0A/L0B
    mte1_steps: np.ndarray      # k steps, each paying MTE1's fixed cycles
    fixp_bytes: np.ndarray      # L0C -> GM
    fixp_tiles: np.ndarray      # cube tiles written out, each paying FIXP's fixed cycles
    mte3_bytes: np.ndarray      # UB -> GM, one copy-out latency per task
    mte2_bytes: np.ndarray      # GM -> UB/L1: the task's reads, each GM box once
    mte2_bursts: np.ndarray     # contiguous runs of those reads
    mte2_loads: np.ndarray      # GM boxes read
    flops: np.ndarray
    in_flight: np.ndarray       # tiles that pipeline inside the task

    @classmethod
    def per_task_columns(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("vector", "cube"))

    @property
    def tasks(self) -> int:
        return int(self.flops.size)

    @classmethod
    def from_columns(cls, vector: VectorWork, cube: CubeWork, n: int, **columns) -> "Work":
        """Work of ``n`` tasks: the given columns, zeros for the rest."""
        full = {k: columns.get(k, np.zeros(n)) for k in cls.per_task_columns()}
        return cls(vector, cube, **full)

    @classmethod
    def concat(cls, parts: list["Work"]) -> "Work":
        offsets = np.cumsum([0] + [p.tasks for p in parts])[:-1]
        columns = {k: np.concatenate([getattr(p, k) for p in parts]).astype(float)
                   if parts else np.zeros(0) for k in cls.per_task_columns()}
        return cls(VectorWork.concat([p.vector for p in parts], offsets),
                   CubeWork.concat([p.cube for p in parts], offsets), **columns)

    def merged(self, order: np.ndarray, n: int) -> "Work":
        """Tasks ``i`` merged into new task ``order[i]`` of ``n``: their work adds up."""
        columns = {}
        for k in self.per_task_columns():
            out = np.zeros(n)
            np.add.at(out, order, getattr(self, k))
            columns[k] = out
        return Work(self.vector.moved(order), self.cube.moved(order), **columns)
