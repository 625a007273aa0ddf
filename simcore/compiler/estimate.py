"""How big a kernel's program will be, known before building it.

Walks the kernel's statements once without unrolling anything: every loop
multiplies the ops of its body by its trip count, and every op counts the tiles
of its TileShape grid.  Nothing is priced, merged or linked, so the walk costs
microseconds even for a kernel that would need a trillion tasks; the build
itself would need about a kilobyte per tile operation (benchmarks/sim_speed.py
peaks at 1.3 GB for 10^6 leaf tasks).  The count is an upper bound on the leaf
tasks: depth merges put several tile operations into one leaf task.

A trip count that depends on an outer loop index is taken at its largest over
the first and last index; an op behind a ``cond`` is counted as if present.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..spec.errors import ConfigError
from ..spec.expr import ExprError, evaluate
from ..spec.kernel import (DTYPE_BYTES, ELEMENTWISE_OPS, REDUCE_OPS, CubeTile, CubeTileStmt,
                           Kernel, LoopStmt, OperationOptionsStmt, OpStmt, ScopeStmt,
                           TileStmt)

# The documented limits (README, "Sizes"); PTOLAB_MAX_TILE_OPS raises the first on a
# machine with more memory.
MAX_TILE_OPS = 10_000_000            # ~13 GB of compiler and simulator state
MAX_TENSOR_BYTES = 1 << 36           # 64 GiB: more than the HBM of any modeled chip
LIMIT_ENV = "PTOLAB_MAX_TILE_OPS"


@dataclass(frozen=True)
class Estimate:
    tile_ops: int          # tiles of every op of every loop iteration: >= leaf tasks
    root_calls: int        # pypto.loop iterations (before unroll_list grouping)
    largest_tensor: tuple[str, int]   # name, bytes


class _Walker:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.vec_tile: tuple[int, ...] | None = None
        self.cube: tuple[int, int, bool] | None = None    # m L0, n L0, split k
        self.tile_ops = 0
        self.root_calls = 0

    def value(self, text, env) -> int:
        try:
            return evaluate(text, env)
        except (ExprError, OverflowError, ValueError, TypeError):
            return 1     # the compiler reports a bad expression with its field path

    def dims(self, dims, env) -> tuple[int, ...]:
        return tuple(max(self.value(d, env), 0) for d in dims)

    def run(self, body, env: dict[str, int], repeat: int) -> None:
        for stmt in body:
            if isinstance(stmt, TileStmt):
                ref = stmt.set_vec_tile_shapes
                dims = self.kernel.tiles[ref] if isinstance(ref, str) else ref
                self.vec_tile = tuple(max(d, 1) for d in self.dims(dims, env))
            elif isinstance(stmt, CubeTileStmt):
                ref = stmt.set_cube_tile_shapes
                tile: CubeTile = self.kernel.tiles[ref] if isinstance(ref, str) else ref
                m, n = self.dims(tile.m, env)[0], self.dims(tile.n, env)[0]
                self.cube = (max(m, 1), max(n, 1), tile.enable_split_k)
            elif isinstance(stmt, OpStmt):
                self.tile_ops += repeat * self.op_tiles(stmt, env)
            elif isinstance(stmt, LoopStmt):
                self.loop(stmt, env, repeat)
            else:   # scopes and operation options change no tile count
                assert isinstance(stmt, (ScopeStmt, OperationOptionsStmt))

    def loop(self, stmt: LoopStmt, env, repeat: int) -> None:
        head = stmt.loop
        trip = max(self.value(head.trip, env), 0)
        if trip == 0:
            return
        if head.style == "pypto":
            self.root_calls += repeat * trip
        first, last = {**env, head.idx: 0}, {**env, head.idx: trip - 1}
        for inner in (first, last) if trip > 1 else (first,):
            inner[f"{head.idx}_unroll"] = 1
        # walk the body at its first index; trips of inner loops take the larger end
        before = (self.tile_ops, self.root_calls)
        self.run(stmt.body, first, repeat * trip)
        if trip > 1:
            after = (self.tile_ops, self.root_calls)
            self.tile_ops, self.root_calls = before
            self.run(stmt.body, last, repeat * trip)
            self.tile_ops = max(self.tile_ops, after[0])
            self.root_calls = max(self.root_calls, after[1])

    def op_tiles(self, stmt: OpStmt, env) -> int:
        inputs = [self.shapes.get(name, self.tensor_shape(name, env)) for name in stmt.inputs]
        out, tiles = self.shape_and_tiles(stmt, inputs, env)
        if out is not None:
            self.shapes[stmt.out] = out
        return tiles

    def tensor_shape(self, name: str, env) -> tuple[int, ...]:
        spec = self.kernel.tensors.get(name)
        return self.dims(spec.shape, env) if spec is not None else (1,)

    def shape_and_tiles(self, stmt: OpStmt, inputs, env) -> tuple[tuple[int, ...] | None, int]:
        op = stmt.op
        if op in ("view", "reshape", "full", "expand", "arange"):
            shape = self.dims(stmt.shape, env)
            return shape, self.grid(shape) if op in ("full", "expand", "arange") else 0
        if op == "move":
            return inputs[0], 1
        if op == "rename":
            return inputs[0], 0
        if op in ELEMENTWISE_OPS:
            rank = max((len(i) for i in inputs), default=1)   # shorter shapes broadcast
            shape = tuple(max(d) for d in zip(*[(1,) * (rank - len(i)) + i for i in inputs])) \
                if inputs else (1,)
            return shape, self.grid(shape)
        if op in REDUCE_OPS:
            src = inputs[0]
            axis = (stmt.axis or 0) % max(len(src), 1)
            out = tuple(1 if d == axis else s for d, s in enumerate(src))
            return (out if stmt.keepdim else out[:axis] + out[axis + 1:]) or (1,), self.grid(src)
        if op == "matmul":
            return self.matmul(stmt, inputs)
        if op == "transpose":
            src = inputs[0]
            perm = stmt.perm if len(stmt.perm or []) == len(src) else range(len(src))
            shape = tuple(src[p] for p in perm)
            return shape, self.grid(shape)
        if op == "concat":
            axis = (stmt.axis or 0) % max(len(inputs[0]), 1)
            shape = tuple(sum(s[axis] for s in inputs) if d == axis else v
                          for d, v in enumerate(inputs[0]))
            return shape, self.grid(shape)
        if op in ("gather_elements", "scatter_elements"):   # the index's / input's shape
            shape = inputs[1] if op == "gather_elements" else inputs[0]
            return shape, self.grid(shape)
        if op in ("topk", "topk_extract"):    # the k best (value, index) pairs; then k
            k = self.value(stmt.k, env)
            last = k if op == "topk_extract" else 2 * -(-k // 8) * 8
            return (*inputs[0][:-1], last), self.grid(inputs[0])
        if op == "gather_in_ub":     # [k, hidden]: the indices' k, the param's hidden
            shape = (inputs[1][-1], inputs[0][-1])
            return shape, self.grid(shape)
        if op == "gather":
            rows = self.value(stmt.block_rows, env) * self.value(stmt.count, env)
            return (rows, *inputs[0][1:]), 0
        return None, self.grid(inputs[0]) if inputs else 1    # assemble, scatter_update

    def matmul(self, stmt: OpStmt, inputs) -> tuple[tuple[int, ...] | None, int]:
        a, b = inputs[0], inputs[1]
        if len(a) < 2 or len(b) < 2:
            return None, 1
        if stmt.transposed_batch and len(a) == 3 and len(b) == 3:
            tm, tn, _ = self.cube or (a[0] or 1, b[-1] or 1, False)
            return (a[0], a[1], b[-1]), a[1] * math.ceil(a[0] / tm) * math.ceil(b[-1] / tn)
        m = a[-1] if stmt.a_trans else a[-2]
        n = b[-2] if stmt.b_trans else b[-1]
        lead = max(len(a), len(b)) - 2     # batch dims: one tile per batch
        batch = tuple(max(x, y) for x, y in zip((1,) * (lead - len(a) + 2) + a[:-2],
                                                 (1,) * (lead - len(b) + 2) + b[:-2])) \
            if lead else ()
        tm, tn, _ = self.cube or (m or 1, n or 1, False)
        return (*batch, m, n), math.prod(batch) * math.ceil(m / tm) * math.ceil(n / tn)

    def grid(self, shape: tuple[int, ...]) -> int:
        tile = self.vec_tile
        if not tile:
            return 1
        if len(tile) != len(shape):
            return max(1, math.ceil(math.prod(shape) / math.prod(tile)))
        return math.prod(math.ceil(s / t) for s, t in zip(shape, tile))


def estimate(kernel: Kernel) -> Estimate:
    walker = _Walker(kernel)
    walker.run(kernel.body, kernel.scalar_env(), 1)
    sizes = {name: math.prod(walker.tensor_shape(name, dict(kernel.params)))
             * DTYPE_BYTES[spec.dtype] for name, spec in kernel.tensors.items()}
    largest = max(sizes.items(), key=lambda kv: kv[1])
    return Estimate(walker.tile_ops, walker.root_calls, largest)


def tile_op_limit(env=None) -> int:
    env = os.environ if env is None else env
    raw = env.get(LIMIT_ENV, "").strip()
    if not raw:
        return MAX_TILE_OPS
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"environment variable {LIMIT_ENV}={raw!r} must be a positive "
                          f"integer (the largest number of tile operations to build).")
    return int(raw)


def check_size(kernel: Kernel, env=None) -> Estimate:
    """Refuse a kernel whose program would not fit, before any of it is built."""
    found = estimate(kernel)
    name, nbytes = found.largest_tensor
    if nbytes > MAX_TENSOR_BYTES:
        raise ConfigError(
            f"tensor '{name}' would hold {nbytes:,} bytes with params "
            f"{dict(kernel.params)}; the model takes tensors up to {MAX_TENSOR_BYTES:,} bytes "
            f"(64 GiB, more than any modeled chip's HBM). Use smaller params.")
    limit = tile_op_limit(env)
    if found.tile_ops > limit:
        raise ConfigError(
            f"with params {dict(kernel.params)} the program would have about "
            f"{found.tile_ops:,} tile operations (an upper bound on its leaf tasks); ptolab "
            f"builds at most {limit:,} (about 1.3 KB of memory each). Use smaller params or "
            f"larger TileShapes, or raise the limit with {LIMIT_ENV}=N on a machine with the "
            f"memory for it.")
    return found
