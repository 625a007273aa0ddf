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

from .columns import mapped, shifted


def _key_table(tables: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[np.ndarray]]:
    """The union of several key tables (first come first numbered) and each one's map."""
    ids: dict[str, int] = {}
    maps = [np.asarray([ids.setdefault(k, len(ids)) for k in t] or [0], np.int64)
            for t in tables]
    return tuple(ids), maps


@dataclass(frozen=True)
class VectorWork:
    """Vector pipe work: a row per leaf task and op tile (or, built ``per_task``, per
    task and op kind).

    A kind is a key of the hardware's vector rate table ("add", "adds", "rowsum",
    "dup", "copy", "transpose", ...); pricing adds up the rows of a task.  How an op
    becomes instructions depends on the shape of its tile, so a row keeps it: the
    tile's ``rows`` (every dim but the last) and the bytes of one row.  ``reduce``
    marks a reduction along that last axis, which folds each row to one value;
    ``dependent`` counts the waits for a result an earlier op of the same task
    produced (an op reading only loaded data waits for none).  All but ``row_bytes``
    scale with the valid fraction of the tile, as ``tiles`` does.
    """
    kinds: tuple[str, ...]
    task: np.ndarray
    kind: np.ndarray            # index into kinds
    bytes: np.ndarray           # bytes the kind's op tiles work on
    tiles: np.ndarray           # op tiles, each paying the kind's fixed cycles
    rows: np.ndarray | None = None       # tile rows (default: one row per tile)
    row_bytes: np.ndarray | None = None  # bytes of one tile row (default: the whole tile)
    reduce: np.ndarray | None = None     # a row reduction along the last axis
    dependent: np.ndarray | None = None  # waits for an earlier op's result in the task

    def __post_init__(self):
        n = self.task.size
        if self.rows is None:
            object.__setattr__(self, "rows", np.asarray(self.tiles, float))
        if self.row_bytes is None:
            per_tile = np.divide(self.bytes, self.tiles, out=np.zeros(n),
                                 where=np.asarray(self.tiles) > 0)
            object.__setattr__(self, "row_bytes", per_tile)
        if self.reduce is None:
            object.__setattr__(self, "reduce", np.zeros(n, bool))
        if self.dependent is None:
            object.__setattr__(self, "dependent", np.zeros(n))

    @classmethod
    def per_task(cls, table: dict[str, tuple[np.ndarray, np.ndarray]]) -> "VectorWork":
        """From {kind: (bytes per task, tiles per task)} over the same tasks."""
        return cls(tuple(table), *_rows_of(table))

    @classmethod
    def of_rows(cls, kinds: tuple[str, ...], columns: list[tuple]) -> "VectorWork":
        """From parts of rows: (task, kind, bytes, tiles, rows, row_bytes, reduce, dependent)."""
        if not columns:
            z = np.zeros(0)
            return cls(kinds, z.astype(np.int64), z.astype(np.int64), z, z, z, z,
                       z.astype(bool), z)
        cat = [np.concatenate([_spread(c[i], np.shape(c[0])) for c in columns])
               for i in range(len(VECTOR_COLUMNS))]
        # the concatenations are fresh arrays: cast without a second copy
        return cls(kinds, cat[0].astype(np.int64, copy=False),
                   cat[1].astype(np.int64, copy=False),
                   *[c.astype(float, copy=False) for c in cat[2:6]],
                   cat[6].astype(bool, copy=False), cat[7].astype(float, copy=False))

    def moved(self, task: np.ndarray) -> "VectorWork":
        return replace(self, task=task[self.task] if self.task.size else self.task)

    @classmethod
    def concat(cls, parts: list["VectorWork"], offsets) -> "VectorWork":
        kinds, maps = _key_table([p.kinds for p in parts])
        if not parts:
            return cls.of_rows(kinds, [])
        # every part's columns are whole arrays (of_rows made them): joined as one part
        joined = [shifted([p.task for p in parts], offsets),
                  mapped([p.kind for p in parts], maps)]
        joined += [np.concatenate([getattr(p, c) for p in parts]) for c in VECTOR_COLUMNS[2:]]
        return cls.of_rows(kinds, [tuple(joined)])


def _spread(value, shape) -> np.ndarray:
    """``value`` as an array of ``shape``: np.broadcast_to costs more than the copy for the
    small per-op arrays the tiler makes, so arrays already of that shape pass through."""
    if isinstance(value, np.ndarray) and value.shape == shape:
        return value
    if np.ndim(value) == 0:
        return np.full(shape, value)
    return np.broadcast_to(np.asarray(value), shape)


VECTOR_COLUMNS = ("task", "kind", "bytes", "tiles", "rows", "row_bytes", "reduce", "dependent")


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
    if not table:   # most of the tiler's groups have no Cube work: skip the array calls
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    n, k = len(next(iter(table.values()))[0]), len(table)
    # task 0..n-1 once per key (np.tile, without its Python-level set-up)
    task = np.broadcast_to(np.arange(n, dtype=np.int64), (k, n)).ravel()
    key = np.repeat(np.arange(k, dtype=np.int64), n)
    amount = np.concatenate([a for a, _ in table.values()]).astype(float)
    tiles = np.concatenate([t for _, t in table.values()]).astype(float)
    return task, key, amount, tiles


def _concat_rows(parts, maps, offsets):
    if not parts:
        z = np.zeros(0)
        return z.astype(np.int64), z.astype(np.int64), z, z
    return (shifted([p[0] for p in parts], offsets), mapped([p[1] for p in parts], maps),
            np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]))


@dataclass(frozen=True)
class Work:
    """Per leaf task, what it asks of every pipe."""
    vector: VectorWork
    cube: CubeWork
    mte1_bytes: np.ndarray      # L1 -> L0A/L0B
    mte1_steps: np.ndarray      # k steps, each paying MTE1's fixed cycles
    # of those, steps whose L0A or L0B tile fills over half the buffer: no second tile
    # fits, so each step's L1 -> L0 move waits for the multiply before it
    l0_serial_steps: np.ndarray
    fixp_bytes: np.ndarray      # L0C -> GM
    fixp_tiles: np.ndarray      # cube tiles written out, each paying FIXP's fixed cycles
    mte3_bytes: np.ndarray      # UB -> GM, one copy-out latency per task
    mte2_bytes: np.ndarray      # GM -> UB/L1: the task's reads, each GM box once
    mte2_bursts: np.ndarray     # contiguous runs of those reads
    mte2_loads: np.ndarray      # copies of those reads: a box each, a cube operand's K pieces
    # results the task writes to GM and reads back itself (a concat's reader in its leaf
    # task): each waits for its copy-out and then its copy-in, latencies no overlap hides
    round_trips: np.ndarray
    # elements scalar loops move (load + store each), elements they only store (a fill:
    # an index list, a range's first block) and the loops, each between a V->S and an
    # S->V hand-over
    scalar_elements: np.ndarray
    scalar_stores: np.ndarray
    scalar_loops: np.ndarray
    flops: np.ndarray
    in_flight: np.ndarray       # tiles that pipeline inside the task

    @classmethod
    def per_task_columns(cls) -> tuple[str, ...]:
        return _PER_TASK_COLUMNS

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
        columns = {k: np.concatenate([getattr(p, k) for p in parts]).astype(float, copy=False)
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


# dataclasses.fields is slow enough to show in the tiler's per-group work: compute once
_PER_TASK_COLUMNS = tuple(f.name for f in fields(Work) if f.name not in ("vector", "cube"))
