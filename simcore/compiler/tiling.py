"""Tile the ops of one root call and group them into leaf tasks.

Elementwise ops are cut by the vector TileShape in force when they were traced.
A chain of elementwise ops on the same tile grid merges in depth into one leaf
function while its live tiles fit UB; anything else meets through GM (a
workspace round trip).  ``view`` and ``assemble`` cost nothing on their own:
they become the copy-in and copy-out of the leaf tasks that use them.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..spec.errors import ConfigError, OoOError
from ..spec.hardware import Hardware
from ..spec.kernel import DTYPE_BYTES, ELEMENTWISE_OPS, Kernel
from .program import AIV, PipeWork
from .trace import RootCall, TracedOp

Box = tuple[tuple[int, ...], tuple[int, ...]]   # (lo, hi), hi exclusive


@dataclass(frozen=True)
class GmRef:
    """A region of a GM buffer: a global tensor (or a view of it) or a workspace."""
    buffer: str
    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str


@dataclass
class Group:
    """Ops merged in depth: one leaf function per tile of ``shape``."""
    shape: tuple[int, ...]
    tile: tuple[int, ...]
    ops: list[TracedOp] = field(default_factory=list)
    op_bytes: list[int] = field(default_factory=list)      # element size per op
    reads: list[GmRef] = field(default_factory=list)
    writes: list[GmRef] = field(default_factory=list)
    locals: set[str] = field(default_factory=set)
    label: str = ""


@dataclass(frozen=True)
class Local:
    group: int
    shape: tuple[int, ...]
    dtype: str


@dataclass
class LeafTask:
    signature: tuple
    work: tuple[PipeWork, ...]
    ub_bytes: int
    flops: int
    label: str
    reads: list[tuple[str, Box]]
    writes: list[tuple[str, Box]]


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class RootCallTiler:
    def __init__(self, kernel: Kernel, hw: Hardware, call: RootCall, call_index: int):
        self.kernel, self.hw, self.call = kernel, hw, call
        self.scope: dict[str, GmRef | Local] = {}
        self.groups: list[Group] = []
        self.workspace = f"ws{call_index}"
        self.spilled: dict[int, GmRef] = {}

    # -- names -------------------------------------------------------------
    def lookup(self, name: str, op: TracedOp) -> GmRef | Local:
        if name in self.scope:
            return self.scope[name]
        spec = self.kernel.tensors.get(name)
        if spec is None:
            raise ConfigError(f"field '{op.where}.inputs': '{name}' is neither a tensor in "
                              f"'tensors' nor the output of an earlier op.")
        shape = tuple(_dim(d, self.kernel, name) for d in spec.shape)
        return GmRef(name, (0,) * len(shape), shape, spec.dtype)

    # -- ops -----------------------------------------------------------------
    def run(self) -> list[LeafTask]:
        for op in self.call.ops:
            if op.op == "view":
                self._view(op)
            elif op.op == "assemble":
                self._assemble(op)
            else:
                assert op.op in ELEMENTWISE_OPS
                self._elementwise(op)
        return [task for g in self.groups for task in self._leaf_tasks(g)]

    def _view(self, op: TracedOp) -> None:
        src = self.lookup(op.inputs[0], op)
        if not isinstance(src, GmRef):
            raise ConfigError(f"field '{op.where}': view of '{op.inputs[0]}', which lives "
                              f"on chip; view a GM tensor or an earlier view instead.")
        _check_inside(op, op.offsets, op.shape, src.shape)
        offsets = tuple(a + b for a, b in zip(src.offsets, op.offsets))
        self.scope[op.out] = GmRef(src.buffer, offsets, op.shape, src.dtype)

    def _assemble(self, op: TracedOp) -> None:
        src = self.lookup(op.inputs[0], op)
        target = self.lookup(op.out, op)
        if not isinstance(src, Local) or not isinstance(target, GmRef):
            raise ConfigError(f"field '{op.where}': assemble writes the result of an op "
                              f"('{op.inputs[0]}') into a GM tensor ('{op.out}').")
        _check_inside(op, op.offsets, src.shape, target.shape)
        offsets = tuple(a + b for a, b in zip(target.offsets, op.offsets))
        self.groups[src.group].writes.append(GmRef(target.buffer, offsets, src.shape, src.dtype))

    def _elementwise(self, op: TracedOp) -> None:
        values = [self.lookup(name, op) for name in op.inputs]
        shape = values[0].shape
        if any(v.shape != shape for v in values):
            raise ConfigError(f"field '{op.where}': inputs of '{op.op}' have shapes "
                              f"{[list(v.shape) for v in values]}; they must match.")
        tile = self._tile_for(op, shape)
        dtype = op.dtype if op.op == "cast" else values[0].dtype
        elem = max([DTYPE_BYTES[dtype]] + [DTYPE_BYTES[v.dtype] for v in values])
        need = (len(values) + 1) * _elements(tile) * elem
        if need > self.hw.buffers.ub:
            raise OoOError(op=f"{op.op} ({op.where})", tile=list(tile), buffer="UB",
                           need=need, capacity=self.hw.buffers.ub)
        group = self._group_for(op, values, shape, tile, elem)
        grp = self.groups[group]
        for v in values:
            if isinstance(v, GmRef):
                grp.reads.append(v)
            elif v.group != group:
                grp.reads.append(self._spill(v))
        grp.ops.append(op)
        grp.op_bytes.append(elem)
        grp.locals.add(op.out)
        grp.label = grp.label or op.label
        self.scope[op.out] = Local(group, shape, dtype)

    def _tile_for(self, op: TracedOp, shape) -> tuple[int, ...]:
        if op.vec_tile is None:
            raise ConfigError(f"field '{op.where}': op '{op.op}' runs before any "
                              f"set_vec_tile_shapes; set a vector TileShape first.")
        if len(op.vec_tile) != len(shape):
            raise ConfigError(f"field '{op.where}': vector TileShape {list(op.vec_tile)} has "
                              f"{len(op.vec_tile)} dims but '{op.op}' works on shape "
                              f"{list(shape)}; give one tile dim per tensor dim.")
        return tuple(min(t, s) for t, s in zip(op.vec_tile, shape))

    def _group_for(self, op, values, shape, tile, elem) -> int:
        """Join the producer's group when the tiles line up and UB still has room."""
        for v in values:
            if isinstance(v, Local):
                grp = self.groups[v.group]
                live = (len(grp.locals) + len(grp.reads) + 2) * _elements(tile) * elem
                if grp.shape == shape and grp.tile == tile and live <= self.hw.buffers.ub \
                        and v.group not in self.spilled:
                    return v.group
        self.groups.append(Group(shape=shape, tile=tile))
        return len(self.groups) - 1

    def _spill(self, value: Local) -> GmRef:
        """A result consumed across groups goes through a GM workspace."""
        if value.group not in self.spilled:
            ref = GmRef(f"{self.workspace}.g{value.group}", (0,) * len(value.shape),
                        value.shape, value.dtype)
            self.groups[value.group].writes.append(ref)
            self.spilled[value.group] = ref
        return self.spilled[value.group]

    def workspace_bytes(self) -> int:
        return sum(_elements(r.shape) * DTYPE_BYTES[r.dtype] for r in self.spilled.values())

    # -- leaf tasks ------------------------------------------------------------
    def _leaf_tasks(self, grp: Group) -> list[LeafTask]:
        grid = [range(0, s, t) for s, t in zip(grp.shape, grp.tile)]
        tasks = []
        for lo in itertools.product(*grid):
            hi = tuple(min(a + t, s) for a, t, s in zip(lo, grp.tile, grp.shape))
            size = tuple(b - a for a, b in zip(lo, hi))
            n = _elements(size)
            work = [PipeWork("mte2", "copy_in", n * DTYPE_BYTES[r.dtype]) for r in grp.reads]
            work += [PipeWork("vector", _vector_kind(op), n * b)
                     for op, b in zip(grp.ops, grp.op_bytes)]
            work += [PipeWork("mte3", "copy_out", n * DTYPE_BYTES[w.dtype]) for w in grp.writes]
            ub = (len(grp.reads) + len(grp.locals)) * n * max(grp.op_bytes)
            tasks.append(LeafTask(
                signature=(AIV, size, tuple(work)), work=tuple(work), ub_bytes=ub,
                flops=n * len(grp.ops), label=grp.label,
                reads=[(r.buffer, _shift(r.offsets, lo, hi)) for r in grp.reads],
                writes=[(w.buffer, _shift(w.offsets, lo, hi)) for w in grp.writes]))
        return tasks


def _vector_kind(op: TracedOp) -> str:
    """The scalar forms (pypto.add(x, 1.0)) run as their own instructions: ADDS, MULS, ..."""
    return op.op + "s" if op.scalar is not None else op.op


def _shift(offsets, lo, hi) -> Box:
    return (tuple(o + a for o, a in zip(offsets, lo)), tuple(o + b for o, b in zip(offsets, hi)))


def _dim(expr, kernel: Kernel, name: str) -> int:
    from ..spec.expr import ExprError, evaluate
    try:
        return evaluate(expr, kernel.params)
    except ExprError as exc:
        raise ConfigError(f"field 'tensors.{name}.shape': {exc}.") from None


def _check_inside(op: TracedOp, offsets, shape, outer) -> None:
    if len(offsets) != len(outer) or len(shape) != len(outer):
        raise ConfigError(f"field '{op.where}': offsets {list(offsets)} and shape "
                          f"{list(shape)} must have one entry per dim of {list(outer)}.")
    for o, s, d in zip(offsets, shape, outer):
        if o < 0 or o + s > d:
            raise ConfigError(f"field '{op.where}': region at offsets {list(offsets)} with "
                              f"shape {list(shape)} leaves the tensor of shape {list(outer)}.")
