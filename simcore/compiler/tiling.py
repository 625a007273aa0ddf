"""Tile the ops of one root call and group them into leaf tasks (depth merge).

Every op becomes a ``Node`` (ops.py) with one row per tile.  Vector nodes whose
tiles line up one-to-one with their producer's join its group while the group's
live tiles fit UB, so the chain runs as one leaf function with intermediates
on chip; anything else meets through a GM workspace (a round trip).  Cube and
Vector never share a group.  ``sg_set_scope`` forces the ops of one scope
together (tile by tile, or all tiles in one leaf task with allow_parallel_merge)
and keeps different scopes apart.  ``view``, ``reshape``,
``gather`` and ``assemble`` cost nothing on their own: they decide which GM
regions the leaf tasks around them read and write.  A view or reshape of an op's
result decides which boxes of that result its readers read: in the producer's
leaf task when they lie inside its tiles, else from its GM workspace.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

import numpy as np

from ..spec.errors import ConfigError, OoOError
from ..spec.expr import ExprError, evaluate
from ..spec.kernel import DTYPE_BYTES, Kernel
from . import ops, sort
from .accesses import Accesses, GmBuffer
from .limits import Limits
from .ops import Node
from .program import CoreType
from .records import made
from .rows import row_ids
from .trace import RootCall, Scope, TracedOp, tensor_of
from .values import (UB_BLOCK_BYTES, carry_out, GmValue, LocalValue, Piece, _ravel,
                     contiguous_bytes, pad, padded, ub_bytes)
from .work import CubeWork, VectorWork, Work
from .groupcache import GroupCache
from .nodememo import NodeMemo
from .ubprofile import TileBytes, UbProfile


def _scope_key(scope: Scope, kind: str) -> tuple:
    """Which subgraphs an op of ``scope`` may be forced into.  Upstream's supernode builder
    merges every producer -> consumer pair of one scope id in the function
    (BuildSuperNodeGraph, supernode_graph_builder.cpp), whatever loop body either came
    from, so the int form's chains run on across unrolled bodies.  The parallel form puts
    every op of the scope in one subgraph; it is kept to one loop body here, as nothing
    documents how it takes the bodies of an unrolled loop."""
    return (scope.id, scope.loop_body if scope.allow_parallel_merge else (), kind)


def _crosses(scope) -> bool:
    """Whether ops of this scope may share a subgraph with ops of another: unscoped ops
    may, a scope only with allow_cross_scope_merge."""
    return scope.id < 0 or scope.allow_cross_scope_merge


# gap between the ranks of consecutive new groups: room to move groups in between
_RANK_STEP = 1 << 20


@dataclass
class Group:
    kind: str
    scope: Scope
    forced: bool
    nodes: list[int] = field(default_factory=list)
    ub: int = 0
    resident: set = field(default_factory=set)   # GM values already loaded into UB
    rank: int = 0         # where its tasks go in the call's task order (RootCallTiler.run)


@dataclass
class TaskBatch:
    """The leaf tasks of one group."""
    core: CoreType
    sig_table: list[tuple]      # distinct leaf signatures of the batch
    sig_index: np.ndarray       # per task: index into sig_table
    label: str
    work: Work
    accesses: Accesses
    srcs: tuple = ()            # per op of the group: its source line (FILE.py:LINE) or None
    # a group cache hit's boxes still to move once the batches are joined
    # (groupcache.moved_boxes): its cache entry and its GM offsets; None when in place
    shift: tuple | None = None

    @property
    def size(self) -> int:
        return len(self.sig_index)


class _AccessRows:
    """Collects a group's GM accesses, op by op, into one ``Accesses``."""

    def __init__(self):
        self.parts: list[tuple] = []
        self.buffers: dict[str, GmBuffer] = {}
        self.ids: dict[str, int] = {}           # buffer name: its index in self.buffers
        # per part, each row's GM source (groupcache.py): the first piece's number plus
        # the row's piece index, or -1 for a box that does not move with a view
        self.sources: list[np.ndarray] = []

    def add(self, tasks, names, index, lo, hi, write, tag, elem, value: GmValue | None,
            operand, to_l1: bool = False, shape: tuple[int, ...] = (), source: int = -1,
            k_block: tuple[int, int] | None = None, scalar: bool = False):
        """``k_block``: (axis, elements) of a cube operand's K axis and the K extent one
        GM -> L1 copy takes: each box is read in that many pieces (their runs cut at the
        block's edge when K is the contiguous axis).  ``scalar``: the scalar unit reads
        the box's elements (an index, a block-table entry): its lines come through L2 and
        the task waits for them and they count on its MTE2 stream (bytes, bursts), but
        they are no copy of their own."""
        if len(tasks) == 0:
            return
        self.sources.append(np.asarray(index, np.int64) + source if source >= 0
                            else np.full(len(tasks), -1, np.int64))
        for n in names:
            if n not in self.buffers:
                whole = tuple(value.buffer_shape) if value is not None else tuple(shape)
                storage = next((p.storage for p in reversed(value.pieces) if p.buffer == n),
                               "") if value is not None else ""
                fmt = value.format if value is not None else "ND"
                dtype = value.dtype if value is not None else ""
                self.buffers[n] = GmBuffer(n, whole, elem, storage, fmt, dtype)
                self.ids[n] = len(self.ids)
        ids = self.ids
        bufs = np.asarray([ids[n] for n in names])[index]
        n = (hi - lo).prod(axis=1) * elem
        if value is not None and value.buffer_shape:
            burst = contiguous_bytes(lo, hi, value.buffer_shape, elem, value.format, to_l1)
        elif to_l1 and shape:
            # a workspace the Cube reads: ND, reordered into fractals row by row
            burst = contiguous_bytes(lo, hi, tuple(shape), elem, "ND", to_l1)
        else:
            burst = np.maximum(n, 1)
        pieces = np.full(len(tasks), 0 if scalar else 1, np.int64)
        if k_block is not None:
            pieces, burst = _l1_pieces(lo, hi, n, burst, elem,
                                       value.format if value is not None else "ND", k_block)
        bypass = bool(value.bypass) if value is not None else False
        count = len(tasks)
        # the columns of Accesses, in Accesses.columns() order
        self.parts.append((
            np.asarray(tasks), bufs, pad(lo, 0), pad(hi, 1), np.full(count, write),
            np.full(count, tag) if np.ndim(tag) == 0 else np.broadcast_to(tag, count).copy(),
            n, burst, np.full(count, bypass), np.full(count, operand), pieces))

    def row_sources(self) -> np.ndarray:
        return np.concatenate(self.sources) if self.sources else np.zeros(0, np.int64)

    def build(self) -> Accesses:
        if not self.parts:
            return replace(Accesses.empty(), buffers=tuple(self.buffers.values()))
        rows = {k: np.concatenate(column) for k, column in zip(Accesses.columns(),
                                                               zip(*self.parts))}
        return Accesses(buffers=tuple(self.buffers.values()), **rows)


def _l1_pieces(lo, hi, n, burst, elem: int, fmt: str, k_block: tuple[int, int]):
    """(copies, run bytes) of boxes a cube operand reads in K blocks of ``k_block``: a
    copy per block, each cutting the rows where K is the contiguous axis (NZ: one stream a
    copy)."""
    axis, block = k_block
    pieces = np.maximum(-(-(hi[:, axis] - lo[:, axis]) // block), 1)
    if fmt == "NZ":
        burst = np.minimum(burst, np.maximum(-(-n // pieces), 1))
    elif axis == -1:
        burst = np.minimum(burst, block * elem)
    return pieces, burst


def _through_workspace(node: Node, i: int, box, carried, source: dict, bounds=None) -> None:
    """Input ``i`` is read back from its producer's workspace in ``box`` (lo, hi, shape).
    ``carried``: its boxes in the producer's coordinates, which a merge with the producer
    can check, when every tile reads one; else the read is scattered over the producer's
    rows, within ``bounds`` when they are known."""
    node.extra.setdefault("via_workspace", {})[i] = box
    if carried is not None:
        source[i] = carried
        return
    node.extra.setdefault("scattered", set()).add(i)
    if bounds is not None:
        node.extra.setdefault("bounds", {})[i] = bounds


class RootCallTiler:
    def __init__(self, kernel: Kernel, limits: Limits, call: RootCall, call_index: int):
        self.kernel, self.limits, self.call = kernel, limits, call
        self.values: dict[str, GmValue | LocalValue] = {}   # GM views and op results by name
        self.nodes: list[Node] = []
        self.groups: list[Group] = []
        self.group_of: dict[int, int] = {}
        self.assembles: list[tuple[int, GmValue, tuple[int, ...]]] = []
        self._writers: dict[str, list[int]] = {}    # GM buffer: the nodes assembled into it
        # GM buffer: (when, node) of every read and write of it, in the order they were
        # traced (when: the nodes placed so far), so a write looks only at the accesses
        # traced since its producer's group began
        self._gm_access: dict[str, tuple[list[int], list[int]]] = {}
        self._gm_bases: dict[int, list[str]] = {}    # node: the GM buffers it accesses
        # group: per GM buffer, what the group read and wrote of it, tile by tile
        # (_reads_own_writes)
        self._own: dict[int, dict[str, _OwnAccesses]] = {}
        # group: the earliest node whose GM accesses it must look at (a group moved ahead
        # of others looks from theirs on, _run_sources_first)
        self._look_from: dict[int, int] = {}
        # per assemble, the shape its offsets were checked with (the call cache checks a
        # later call's the same way); whether one wrote through the producer's geometry
        self.assemble_shapes: list[tuple[int, ...]] = []
        self.regeometried = False
        self.workspace = f"ws{call_index}"
        self.valid: dict[int, tuple[int, ...]] = {}
        # an index over self.groups, so placing a node does not scan every group before it:
        # forced groups by (scope id, loop body, kind)
        self._forced: dict[tuple, dict[int, None]] = {}    # an ordered set of groups
        self._pinned: set[int] = set()     # constants a consumer has read: they stay put
        self._next_rank = 0                # ranks leave room to move a group between two
        self._read_by: dict[int, set[int]] = {}   # node: the nodes reading its result
        # per traced op, the ops reading its result (run() counts them; the UB profile's
        # buffer reuse needs them), and the position of the op being tiled
        self._readers: list[int] = []
        self._at = 0
        self._tile_bytes = TileBytes(_tile_bytes)
        self._profiles: dict[int, UbProfile] = {}   # group: its UB profile, op by op
        self.memo = NodeMemo()
        self._whole: dict[str, GmValue] = {}    # lookup's whole-tensor values by name

    # -- names -------------------------------------------------------------------
    def lookup(self, name: str, op: TracedOp) -> GmValue | LocalValue:
        value = self.values.get(name)
        if value is None:
            value = self._whole.get(name)
        if value is None:
            # a whole tensor depends on the kernel alone, and a GmValue never changes
            value = self._whole[name] = self._whole_tensor(name, op)
        return value

    def _whole_tensor(self, name: str, op: TracedOp) -> GmValue:
        spec = self.kernel.tensors.get(tensor_of(name))
        if spec is None:
            raise ConfigError(f"field '{op.where}.inputs': '{name}' is neither a tensor in "
                              f"'tensors' nor the output of an earlier op.")
        try:
            shape = tuple(evaluate(d, self.kernel.params) for d in spec.shape)
        except ExprError as exc:
            raise ConfigError(f"field 'tensors.{name}.shape': {exc}.") from None
        return GmValue((Piece(name, (0,) * len(shape), shape),), shape, spec.dtype, spec.format,
                       spec.cache_policy == "bypass", shape)

    # -- ops ----------------------------------------------------------------------------
    def run(self) -> list[TaskBatch]:
        self._readers = _reader_counts(self.call.ops)
        for self._at, op in enumerate(self.call.ops):
            handler = getattr(self, f"_op_{op.op}", None)
            if handler is not None:
                handler(op)
            else:
                self._compute(op)
        self._check_reuse()
        self._place_assembles()
        order = sorted(range(len(self.groups)), key=lambda g: self.groups[g].rank)
        cache = GroupCache()
        return [cache.expand(self, self.groups[g]) for g in order if self.groups[g].nodes]

    def _gm(self, op: TracedOp, name: str) -> GmValue:
        value = self.lookup(name, op)
        if not isinstance(value, GmValue):
            raise ConfigError(f"field '{op.where}': '{op.op}' of '{name}', which lives on chip; "
                              f"'{op.op}' works on GM tensors and views.")
        return value

    def _op_rename(self, op: TracedOp) -> None:
        value = self.lookup(op.inputs[0], op)
        if not isinstance(value, LocalValue):
            raise ConfigError(f"field '{op.where}': rename of '{op.inputs[0]}', which is GM "
                              f"data; rename names an op's result (on chip).  To copy GM "
                              f"data into a tensor, assemble a move of it.")
        tensor = self.lookup(op.out.split("~", 1)[0], op)
        if tuple(tensor.shape) != tuple(value.shape):
            raise ConfigError(f"field '{op.where}': rename of a {list(value.shape)} value as "
                              f"a tensor of shape {list(tensor.shape)}; the shapes must be "
                              f"equal (upstream's tensor[:] = value).")
        self.values[op.out] = value

    def _op_view(self, op: TracedOp) -> None:
        src = self.lookup(op.inputs[0], op)
        offsets, shape = op.get("offsets"), op.get("shape")
        valid = op.get("valid_shape")
        if valid is not None and (len(valid) != len(shape) or any(v > s for v, s in
                                                                  zip(valid, shape))):
            raise ConfigError(f"field '{op.where}.valid_shape': {list(valid)} must fit inside "
                              f"the view shape {list(shape)}.")
        # a view may pass the tensor's edge where it holds no data: only its valid region
        # must lie inside (upstream pads the rest; reads stop at the valid region)
        _check_inside(op, offsets, valid if valid is not None else shape, src.shape)
        if isinstance(src, LocalValue):
            return self._local_view(op, src, tuple(offsets), tuple(shape), valid)
        if len(src.pieces) != 1:
            raise ConfigError(f"field '{op.where}': view of a gathered tensor is not modeled.")
        (p,) = src.pieces
        piece = Piece(p.buffer, tuple(a + b for a, b in zip(p.offsets, offsets)), shape,
                      p.storage)
        self.values[op.out] = GmValue((piece,), shape, src.dtype, src.format, src.bypass,
                                     src.buffer_shape, valid)

    def _local_view(self, op: TracedOp, src: LocalValue, offsets, shape, valid) -> None:
        """A box of an on-chip value: its readers read that box of the producer's result
        (on chip in the producer's leaf task, else from its workspace)."""
        base = self._local_valid(src)
        region = np.asarray(valid if valid is not None else shape)
        if base is not None:   # the producer's valid region, seen from the view
            region = np.minimum(region, np.clip(np.asarray(base) - np.asarray(offsets), 0, None))
        region = tuple(int(v) for v in region)
        self.values[op.out] = LocalValue(src.node, shape, src.dtype,
                                         src.path + (("view", offsets, src.shape),),
                                         None if region == shape else region)

    def _local_valid(self, value: LocalValue):
        return value.valid if value.path else self.valid.get(value.node)

    def _op_reshape(self, op: TracedOp) -> None:
        src = self.lookup(op.inputs[0], op)
        shape = op.get("shape")
        if int(np.prod(shape)) != int(np.prod(src.shape)):
            raise ConfigError(f"field '{op.where}': reshape {list(src.shape)} -> {list(shape)} "
                              f"changes the element count.")
        if isinstance(src, LocalValue):
            # on chip a reshape moves nothing: readers see the producer's elements in
            # row-major order; whether their tiles can is checked where they read it
            valid = self._local_valid(src)
            if _squeeze_only(src.shape, shape):
                # only dims of 1 come or go: any valid box keeps its extents
                result_valid = op.get("valid_shape")
                if result_valid is None and valid is not None:
                    kept = iter(v for v, d in zip(valid, src.shape) if d != 1)
                    result_valid = tuple(1 if d == 1 else next(kept) for d in shape)
                if result_valid is not None:
                    result_valid = tuple(int(d) for d in result_valid)
                    if tuple(result_valid) == tuple(shape):
                        result_valid = None
                self.values[op.out] = LocalValue(src.node, tuple(shape), src.dtype,
                                                 src.path + (("reshape", src.shape, op.where),),
                                                 result_valid)
                return
            if valid is not None and not _leading_rows(valid, src.shape):
                raise ConfigError(f"field '{op.where}': reshape of '{op.inputs[0]}', an on-chip "
                                  f"value whose valid region {list(valid)} is smaller than its "
                                  f"shape {list(src.shape)} off its first dim, is not modeled; "
                                  f"reshape values valid throughout or in leading rows.")
            # a valid region of leading rows is a row-major prefix: the reshape keeps it as
            # the leading rows its valid_shape names (upstream's reshape valid_shape)
            result_valid = op.get("valid_shape")
            if result_valid is None and valid is not None and tuple(valid) != tuple(src.shape):
                # no valid_shape given: the prefix keeps its elements, whole rows of the result
                count, row = int(np.prod(valid)), int(np.prod(shape[1:]))
                if count % row:
                    raise ConfigError(f"field '{op.where}': reshape of '{op.inputs[0]}', whose "
                                      f"valid region {list(valid)} does not fill whole rows of "
                                      f"{list(shape)}, is not modeled; give the reshape a "
                                      f"valid_shape of leading rows.")
                result_valid = (count // row, *shape[1:])
            if result_valid is not None:
                result_valid = tuple(int(d) for d in result_valid)
                if not _leading_rows(result_valid, shape):
                    raise ConfigError(f"field '{op.where}': reshape valid_shape "
                                      f"{list(result_valid)} of shape {list(shape)}: only a "
                                      f"number of leading rows is modeled.")
            self.values[op.out] = LocalValue(src.node, tuple(shape), src.dtype,
                                             src.path + (("reshape", src.shape, op.where),),
                                             result_valid)
            return
        if not op.get("inplace"):
            # a copying reshape gives its result an address of its own: a Vector copy of the
            # source's elements, read by its consumers as an on-chip reshape of that copy
            node = ops.copy(len(self.nodes), op, [src], self.limits)
            self._place(node)
            self._track_valid(node, [src])
            result_valid = op.get("valid_shape")
            if result_valid is not None:
                result_valid = tuple(int(d) for d in result_valid)
                if not (_leading_rows(result_valid, shape) or _squeeze_only(src.shape, shape)):
                    raise ConfigError(f"field '{op.where}': reshape valid_shape "
                                      f"{list(result_valid)} of shape {list(shape)}: only a "
                                      f"number of leading rows is modeled.")
            self.values[op.out] = LocalValue(node.index, tuple(shape), src.dtype,
                                             (("reshape", tuple(src.shape), op.where),),
                                             result_valid)
            return
        if len(src.pieces) != 1 or src.pieces[0].shape != src.buffer_shape:
            raise ConfigError(f"field '{op.where}': reshape of a partial view or a gather is "
                              f"not modeled; reshape the whole tensor, then view it.")
        (p,) = src.pieces
        # An inplace reshape is a new geometry of the same bytes: its boxes have new
        # coordinates, but it shares its base tensor's storage, so dependencies and L2
        # meet accesses made through any geometry (deps.py, build.l2_regions).
        buffer = f"{p.base}@{'x'.join(map(str, shape))}"
        self.values[op.out] = GmValue((Piece(buffer, (0,) * len(shape), shape, p.base),),
                                     shape, src.dtype, src.format, src.bypass, shape)

    def _op_gather(self, op: TracedOp) -> None:
        """Paged gather: ``count`` blocks of ``block_rows`` rows stacked along axis 0."""
        src = self._gm(op, op.inputs[0])
        rows, count, first = op.get("block_rows"), op.get("count"), op.get("first_block")
        (p,) = src.pieces
        n_blocks = src.shape[0] // rows
        if rows <= 0 or src.shape[0] % rows:
            raise ConfigError(f"field '{op.where}': block_rows {rows} must divide the "
                              f"{src.shape[0]} rows of '{op.inputs[0]}'.")
        ids = np.arange(first, first + count)
        if np.any(ids >= n_blocks):
            raise ConfigError(f"field '{op.where}': blocks {first}..{first + count - 1} pass the "
                              f"{n_blocks} blocks of '{op.inputs[0]}'.")
        if op.get("permute"):
            ids = (ids * op.get("permute")) % n_blocks   # a deterministic block table
        tail = src.shape[1:]
        pieces = tuple(Piece(p.buffer, (int(b) * rows,) + (0,) * len(tail), (rows,) + tail,
                             p.storage) for b in ids)
        self.values[op.out] = GmValue(pieces, (rows * count,) + tail, src.dtype, src.format,
                                     src.bypass, src.buffer_shape)

    def _op_assemble(self, op: TracedOp) -> None:
        src = self.lookup(op.inputs[0], op)
        target = self._gm(op, op.out)
        if not isinstance(src, LocalValue):
            raise ConfigError(f"field '{op.where}': assemble writes the result of an op; "
                              f"'{op.inputs[0]}' is a GM view, so copy it with an op first.")
        if self._reads_own_writes(src, target, op.get("offsets")) or \
                not self._write_after_reads(src.node, target.pieces[0].base):
            src = self._late_copy(op, src)
        offsets = op.get("offsets")
        valid = self._local_valid(src) if not src.path else None
        reshaped = any(step[0] == "reshape" for step in src.path)
        # a reshape's valid_shape names the leading rows the value holds data in
        held = src.valid if reshaped and src.valid is not None else valid
        # a result with a valid region (a tail of M or N) writes that region only
        _check_inside(op, offsets, held if held is not None else src.shape, target.shape)
        self.assemble_shapes.append(tuple(held) if held is not None else tuple(src.shape))
        box = None
        if valid is not None and tuple(valid) != tuple(src.shape):
            box = (np.zeros(len(valid), np.int64), np.asarray(valid, np.int64))
        if src.path and all(step[0] == "view" for step in src.path):
            # the box of the producer's result it writes: the sum of the views' offsets
            lo = np.sum([np.asarray(step[1]) for step in src.path], axis=0)
            box = (lo, lo + np.asarray(src.shape))
        elif src.path:
            # through a reshape: the producer's box holding the value's elements, whose
            # tiles' parts are carried out to the value's coordinates where they are written
            rank = len(src.shape)
            lo, hi, ok = src.source(np.zeros((1, rank), np.int64),
                                    np.asarray([src.shape], np.int64))
            producer = self.nodes[src.node]
            if ok.all():
                parts_ok = carry_out(np.maximum(producer.out_lo, lo[0]),
                                     np.minimum(producer.out_hi, hi[0]), src.path,
                                     tuple(src.shape))[2]
                ok = parts_ok | ((np.minimum(producer.out_hi, hi[0]) <=
                                  np.maximum(producer.out_lo, lo[0])).any(axis=1))
            if ok.all():
                box = (lo[0], hi[0], src.path, tuple(src.shape),
                       tuple(held) if held is not None else tuple(src.shape))
            else:
                # tiles that are no boxes of the reshaped value: the bytes are the same in
                # any geometry, so write each tile into the target seen in the producer's
                target, offsets = self._in_producer_geometry(op, src, target, offsets,
                                                             producer.out_shape)
                self.regeometried = True
                valid = self.valid.get(src.node)
                if held is not None and tuple(held) != tuple(src.shape):
                    # the value's leading rows, as leading rows of the result where they fill
                    # whole ones
                    count, row = int(np.prod(held)), int(np.prod(producer.out_shape[1:]))
                    if count % row == 0:
                        valid = (count // row, *producer.out_shape[1:])
                box = None if valid is None or tuple(valid) == producer.out_shape else \
                    (np.zeros(len(valid), np.int64), np.asarray(valid, np.int64))
        self.assembles.append((src.node, target, offsets, box))
        self._writers.setdefault(target.pieces[0].base, []).append(src.node)
        self._gm_accessed(target.pieces[0].base, src.node)
        self._pinned.add(src.node)      # its GM write stays where the trace put it

    def _write_after_reads(self, producer: int, base: str) -> bool:
        """Whether an assemble may write from its producer's tasks.  Where groups ranked
        after the producer's read or write the target's memory (traced before this write, so
        their reads must see what was there and their writes must land first), the
        producer's group, with the groups ranked up to the last of them that read its
        results, moves behind it: the write then lands after them, as upstream's
        write-after-read and write-after-write order (its HEAD's token pass) puts a write's
        subgraph after them.  When that cannot be (one of them needs the producer's group,
        by its results or by GM data it writes), False: the write needs a task of its own
        (``_late_copy``)."""
        gp = self.group_of[producer]
        rank = self.groups[gp].rank
        when, nodes = self._gm_access.get(base, ((), ()))
        # accesses traced before the group's first node sit in groups ranked before it
        # (a group moved later since counts its accesses again, ``_gm_moved``); the later
        # ones are few, so a write's look stays linear in the kernel
        since = bisect.bisect_right(when, min(min(self.groups[gp].nodes),
                                              self._look_from.get(gp, len(self.nodes))))
        after = {g for n in nodes[since:] if (g := self.group_of[n]) != gp
                 and self.groups[g].rank > rank}
        if not after:
            return True
        last = max(after, key=lambda g: self.groups[g].rank)
        window = sorted((g for g in range(len(self.groups))
                         if rank < self.groups[g].rank <= self.groups[last].rank
                         and self.groups[g].nodes), key=lambda g: self.groups[g].rank)
        moving, moved_nodes = [gp], set(self.groups[gp].nodes)
        for g in window:
            if self._reads_any(self.groups[g].nodes, moved_nodes):
                moving.append(g)
                moved_nodes.update(self.groups[g].nodes)
        if after & set(moving):
            return False
        if self._writers and self._gm_order_matters(moving, [g for g in window
                                                              if g not in moving]):
            return False
        self._rank_after(last, moving)
        return True

    def _reads_own_writes(self, src: LocalValue, target: GmValue, offsets) -> bool:
        """Whether a tile of the producer's group would write a box of the target that a
        later tile of the group reads or wrote before (an op reading T[0:32] whose result
        goes to T[16:48]; two results of the group written to overlapping rows): the
        group's tasks run tile by tile, so that read would see the write, or the earlier
        write land over it, where the trace puts all the group's reads and earlier writes
        before it.  A value reached through a view or reshape, or a box seen through another
        geometry of the buffer, is not looked into: it counts.  Records this write for the
        next one."""
        gp = self.group_of[src.node]
        group = self.groups[gp]
        producer = self.nodes[src.node]
        if producer.tiles < 2 or (group.forced and group.scope.allow_parallel_merge) or \
                len(offsets) != len(target.shape) or len(src.shape) != len(target.shape):
            return False        # one task (or an assemble _check_inside refuses)
        own = self._own_of(gp, target.pieces[0].base)
        off = np.asarray(offsets, np.int64)
        mine = None if src.path or len({pc.buffer for pc in target.pieces}) > 1 else \
            target.region(producer.out_lo + off, producer.out_hi + off)
        clash = own.meets(self.nodes, mine)
        own.add(mine)
        return clash

    def _own_of(self, group: int, base: str) -> "_OwnAccesses":
        return self._own.setdefault(group, {}).setdefault(base, _OwnAccesses())

    def _gm_accessed(self, base: str, node: int) -> None:
        self._gm_bases.setdefault(node, []).append(base)
        self._gm_log(base, node)

    def _gm_log(self, base: str, node: int) -> None:
        """``node`` accesses ``base`` as of now (the nodes placed so far)."""
        when, nodes = self._gm_access.setdefault(base, ([], []))
        when.append(len(self.nodes))
        nodes.append(node)

    def _gm_moved(self, nodes) -> None:
        """Nodes whose group now runs later: their GM accesses count as traced now, so a
        later write into those buffers looks at them (``_write_after_reads``)."""
        for n in nodes:
            for base in self._gm_bases.get(n, ()):
                self._gm_log(base, n)

    def _late_copy(self, op: TracedOp, src: LocalValue) -> LocalValue:
        """A copy of the value in a task of its own, ranked after every group so far, for an
        assemble whose producer's tasks run before reads or writes of the target traced
        ahead of it and cannot move behind them (upstream's partitioner, which sees that
        order, would keep the write out of the producer's subgraph): the copy reads the
        value from the producer's workspace and writes it out after them."""
        copy = made(TracedOp, **{**vars(op), "op": "copy", "inputs": (op.inputs[0],),
                                 "out": f"{op.inputs[0]}~late",
                                 "vec_tile": ops.copy_tile(op, tuple(src.shape))
                                 or op.vec_tile})
        node = self.memo.build(ops.BUILDERS["copy"], len(self.nodes), copy, [src], self.limits)
        node.extra["readers"] = 1
        self._sources(node)         # a view or reshape of the value: the boxes it covers
        self.nodes.append(node)
        self._read_by.setdefault(src.node, set()).add(node.index)
        self._new_group(node, False)
        self._track_valid(node, [src])
        return LocalValue(node.index, node.out_shape, node.out_dtype)

    _op_scatter_update = _op_assemble

    def _in_producer_geometry(self, op: TracedOp, src: LocalValue, target: GmValue, offsets,
                              shape: tuple[int, ...]):
        """(target, offsets) of an assemble of a reshaped result seen in the result's own
        geometry: the target tensor reshaped in place so its trailing dims are the result's
        (as upstream's copy-out writes a tile with strides).  The value must be the whole
        result reshaped, assembled over whole trailing dims of a whole tensor."""
        t = target.shape
        whole = len(target.pieces) == 1 and target.pieces[0].shape == target.buffer_shape \
            and tuple(t) == tuple(target.buffer_shape)
        inner_t, inner_p = int(np.prod(t[1:])), int(np.prod(shape[1:]))
        if not (whole and all(step[0] == "reshape" for step in src.path)
                and tuple(src.shape[1:]) == tuple(t[1:]) and not any(offsets[1:])
                and (t[0] * inner_t) % inner_p == 0 and (offsets[0] * inner_t) % inner_p == 0):
            raise ConfigError(f"field '{op.where}': assemble of '{op.inputs[0]}', a reshaped "
                              f"on-chip value whose tiles are no boxes of it, is modeled only "
                              f"for the whole result assembled over whole rows of a tensor; "
                              f"choose a TileShape whose tiles are whole rows of it, or "
                              f"assemble into an inplace reshape of the GM target.")
        (p,) = target.pieces
        geometry = (t[0] * inner_t // inner_p, *shape[1:])
        buffer = f"{p.base}@{'x'.join(map(str, geometry))}"
        seen = GmValue((Piece(buffer, (0,) * len(geometry), geometry, p.base),), geometry,
                       target.dtype, target.format, target.bypass, geometry)
        return seen, (offsets[0] * inner_t // inner_p,) + (0,) * (len(geometry) - 1)

    def _compute(self, op: TracedOp) -> None:
        inputs = [self.lookup(name, op) for name in op.inputs]
        builder = ops.BUILDERS.get(op.op) or sort.BUILDERS[op.op]
        node = self.memo.build(builder, len(self.nodes), op, inputs, self.limits)
        if op.op == "gather_in_ub":
            self._gather_rows(node)
        self._sources(node)
        readers = self._readers[self._at] if self._readers else 2     # 2: unknown
        node.extra["readers"] = readers
        self._place(node)
        value = LocalValue(node.index, node.out_shape, node.out_dtype)
        partial, combine = node, sort.COMBINERS.get(op.op, ops.combine)
        while partial.extra.get("splits", 1) > 1:     # a split reduce: combine its partials
            partial.extra["readers"] = 1                # its combine
            partial = combine(len(self.nodes), partial, value, self.limits)
            partial.extra["readers"] = readers
            self._place(partial)
            value = LocalValue(partial.index, partial.out_shape, partial.out_dtype)
        self._track_valid(node, inputs)
        self.values[op.out] = value

    def _gather_rows(self, node: Node) -> None:
        """The param row each valid row of a gather_in_ub reads, and the block-table entry
        it looks up (``extra`` gather_rows, gather_entries, in the param's and the table
        view's coordinates).

        The addresses are data: the token indices and the block table a run reads.  As
        for every address that depends on tensor values (a view at block_table[b, i], a
        scatter_update's rows), they come from the kernel's ``values`` of those tensors.
        Where the kernel gives none (indices made on the device, by a topk), the model
        cannot know which rows, nor which L2 lines, a run reads; it then takes a
        deterministic stand-in, as the paged ``gather`` takes an ordered block table:
        each index is its own column in the indices tensor (a query selecting the first
        tokens in order, which is what a top-k returns for a sequence no longer than k),
        and each block-table entry its position in the table (every batch's blocks
        stored one after another).  Stand-in rows past the KV cache wrap round it; rows
        from data that pass it are refused."""
        param, idx, table = node.inputs
        op = node.op
        block = int(op.get("block_size"))
        k = node.out_shape[0]
        idx_valid = idx.valid if isinstance(idx, GmValue) else self._local_valid(idx)
        valid = min(k, int(idx_valid[1])) if idx_valid is not None else k
        tokens, entries = self._int_data(idx), self._int_data(table)
        given_tokens, given_table = tokens is not None, entries is not None
        if tokens is None:
            tokens = self._positions(idx, flat=False)
        if entries is None:
            entries = self._positions(table, flat=True)
        tokens = tokens[:valid]
        (piece,) = param.pieces
        room = int(param.buffer_shape[0]) - int(piece.offsets[0])
        if given_tokens and (tokens < 0).any():
            raise ConfigError(f"field '{op.where}': gather_in_ub index {int(tokens.min())} in "
                              f"the values of '{self._data_name(idx)}' is negative; token "
                              f"indices count from 0.")
        logical = tokens // block
        # the table row's length is its shape, known with or without its values: a token
        # past it is a data error, not a stand-in to wrap
        if given_tokens and (logical >= len(entries)).any():
            raise ConfigError(f"field '{op.where}': gather_in_ub token {int(tokens.max())} "
                              f"needs block-table entry {int(logical.max())}, past the "
                              f"{len(entries)} entries of the block-table row; check the "
                              f"values of '{self._data_name(idx)}' and the block_size "
                              f"{block}.")
        logical = logical % max(len(entries), 1)
        rows = entries[logical] * block + tokens % block
        if given_table and ((rows < 0) | (rows >= room)).any():
            bad = int(rows[(rows < 0) | (rows >= room)][0])
            raise ConfigError(f"field '{op.where}': gather_in_ub row {bad} (from the values "
                              f"of '{self._data_name(table)}', block_size {block}) lies "
                              f"outside the {room} rows of its param from its view's "
                              f"offset; check the block table's values.")
        node.extra["gather_rows"] = rows % max(room, 1)
        node.extra["gather_entries"] = logical

    def _data_name(self, value) -> str:
        return tensor_of(value.pieces[0].base) if isinstance(value, GmValue) else "an op result"

    def _int_data(self, value) -> np.ndarray | None:
        """The one row of int data a [1, n] GM value holds, from the kernel's ``values``
        (-1 past the tensor's edge), or None when the kernel gives none."""
        if not isinstance(value, GmValue) or len(value.pieces) != 1:
            return None
        (piece,) = value.pieces
        data = self.kernel.values.get(tensor_of(piece.base))
        if data is None:
            return None
        array = np.asarray(data, np.int64)
        if array.size != int(np.prod(value.buffer_shape)):
            return None
        array = array.reshape(value.buffer_shape)
        r, c = int(piece.offsets[0]), int(piece.offsets[1])
        n = int(value.shape[1])
        out = np.full(n, -1, np.int64)
        if r < array.shape[0]:
            part = array[r, c:c + n]
            out[:part.size] = part
        return out

    @staticmethod
    def _positions(value, flat: bool) -> np.ndarray:
        """Stand-in data of a [1, n] value: each element's column in its tensor, or with
        ``flat`` its row-major position there (an op's result: 0, 1, ...)."""
        n = int(value.shape[1])
        if not isinstance(value, GmValue) or len(value.pieces) != 1:
            return np.arange(n, dtype=np.int64)
        (piece,) = value.pieces
        start = int(piece.offsets[1])
        if flat:
            start += int(piece.offsets[0]) * int(value.buffer_shape[1])
        return start + np.arange(n, dtype=np.int64)

    def _sources(self, node: Node) -> None:
        """The producer boxes each tile reads of a view or reshape of an on-chip value."""
        source = {}
        for i, value in enumerate(node.inputs):
            if not isinstance(value, LocalValue):
                continue
            if self.nodes[value.node].op.op == "concat" and value.path and \
                    not self._concat_view_in_ub(value):
                # upstream's concat copies its inputs into a tensor and assembles that into
                # its result (Cat in framework/src/interface/operation/vector/
                # tensor_transformation.cpp); a result too large for UB, or read through a
                # reshape or a view at an offset off the 32-byte block, is a GM tensor, and
                # a view or reshape of it loads it back from GM.  An op reading the result
                # itself, tile for tile in the concat's leaf task, reads it in UB: the GDR
                # case's final inverse (docs/cases.md G1) reads each step's concat with
                # ``+ 0.0`` and copies in and out only at the ends of its chain
                lo, hi, ok = value.source(node.in_lo[i], node.in_hi[i])
                box = (lo, hi, self.nodes[value.node].out_shape) if ok.all() else \
                    value.workspace_box(node.in_lo[i], node.in_hi[i])
                if box is not None:
                    _through_workspace(node, i, box, (lo, hi) if ok.all() else None, source)
                    continue
            if not value.path:
                continue
            producer = self.nodes[value.node]
            box = value.unaligned_box(node.in_lo[i], node.in_hi[i], producer.out_shape,
                                      DTYPE_BYTES[value.dtype])
            lo, hi, ok = value.source(node.in_lo[i], node.in_hi[i])
            if box is not None:
                # out to the workspace and back even inside the producer's leaf task
                node.extra.setdefault("unaligned", set()).add(i)
                _through_workspace(node, i, box, (lo, hi) if ok.all() else None, source,
                                   None if ok.all() else value.bounds(node.in_lo[i],
                                                                      node.in_hi[i]))
                continue
            if not ok.all():
                # tiles that are no contiguous run of the reshaped rows: the producer's
                # result goes out to its workspace and comes back in that geometry (the
                # copy-out / copy-in a reshape costs when its layout cannot stay in UB)
                box = value.workspace_box(node.in_lo[i], node.in_hi[i])
                if box is not None:
                    # what it reads lies in these producer boxes: inside the producer's own
                    # tile, the read can stay in UB as a strided view (_keep_on_chip)
                    _through_workspace(node, i, box, None, source,
                                       value.bounds(node.in_lo[i], node.in_hi[i]))
                    continue
                # a view lies between the reshape and the producer (a row of a larger
                # on-chip value, reshaped, then viewed: the GDR case's inverse,
                # row.reshape([8, 16]).view([8, i])).  Each row of the tile is still a run
                # of the producer's result, which upstream reads where it lies in UB as a
                # strided view; the model takes the runs' bounding box in the producer's
                # result (from its workspace when the producer is in another leaf task,
                # where that box overstates the bytes)
                source[i] = value.bounds(node.in_lo[i], node.in_hi[i])
                continue
            source[i] = (lo, hi)
        if source:
            node.extra["source"] = source

    def _concat_view_in_ub(self, value: LocalValue) -> bool:
        """A view of a concat's result read where it lies in UB.  Upstream types an
        assemble's result as UB unless it is over 0.35 of UB (among other conditions: an
        outcast, a 32-byte misaligned assemble offset), and a view of a UB tensor at a
        static 32-byte aligned offset is a UB address (AssignMemoryType and GenerateMoveOp,
        which makes a view a copy-in only from DDR: framework/src/passes/tile_graph_pass/
        data_path/assign_memory_type_legacy.cpp and generate_move_op.cpp at 883e7dfb).  A
        reshape between stays on the GM path."""
        producer = self.nodes[value.node]
        elem = DTYPE_BYTES[producer.out_dtype]
        tile = self._tile_bytes.out(producer)
        if tile > CONCAT_UB_SHARE * self.limits.buffers.ub:     # per tile, as upstream's
            return False                                          # tile graph types it
        for step in value.path:
            if step[0] != "view":
                return False
            offset = int(_ravel(np.asarray([step[1]], np.int64), list(step[2]))[0])
            if offset * elem % UB_BLOCK_BYTES:
                return False
        return True

    def _in_box(self, node: Node, i: int):
        """Input i's boxes in its producer's coordinates (the node's own for a plain value)."""
        return node.extra.get("source", {}).get(i, (node.in_lo[i], node.in_hi[i]))

    def _track_valid(self, node: Node, inputs) -> None:
        valids = [v.valid if isinstance(v, GmValue) else self._local_valid(v) for v in inputs]
        if node.op.op in ops.REDUCE_OPS:
            # the rows that hold data keep it; the reduced axis is one value (or gone)
            if valids[0] is not None:
                axis = node.op.get("axis") % len(inputs[0].shape)
                valid = list(valids[0])
                if node.op.get("keepdim", True):
                    valid[axis] = 1
                else:
                    del valid[axis]
                if tuple(valid) != tuple(node.out_shape):
                    self.valid[node.index] = tuple(valid)
            return
        if node.kind == "cube":
            self._track_matmul_valid(node, inputs, valids)
            return
        if node.op.op == "topk":
            if valids[0] is not None:
                valid = sort.valid_pairs(node, valids[0])
                if valid != tuple(node.out_shape):
                    self.valid[node.index] = valid
            return
        if node.op.op == "fillpad":
            return          # the padding filled: data everywhere
        if node.op.op in ("full", "expand") and node.op.get("valid_shape"):
            valid = tuple(min(v, s) for v, s in zip(node.op.get("valid_shape"), node.out_shape))
            if valid != tuple(node.out_shape):
                self.valid[node.index] = valid
            return
        if node.op.op == "gather_in_ub":
            # the rows its valid indices name, the param's valid columns
            cols = valids[0][1] if valids[0] is not None else node.out_shape[1]
            valid = (len(node.extra["gather_rows"]), min(int(cols), node.out_shape[1]))
            if valid != tuple(node.out_shape):
                self.valid[node.index] = valid
            return
        if node.op.op == "transpose":
            perm = node.op.get("perm")
            valids = [tuple(v[p] for p in perm) if v is not None else None for v in valids]
        elif node.op.op not in ops.SAME_GEOMETRY and node.op.op != "move":
            return      # a concat, gather, expand or copy lays its result out anew
        rank = len(node.out_shape)
        # a broadcast input's valid region covers the leading dims it lacks and, along a dim
        # of 1 it stretches, the whole of the result's
        valids = [tuple(node.out_shape[:rank - len(v)]) + tuple(
            o if s == 1 and d >= 1 else d
            for d, s, o in zip(v, x.shape, node.out_shape[rank - len(v):]))
                  for v, x in zip(valids, inputs) if v is not None]
        if valids:
            self.valid[node.index] = tuple(min(d) for d in zip(*valids))

    def _track_matmul_valid(self, node: Node, inputs, valids) -> None:
        """A matmul's result holds data in the rows A holds and the columns B does (a
        view with a valid_shape on a tail of M or N)."""
        if valids[0] is None and valids[1] is None:
            return
        va, vb = (v if v is not None else x.shape for v, x in zip(valids[:2], inputs))
        out = node.out_shape
        if node.op.get("transposed_batch"):         # A (M, B, K), the result (M, B, N)
            valid = (min(va[0], out[0]), out[1], min(vb[-1], out[2]))
        else:
            m = va[-1] if node.op.get("a_trans") else va[-2]
            n = vb[-2] if node.op.get("b_trans") else vb[-1]
            valid = (*out[:-2], min(m, out[-2]), min(n, out[-1]))
        if valid != tuple(out):
            self.valid[node.index] = valid

    # -- depth merge -------------------------------------------------------------------
    def _place(self, node: Node) -> None:
        self.nodes.append(node)
        for v in node.inputs:
            if isinstance(v, LocalValue):
                self._read_by.setdefault(v.node, set()).add(node.index)
        scope = node.op.scope
        if scope.id >= 0:
            gi = self._scope_group(node)
            if gi is None and scope.allow_cross_scope_merge and not scope.allow_parallel_merge:
                # the scope's first op may join a producer's subgraph that takes other
                # nodes; the scope's later ops then join that subgraph as their own
                gi = next((g for i, v in enumerate(node.inputs)
                           if (g := self._mergeable(node, i, v)) is not None), None)
                if gi is not None:
                    self._forced.setdefault(_scope_key(scope, node.kind), {})[gi] = None
            self._join(gi, node) if gi is not None else self._new_group(node, True)
            self._adopt_constants(node)
            self._run_sources_first(node)
            return self._keep_on_chip(node)
        # a constant's own subgraph is the last choice: the op's other producers come first
        order = sorted(range(len(node.inputs)),
                       key=lambda i: self._floating(node.inputs[i]) is not None)
        candidates = list(dict.fromkeys(g for i in order if (g := self._mergeable(
            node, i, node.inputs[i])) is not None))
        # ops that only share a GM input stay apart: upstream's DuplicateOp gives each
        # consumer its own view of the input before the partitioner, which merges along
        # producer-consumer edges only (framework/src/passes/tile_graph_pass/
        # graph_partition/iso_partitioner.cpp at 08cec41e4), so nothing groups them
        gi = self._absorbing(node, candidates) if len(candidates) > 1 else \
            next(iter(candidates), None)
        self._join(gi, node) if gi is not None else self._new_group(node, forced=False)
        self._adopt_constants(node)
        self._run_sources_first(node)
        self._keep_on_chip(node)

    def _absorbing(self, node: Node, candidates: list[int]) -> int:
        """The subgraph an op joins when it could join several of its producers'.

        A graph partitioner merges connected vector ops whatever order they were traced
        in; placing ops one at a time, an op that reads a chain loading only kernel inputs
        (a row of a GM tensor reshaped and transposed into a column, say) and a value
        computed earlier would join whichever input comes first, and the two chains would
        meet through GM.  So the op joins the subgraph with history, and the source-only
        chains it reads move into it when nothing else reads them and the union fits UB:
        the partial result stays on chip from one step to the next (the GDR case's
        row-by-row inverse, docs/cases.md G1, runs as one leaf task on the chip).
        """
        settled = [g for g in candidates if not self._source_only(g)]
        gi = settled[0] if settled else candidates[0]
        for g in candidates:
            if g != gi and self._source_only(g) and self._absorbable(node, g, gi):
                self._absorb(g, gi)
        return gi

    def _absorbable(self, node: Node, g: int, gi: int) -> bool:
        group, into = self.groups[g], self.groups[gi]
        if group.kind != into.kind or group.scope.id != into.scope.id:
            return False
        members = set(group.nodes)
        if any(self._read_by.get(n, set()) - members - {node.index} for n in members):
            return False      # another subgraph reads it: it stays where it is
        total = into.ub + group.ub + self._added_ub(node, gi) - sum(
            nbytes for v, nbytes in zip(node.inputs, self._tile_bytes.inputs(node))
            if isinstance(v, LocalValue) and v.node in members)
        if total <= self.limits.buffers.ub:
            return True
        merged = UbProfile(self.nodes, self._tile_bytes, sorted(into.nodes + group.nodes))
        return merged.peak_with(node.index) <= self.limits.buffers.ub

    def _absorb(self, g: int, gi: int) -> None:
        group, into = self.groups[g], self.groups[gi]
        if into.rank > group.rank:
            self._gm_moved(group.nodes)
        for base, accesses in self._own.pop(g, {}).items():
            self._own_of(gi, base).absorb(accesses)
        into.nodes = sorted(into.nodes + group.nodes)
        into.ub += group.ub
        for n in group.nodes:
            self.group_of[n] = gi
        into.resident |= group.resident
        group.nodes, group.resident, group.ub = [], set(), 0

    def _keep_on_chip(self, node: Node) -> None:
        """A reshaped read that is no run of the producer's rows but lies inside the
        producer's tile, in the producer's own leaf task: the tile is in UB, so the read is a
        strided view of it and goes neither out nor back through the workspace."""
        bounds = node.extra.get("bounds", {})
        unaligned = node.extra.get("unaligned", ())
        for i in list(bounds):
            value = node.inputs[i]
            if i in unaligned or self.group_of[value.node] != self.group_of[node.index] \
                    or not self._one_to_one(node, i, value):
                continue
            node.extra["scattered"].discard(i)
            del node.extra["via_workspace"][i]
            node.extra.setdefault("source", {})[i] = bounds.pop(i)

    def _floating(self, value) -> int | None:
        """The subgraph of an input-less op (``full``) that no consumer has read yet.

        Such an op has nothing to load and nothing before it, so upstream's partitioner puts
        it with the op that uses it; placing it when it is traced would leave it a subgraph
        of its own, and its consumer would read it through GM."""
        if not isinstance(value, LocalValue) or value.node in self._pinned:
            return None
        producer = self.nodes[value.node]
        gi = self.group_of[value.node]
        group = self.groups[gi]
        if producer.inputs or group.forced or group.nodes != [value.node]:
            return None
        return gi

    def _adopt_constants(self, node: Node) -> None:
        """Move the unread constants this op reads tile for tile into its subgraph; any
        other constant it reads stays where it is."""
        gi = self.group_of[node.index]
        for i, value in enumerate(node.inputs):
            old = self._floating(value)
            if old is None or old == gi:
                if isinstance(value, LocalValue):
                    self._pinned.add(value.node)
                continue
            if self.groups[gi].kind != "vector" or not self._adoptable(node, i, value):
                self._pinned.add(value.node)
                continue
            self._pinned.add(value.node)
            self.groups[old].nodes.clear()
            members = self.groups[gi].nodes
            members.insert(next((k for k, n in enumerate(members) if n > value.node),
                                len(members)), value.node)
            self.group_of[value.node] = gi

    def _scope_group(self, node: Node) -> int | None:
        """The subgraph of this op's scope it is forced into, if any.

        With ``allow_parallel_merge`` every op of the scope (in one loop body) joins one
        subgraph, all tiles included.  Without it (the int form, upstream's default) the
        scope only forces producer -> consumer chains together, past the UB and scope
        limits of the automatic merge: each tile stays its own subgraph, and an op whose
        tiles do not line up one-to-one with its producer's (a misaligned TileShape, the
        combine of a split reduce) starts another subgraph of the scope and meets it
        through GM.
        """
        scope = node.op.scope
        forced = self._forced.get(_scope_key(scope, node.kind))
        if not forced:
            return None
        if node.op.op == "gather_in_ub":
            # it reads its indices from GM: never in the subgraph that makes them
            made = {self.group_of[v.node] for v in node.inputs if isinstance(v, LocalValue)}
            forced = {g: None for g in forced if g not in made}
        if scope.allow_parallel_merge:
            # every op of the scope in one subgraph, unless that subgraph runs before a
            # producer of this op: then the op starts another subgraph of the scope
            return next((gi for gi in forced if not self._reads_later(node, gi)), None)
        # only a group holding a producer of this node can take it; upstream unions every
        # such pair, so the groups of all its producers in the scope become one
        linked = sorted({self.group_of[v.node] for i, v in enumerate(node.inputs)
                         if isinstance(v, LocalValue) and self.group_of[v.node] in forced
                         and self._one_to_one(node, i, v)},
                        key=lambda g: self.groups[g].rank)
        if not linked:
            return None
        gi = linked[-1]
        for g in linked[:-1]:
            self._unite(g, gi, node)
        # the union first, then any producer's group that could not join it
        kept = [gi] + [g for g in linked[:-1] if self.groups[g].nodes]
        return next((g for g in kept if not self._reads_later(node, g)), None)

    def _unite(self, early: int, late: int, node: Node) -> None:
        """Group ``early`` joins group ``late`` (both of the scope, a producer of ``node`` in
        each), as upstream's union of a scope's producer -> consumer pairs does.  The groups
        ranked between them that read ``early``'s results (directly or through each other)
        move to just after ``late``, in their order, so the call's task order stays a
        topological order.  Kept apart (the node then reads ``early`` through GM) when that
        cannot be: ``late`` or the node reads a group that must move (upstream would pull
        it into the union), or a group that stays ahead and ran after a moving one reads
        GM that one writes, or writes GM that one reads (the GM dependencies are found
        from the task order)."""
        lo, hi = self.groups[early].rank, self.groups[late].rank
        window = sorted((g for g in range(len(self.groups))
                         if lo < self.groups[g].rank < hi and self.groups[g].nodes),
                        key=lambda g: self.groups[g].rank)
        moving, moved_nodes = [early], set(self.groups[early].nodes)
        for g in window:
            if self._reads_any(self.groups[g].nodes, moved_nodes):
                moving.append(g)
                moved_nodes.update(self.groups[g].nodes)
        if self._reads_any(self.groups[late].nodes + [node.index],
                           moved_nodes.difference(self.groups[early].nodes)):
            return
        if self._writers and self._gm_order_matters(moving, [g for g in window + [late]
                                                             if g not in moving]):
            return
        self._rank_after(late, moving[1:])
        self._absorb(early, late)
        for forced in self._forced.values():
            forced.pop(early, None)

    def _gm_order_matters(self, moving: list[int], ahead: list[int]) -> bool:
        """Whether a group of ``ahead`` that ran after a group of ``moving`` reads or writes
        GM data that one writes, or writes GM data that one reads: moved behind it, the two
        would meet the other way round."""
        writes: dict[int, set] = {}
        for base, nodes in self._writers.items():
            for n in nodes:
                writes.setdefault(self.group_of[n], set()).add(base)
        reads = {g: {pc.base for n in self.groups[g].nodes for v in self.nodes[n].inputs
                     if isinstance(v, GmValue) for pc in v.pieces} for g in moving + ahead}
        for m in moving:
            later = [a for a in ahead if self.groups[a].rank > self.groups[m].rank]
            mine = writes.get(m, set())
            if any(mine & (reads[a] | writes.get(a, set())) or writes.get(a, set()) & reads[m]
                   for a in later):
                return True
        return False

    def _reads_any(self, readers, nodes: set) -> bool:
        return any(isinstance(v, LocalValue) and v.node in nodes
                   for n in readers for v in self.nodes[n].inputs)

    def _one_to_one(self, node: Node, i: int, value: LocalValue) -> bool:
        # a read through the workspace may still share the producer's leaf task (copy out,
        # copy in) when tile j reads inside producer tile j; boxes a reshape scatters over
        # the producer's rows cannot be told apart that way
        producer = self.nodes[value.node]
        if i in node.extra.get("scattered", ()):
            bounds = node.extra.get("bounds", {}).get(i)
            if bounds is None:
                return False
            lo, hi = bounds
            return producer.tiles == node.tiles and bool(np.all(lo >= producer.out_lo)) \
                and bool(np.all(hi <= producer.out_hi))
        if not value.path:
            return producer.tiles == node.tiles \
                and np.array_equal(node.in_lo[i], producer.out_lo) \
                and np.array_equal(node.in_hi[i], producer.out_hi)
        # a view or reshape: tile j reads inside the producer's tile j, which is in UB
        lo, hi = self._in_box(node, i)
        return producer.tiles == node.tiles and bool(np.all(lo >= producer.out_lo)) \
            and bool(np.all(hi <= producer.out_hi))

    def _reads_later(self, node: Node, gi: int) -> bool:
        """Joining group ``gi`` would make it read a group that runs after it: a cycle in
        the call's task order.  A constant the node will take into its group
        (``_adopt_constants``) does not count, nor a group that only loads the kernel's
        inputs, which can run anywhere before (``_run_sources_first``)."""
        rank = self.groups[gi].rank
        for j, v in enumerate(node.inputs):
            if not isinstance(v, LocalValue):
                if self._written_later(v, gi):
                    return True
                continue
            g = self.group_of[v.node]
            if g != gi and self.groups[g].rank > rank and not self._adoptable(node, j, v) \
                    and not self._source_only(g):
                return True
        return False

    def _written_later(self, value: GmValue, gi: int) -> bool:
        """GM data an op of the call writes from group ``gi`` or one that runs after it: a
        reader joining ``gi`` would read it before it is written, or in another of the
        group's tasks, which no edge orders (the task order is what the GM dependencies
        are found from).  Any write into the same buffer counts, whatever part of it: a
        merge this refuses is one the reader could have made."""
        if not self._writers:
            return False
        rank = self.groups[gi].rank
        return any((g := self.group_of[n]) == gi or self.groups[g].rank > rank
                   for pc in value.pieces for n in self._writers.get(pc.base, ()))

    def _source_only(self, gi: int) -> bool:
        """A group free to run earlier: its ops read only GM tensors no op of the call has
        written so far (and results of its own ops), and none of its results is assembled
        into GM yet.  (An assemble traced after the move writes from the moved tasks, as any
        assemble writes from its producer's tasks wherever they run.)"""
        group = self.groups[gi]
        if group.forced:
            return False
        written = {t.pieces[0].base for _, t, *_ in self.assembles}
        assembled = {n for n, *_ in self.assembles}
        members = set(group.nodes)
        for n in group.nodes:
            if n in assembled:
                return False
            for v in self.nodes[n].inputs:
                if isinstance(v, LocalValue):
                    if v.node not in members:
                        return False
                elif any(pc.base in written for pc in v.pieces):
                    return False
        return True

    def _run_sources_first(self, node: Node) -> None:
        """Move the source-only groups this op reads and that run after its group to just
        before it, so the task order stays a topological order of the dependencies."""
        gi = self.group_of[node.index]
        for v in node.inputs:
            if isinstance(v, LocalValue):
                g = self.group_of[v.node]
                if g != gi and self.groups[g].rank > self.groups[gi].rank \
                        and self._source_only(g):
                    self.groups[g].rank = self._rank_before(gi)
                    # now ahead of groups traced before it: a write from it looks at
                    # their accesses too (_write_after_reads)
                    self._look_from[g] = min(self._look_from.get(g, len(self.nodes)),
                                             min(self.groups[gi].nodes))

    def _rank_after(self, gi: int, groups: list[int]) -> None:
        """Give ``groups`` ranks just after group ``gi``'s, in their order (exact integers
        between it and the group after it; every rank is spread out first if they do not
        fit)."""
        if not groups:
            return
        for g in groups:
            self._gm_moved(self.groups[g].nodes)
        moving = set(groups)
        target = self.groups[gi].rank
        above = min((self.groups[g].rank for g in range(len(self.groups))
                     if self.groups[g].rank > target and g not in moving),
                    default=target + _RANK_STEP)
        if above - target <= len(groups):
            self._spread_ranks(moving)
            target, above = self.groups[gi].rank, self.groups[gi].rank + _RANK_STEP
        step = (above - target) // (len(groups) + 1)
        for k, g in enumerate(groups, 1):
            self.groups[g].rank = target + k * step

    def _rank_before(self, gi: int) -> int:
        """A rank between group ``gi`` and the group that runs just before it (exact
        integers: ties would leave the order to the sort)."""
        target = self.groups[gi].rank
        below = max((g.rank for g in self.groups if g.rank < target), default=target - _RANK_STEP)
        if target - below < 2:      # no room left: spread every rank out again, same order
            self._spread_ranks()
            return self._rank_before(gi)
        return (below + target) // 2

    def _spread_ranks(self, skip=frozenset()) -> None:
        """Every group's rank but those in ``skip`` a step apart again, in the same order."""
        order = sorted((g for g in range(len(self.groups)) if g not in skip),
                       key=lambda g: self.groups[g].rank)
        for k, g in enumerate(order):
            self.groups[g].rank = k * _RANK_STEP
        self._next_rank = len(self.groups) * _RANK_STEP

    def _adoptable(self, node: Node, i: int, value) -> bool:
        return node.kind == "vector" and self._floating(value) is not None \
            and self._one_to_one(node, i, value)

    def _mergeable(self, node: Node, i: int, value) -> int | None:
        if not isinstance(value, LocalValue) or node.kind != "vector":
            return None
        if node.op.op == "gather_in_ub":
            return None     # its inputs are DDR (upstream's opcode): read from GM, not UB
        gi = self.group_of[value.node]
        group, producer = self.groups[gi], self.nodes[value.node]
        if group.kind != "vector" or producer.tiles != node.tiles:
            return None
        # a scope's subgraph (upstream's supernode) merges with other nodes only when its
        # sg_set_scope allows it (the triple's allow_cross_scope_merge); two scopes meet only
        # when both do
        if group.forced and not group.scope.allow_cross_scope_merge:
            return None
        if group.scope.id != node.op.scope.id and not (
                _crosses(group.scope) and _crosses(node.op.scope)):
            return None
        if not self._one_to_one(node, i, value):
            return None   # misaligned tiles meet through GM
        if not self._fits_ub(node, gi):
            return None   # the merged chain would not fit UB: split here
        if self._reads_later(node, gi):
            return None
        return gi

    def _added_ub(self, node: Node, gi: int | None) -> int:
        """Live UB bytes a node adds to a group: its output tile and inputs not yet on chip."""
        added = self._tile_bytes.out(node)
        resident = self.groups[gi].resident if gi is not None else ()
        if len(node.inputs) == 1 and not resident:
            # nothing to look up (a GM value's hash walks its pieces): a new group's op
            value = node.inputs[0]
            if gi is None or not isinstance(value, LocalValue) or \
                    self.group_of.get(value.node) != gi:
                added += self._tile_bytes.inputs(node)[0]
            return added
        seen = set()
        for value, nbytes in zip(node.inputs, self._tile_bytes.inputs(node)):
            inside = isinstance(value, LocalValue) and self.group_of.get(value.node) == gi \
                and gi is not None
            if not inside and value not in resident and value not in seen:
                added += nbytes
                seen.add(value)
        return added

    def _fits_ub(self, node: Node, gi: int) -> bool:
        """The group with ``node`` added fits UB: at once if every tile it ever holds fits
        together (the sum ``Group.ub`` keeps), else if the tiles live at the same time do
        (ubprofile.py: a long chain of small ops, the GDR case's inverse, docs/cases.md G1,
        then fits where the sum of all its tiles does not)."""
        limit = self.limits.buffers.ub
        return self.groups[gi].ub + self._added_ub(node, gi) <= limit or \
            self._profile(gi).peak_with(node.index) <= limit

    def _profile(self, gi: int) -> UbProfile:
        """Group ``gi``'s UB profile, rebuilt only when its ops changed other than by a
        join (an absorbed chain or an adopted constant)."""
        members = self.groups[gi].nodes
        profile = self._profiles.get(gi)
        if profile is None or profile.members != members:
            profile = self._profiles[gi] = UbProfile(self.nodes, self._tile_bytes, members)
        return profile

    def _check_reuse(self) -> None:
        """An op that fits UB only if its result takes an input's buffer (ops.elementwise):
        with its leaf function formed, that input must have no other consumer, else the
        op is out of UB as PyPTO's OoO check finds it."""
        for node in self.nodes:
            unsure = node.extra.get("ub_if_no_reuse")
            if unsure is None:
                continue
            gi = self.group_of[node.index]
            members = self.groups[gi].nodes
            need = int(self._profile(gi).values()[members.index(node.index)])
            if need > self.limits.buffers.ub:
                raise OoOError(op=f"{node.op.op} ({node.op.where})", tile=list(unsure[1]),
                               buffer="UB", need=need, capacity=self.limits.buffers.ub)

    def _join(self, gi: int, node: Node) -> None:
        group = self.groups[gi]
        group.ub += self._added_ub(node, gi) if node.kind == "vector" else 0
        group.resident.update(v for v in node.inputs if isinstance(v, GmValue))
        profile = self._profiles.get(gi)
        if profile is not None and profile.members == group.nodes:
            profile.extend(node.index)
        group.nodes.append(node.index)
        self.group_of[node.index] = gi
        for i, v in enumerate(node.inputs):
            if isinstance(v, GmValue):      # the GM reads a later write must keep behind it
                for base in {pc.base for pc in v.pieces}:
                    self._gm_accessed(base, node.index)
                    self._own_of(gi, base).reads.append((node.index, i))

    def _new_group(self, node: Node, forced: bool) -> None:
        gi = len(self.groups)
        self.groups.append(Group(node.kind, node.op.scope, forced, rank=self._next_rank))
        self._next_rank += _RANK_STEP
        if forced:
            scope = node.op.scope
            self._forced.setdefault(_scope_key(scope, node.kind), {})[gi] = None
        self._join(gi, node)

    # -- GM writes -------------------------------------------------------------------
    def _place_assembles(self) -> None:
        self.assembled: dict[int, list[tuple[GmValue, tuple[int, ...]]]] = {}
        for node, target, offsets, box in self.assembles:
            self.assembled.setdefault(node, []).append((target, offsets, box))
        self.spilled = set()
        for node in self.nodes:
            for i, value in enumerate(node.inputs):
                if isinstance(value, LocalValue) and (
                        self.group_of[value.node] != self.group_of[node.index]
                        or i in node.extra.get("via_workspace", {})):
                    self.spilled.add(value.node)

    # -- tile expansion --------------------------------------------------------------------
    def _expand(self, group: Group, record: bool = False):
        """The group's leaf tasks; with ``record``, also the GM offsets its access rows
        came through and each row's source among them (groupcache.py)."""
        nodes = [self.nodes[i] for i in group.nodes]
        tiles = nodes[0].tiles
        members = set(group.nodes)
        # a scope that merges parallel tiles: all of them in one task
        one_task = group.forced and group.scope.allow_parallel_merge
        if one_task:
            task_of = [np.zeros(n.tiles, np.int64) for n in nodes]
            n_tasks = 1
        else:
            task_of = [np.arange(tiles) for _ in nodes]
            n_tasks = tiles
        acc = _AccessRows()
        sums = _TaskSums(n_tasks, tile_per_task=not one_task)
        gm_offsets: list[tuple[int, ...]] = []    # the GM sources of its rows, in order
        for node, tasks in zip(nodes, task_of):
            # an op reading a result of this leaf task waits for it; loaded data it does not
            waits = any(isinstance(v, LocalValue) and v.node in members for v in node.inputs)
            sums.add(node, tasks, self._valid_fraction(node), waits)
            self._reads(acc, node, tasks, members, sums, gm_offsets)
            self._writes(acc, node, tasks, sums, gm_offsets)
        if one_task:   # an op's tiles are parallel branches; a chain of ops is not
            sums.in_flight[:] = max(max(n.tiles for n in nodes), 1)
        # isomorphic = same ops on the same tile sizes (outputs and every input)
        sizes = np.concatenate([n.out_hi - n.out_lo for n in nodes]
                               + [h - l for n in nodes for l, h in zip(n.in_lo, n.in_hi)],
                               axis=1) if not one_task else np.zeros((1, 1), np.int64)
        # a composite's instructions are part of what the leaf function runs (a binary op
        # with and without its row expand are two leaf functions)
        structure = tuple((n.op.op, n.out_dtype, n.kind) + ((n.vector_parts,) if
                                                           n.vector_parts else ())
                          for n in nodes)
        inverse, first = row_ids(sizes) if len(sizes) > 1 else \
            (np.zeros(len(sizes), np.int64), np.zeros(len(sizes), np.int64))
        sig_table = [(structure, one_task, tuple(map(int, sizes[i])), _op_details(nodes, i))
                     for i in first]
        # a constant the group adopted is not what it computes: label by the ops with inputs
        label = next((n.op.label for n in nodes if n.op.label and n.inputs),
                     next((n.op.label for n in nodes if n.op.label), ""))
        batch = TaskBatch(nodes[0].core, sig_table, inverse, label, sums.work(), acc.build(),
                          tuple(n.op.get("src") for n in nodes))
        return (batch, gm_offsets, acc.row_sources()) if record else batch

    def _valid_fraction(self, node: Node) -> np.ndarray:
        valid = self.valid.get(node.index)
        if valid is None or node.kind == "cube":
            # the Cube works on whole L0 tiles, valid rows or not (ops.matmul)
            return np.ones(node.tiles)
        v = np.asarray(valid)
        inside = np.clip(np.minimum(node.out_hi, v) - node.out_lo, 0, None)
        full = np.maximum((node.out_hi - node.out_lo).prod(axis=1), 1)
        return inside.prod(axis=1) / full   # 0 for an empty task past the valid region

    def _reads(self, acc: _AccessRows, node: Node, tasks, members, sums,
               gm_offsets: list) -> None:
        if node.op.op == "gather_in_ub":
            return self._gather_reads(acc, node, tasks, gm_offsets)
        for i, value in enumerate(node.inputs):
            lo, hi = node.in_lo[i], node.in_hi[i]
            elem = DTYPE_BYTES[value.dtype]
            # what the Cube reads comes into L1: fractal rows, K blocks
            into_l1 = {"to_l1": node.kind == "cube", "k_block": _k_block(node, i)}
            if isinstance(value, GmValue):
                if value.valid is not None:
                    hi = np.maximum(np.minimum(hi, np.asarray(value.valid)), lo)
                t, names, index, blo, bhi = value.region(lo, hi)
                first = len(gm_offsets)
                gm_offsets.extend(padded(p.offsets) for p in value.pieces)
                acc.add(tasks[t], names, index, blo, bhi, False, 0, elem, value, i,
                        source=first, **into_l1)
            elif i in node.extra.get("via_workspace", {}):
                # the producer's workspace in the reshaped geometry, read back even by a
                # tile of the producer's own leaf task
                lo, hi, shape = node.extra["via_workspace"][i]
                buf = f"{self.workspace}.n{value.node}"
                geometry = f"{buf}@{'x'.join(map(str, shape))}"
                view = GmValue((Piece(geometry, (0,) * len(shape), shape, buf),), shape,
                               value.dtype, "ND", False, shape)
                acc.add(tasks, [geometry], np.zeros(len(tasks), np.int64), lo, hi, False, 0,
                        elem, view, i, **into_l1)
                if value.node in members:
                    sums.put(sums.round_trips, tasks, np.ones(len(tasks)))
            elif value.node not in members:
                # a view or reshape reads only its boxes of the producer's workspace
                lo, hi = self._in_box(node, i)
                buf = f"{self.workspace}.n{value.node}"
                acc.add(tasks, [buf], np.zeros(len(tasks), np.int64), lo, hi, False, 0, elem,
                        None, i, shape=self.nodes[value.node].out_shape, **into_l1)

    def _gather_reads(self, acc: _AccessRows, node: Node, tasks, gm_offsets: list) -> None:
        """A gather_in_ub tile's reads: each of its valid rows one copy of that param row's
        columns (its own burst, at the row the data names), and the scalar reads of its
        indices and of the block-table entries they look up."""
        param, idx, table = node.inputs
        rows, entries = node.extra["gather_rows"], node.extra["gather_entries"]
        lo, hi = node.out_lo, node.out_hi
        r0 = np.minimum(lo[:, 0], len(rows))
        r1 = np.minimum(hi[:, 0], len(rows))
        cols_hi = hi[:, 1] if param.valid is None else np.minimum(hi[:, 1], param.valid[1])
        count = np.where(cols_hi > lo[:, 1], np.maximum(r1 - r0, 0), 0)
        kept = np.flatnonzero(count)
        if not kept.size:
            return
        count = count[kept]
        t = np.repeat(kept, count)
        starts = np.cumsum(count) - count
        j = np.arange(int(count.sum())) - np.repeat(starts, count) + np.repeat(r0[kept], count)
        (piece,) = param.pieces
        off = np.asarray(piece.offsets[:2], np.int64)
        blo = np.stack([rows[j], lo[t, 1]], axis=1) + off
        bhi = np.stack([rows[j] + 1, cols_hi[t]], axis=1) + off
        first = len(gm_offsets)
        gm_offsets.append(padded(piece.offsets))
        acc.add(tasks[t], [piece.buffer], np.zeros(len(t), np.int64), blo, bhi, False, 0,
                DTYPE_BYTES[param.dtype], param, 0, source=first)
        ones = np.ones(len(kept), np.int64)
        zeros = np.zeros(len(kept), np.int64)
        index_box = (np.stack([zeros, r0[kept]], 1), np.stack([ones, r1[kept]], 1))
        used = entries[j]
        table_box = (np.stack([zeros, np.minimum.reduceat(used, starts)], 1),
                     np.stack([ones, np.maximum.reduceat(used, starts) + 1], 1))
        for i, value, (blo, bhi) in ((1, idx, index_box), (2, table, table_box)):
            elem = DTYPE_BYTES[value.dtype]
            if isinstance(value, GmValue):
                tt, names, index, glo, ghi = value.region(blo, bhi)
                first = len(gm_offsets)
                gm_offsets.extend(padded(p.offsets) for p in value.pieces)
                acc.add(tasks[kept][tt], names, index, glo, ghi, False, 0, elem, value, i,
                        source=first, scalar=True)
            else:
                buf = f"{self.workspace}.n{value.node}"
                acc.add(tasks[kept], [buf], np.zeros(len(kept), np.int64), blo, bhi, False, 0,
                        elem, None, i, shape=self.nodes[value.node].out_shape, scalar=True)

    def _writes(self, acc: _AccessRows, node: Node, tasks, sums: "_TaskSums",
                gm_offsets: list) -> None:
        elem = DTYPE_BYTES[node.out_dtype]
        out_bytes = (node.out_hi - node.out_lo).prod(axis=1) * elem
        written, parts = 0, None     # whole-tile writes, and bytes written of views
        tags = self._tags(node)
        for target, offsets, box in self.assembled.get(node.index, []):
            off = np.asarray(offsets)
            lo, hi = node.out_lo, node.out_hi
            if box is not None:
                # a view of the result: each tile writes its part of the view's box
                lo, hi = np.maximum(lo, box[0]), np.minimum(hi, box[1])
                keep = np.flatnonzero((hi > lo).all(axis=1))
                lo, hi = lo[keep], hi[keep]
                if len(box) == 2:
                    off = off - box[0]
                else:       # a reshape between: the parts in the assembled value's geometry
                    lo, hi, _ = carry_out(lo, hi, box[2], box[3])
                    hi = np.minimum(hi, np.asarray(box[4]))     # up to its valid rows
                    inside = np.flatnonzero((hi > lo).all(axis=1))
                    lo, hi, keep = lo[inside], hi[inside], keep[inside]
            t, names, index, blo, bhi = target.region(lo + off, hi + off)
            if box is not None:
                t = keep[t]
            source = -1     # a box of a gathered target stays where it is (groupcache.py)
            if len(target.pieces) == 1:
                source = len(gm_offsets)
                gm_offsets.append(tuple(a + b for a, b in zip(padded(target.pieces[0].offsets),
                                                              padded(offsets))))
            acc.add(tasks[t], names, index, blo, bhi, True,
                    tags if np.isscalar(tags) else tags[t], elem, target, -1, source=source)
            if box is None:
                written += 1
            else:
                part = np.zeros(node.tiles)
                part[keep] = (hi - lo).prod(axis=1) * elem
                parts = part if parts is None else parts + part
        if node.index in self.spilled:
            buf = f"{self.workspace}.n{node.index}"
            acc.add(tasks, [buf], np.zeros(len(tasks), np.int64), node.out_lo, node.out_hi, True,
                    tags, elem, None, -1, shape=node.out_shape)
            written += 1
        if node.kind == "vector" and written:
            sums.put(sums.mte3_bytes, tasks, out_bytes * written)
        if node.kind == "vector" and parts is not None:
            sums.put(sums.mte3_bytes, tasks, parts)

    @staticmethod
    def _tags(node: Node):
        """Split-K partial sums accumulate: each K chunk is its own writer of the box."""
        if not node.accumulate:
            return 0
        k_lo = node.extra.get("k_lo", node.in_lo[0][:, 1])
        return np.unique(k_lo, return_inverse=True)[1].astype(np.int64) + 1

    def workspace_bytes(self) -> int:
        return sum(int(np.prod(self.nodes[i].out_shape)) * DTYPE_BYTES[self.nodes[i].out_dtype]
                   for i in self.spilled)


class _TaskSums:
    """A group's work per leaf task, added up op by op.

    Every op tile counts by its valid fraction: its bytes, fractals and steps and the
    tile itself (which pays the pipe's fixed cycles) are scaled alike.
    """

    def __init__(self, n: int, tile_per_task: bool):
        self.n, self.tile_per_task = n, tile_per_task
        self.vector_kinds: dict[str, int] = {}
        self.vector: list[tuple] = []        # VectorWork rows, op by op
        self.cube: dict[str, tuple[np.ndarray, np.ndarray]] = {}     # dtype: fractals, tiles
        self.mte1_bytes, self.mte1_steps = np.zeros(n), np.zeros(n)
        self.l0_serial_steps = np.zeros(n)
        self.fixp_bytes, self.fixp_tiles = np.zeros(n), np.zeros(n)
        self.mte3_bytes, self.flops, self.in_flight = np.zeros(n), np.zeros(n), np.zeros(n)
        self.round_trips = np.zeros(n)
        self.scalar_elements, self.scalar_loops = np.zeros(n), np.zeros(n)
        self.scalar_stores = np.zeros(n)

    def put(self, column: np.ndarray, tasks: np.ndarray, values) -> None:
        if self.tile_per_task:   # tile i is task i: a plain sum, faster than add.at
            column += values
        else:
            np.add.at(column, tasks, values)

    def _table(self, table: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
        if key not in table:
            table[key] = (np.zeros(self.n), np.zeros(self.n))
        return table[key]

    def add(self, node: Node, tasks: np.ndarray, frac: np.ndarray, waits: bool = False) -> None:
        if node.kind != "vector":
            fractals, tiles = self._table(self.cube, node.cube_dtype)
            self.put(fractals, tasks, node.fractals * frac)
            self.put(tiles, tasks, frac)
            self.put(self.mte1_bytes, tasks, node.mte1_bytes * frac)
            self.put(self.mte1_steps, tasks, node.k_steps * frac)
            if node.l0_single:
                self.put(self.l0_serial_steps, tasks, node.k_steps * frac)
            self.put(self.fixp_bytes, tasks, node.fixp_bytes * frac)
            self.put(self.fixp_tiles, tasks, frac)
        elif node.vector_parts:
            self._composite(node, tasks, frac, waits)
        elif node.vector_kind:      # (none for a move through UB: its copies only)
            kind = self.vector_kinds.setdefault(node.vector_kind, len(self.vector_kinds))
            if not waits:
                dependent = 0.0
            elif self.tile_per_task:
                dependent = frac
            else:   # the op's tiles in one task: one wait for the op before them
                dependent = np.zeros(len(tasks))
                dependent[:1] = frac[:1]
            self.vector.append((tasks, kind, node.vector_bytes * frac, frac,
                                node.vector_rows * frac, node.vector_row_bytes,
                                node.vector_reduce, dependent))
        for column, elements in ((self.scalar_elements, node.scalar_elements),
                                 (self.scalar_stores, node.scalar_stores)):
            if elements is not None and elements.any():
                self.put(column, tasks, elements * frac)
                self.put(self.scalar_loops, tasks, (elements > 0) * frac)
        self.put(self.flops, tasks, node.flops * frac)
        if self.tile_per_task:
            np.maximum(self.in_flight, node.in_flight, out=self.in_flight)
        else:
            np.maximum.at(self.in_flight, tasks, node.in_flight)

    def _composite(self, node: Node, tasks: np.ndarray, frac: np.ndarray, waits: bool) -> None:
        """A tile op made of several instructions: each kind's instructions over the whole
        tile, every one but the first waiting for the one before it (its flops and tiles in
        flight count once, in ``add``)."""
        for j, (name, count) in enumerate(node.vector_parts):
            kind = self.vector_kinds.setdefault(name, len(self.vector_kinds))
            chained = count - (0 if j or waits else 1)
            if self.tile_per_task:
                dependent = frac * chained
            else:   # the op's tiles in one task: the chain counts once for the op
                dependent = np.zeros(len(tasks))
                dependent[:1] = frac[:1] * chained
            self.vector.append((tasks, kind, node.vector_bytes * frac * count, frac * count,
                                node.vector_rows * frac * count, node.vector_row_bytes, False,
                                dependent))

    def work(self) -> Work:
        return Work.from_columns(
            VectorWork.of_rows(tuple(self.vector_kinds), self.vector),
            CubeWork.per_task(self.cube), self.n,
            mte1_bytes=self.mte1_bytes, mte1_steps=self.mte1_steps,
            l0_serial_steps=self.l0_serial_steps, fixp_bytes=self.fixp_bytes,
            fixp_tiles=self.fixp_tiles, mte3_bytes=self.mte3_bytes, flops=self.flops,
            in_flight=self.in_flight, round_trips=self.round_trips,
            scalar_elements=self.scalar_elements, scalar_stores=self.scalar_stores,
            scalar_loops=self.scalar_loops)


def _op_details(nodes: list[Node], task: int) -> tuple:
    """Per op of a leaf signature: (reduce axis or None, first input's tile, its full
    shape), what program.json tells the advisor about tiles that cut a reduce axis."""
    details = []
    for n in nodes:
        axis = n.extra.get("axis") if n.combine_of is None else None
        if not n.inputs:
            details.append((axis, None, None))
            continue
        row = min(task, n.tiles - 1)
        tile = tuple(int(v) for v in n.in_hi[0][row] - n.in_lo[0][row])
        details.append((axis, tile, tuple(int(v) for v in n.inputs[0].shape)))
    return tuple(details)


def _k_block(node: Node, i: int) -> tuple[int, int] | None:
    """A matmul operand's K axis (from the end) and the K extent each of its GM -> L1
    copies takes (ops.matmul ``l1_blocks``); None for anything else."""
    blocks = node.extra.get("l1_blocks") if node.kind == "cube" else None
    if blocks is None or i > 1:
        return None
    trans = bool(node.op.get("a_trans" if i == 0 else "b_trans"))
    k_last = (i == 0) != trans                  # A's K is its last axis, B's its second last
    return (-1 if k_last else -2), blocks[i]


# the largest share of UB an assembled (concatenated) tensor may take and stay in UB
# (AssignMemoryType at 883e7dfb, assign_memory_type_legacy.cpp)
CONCAT_UB_SHARE = 0.35


class _OwnAccesses:
    """What one group read and wrote of one GM buffer, tile by tile, for
    ``RootCallTiler._reads_own_writes``: reads as (node, input) until a write needs their
    boxes, then the boxes (GmValue.region results) with their bounding box; None for an
    access whose boxes are not known (it meets anything)."""

    def __init__(self):
        self.reads: list[tuple[int, int]] = []
        self.boxes: list = []
        self.bbox: tuple | None = None
        self.unknown = False

    def absorb(self, other: "_OwnAccesses") -> None:
        self.reads += other.reads
        self.boxes += other.boxes
        self.unknown |= other.unknown
        for b in other.boxes:
            self._grow(b)

    def add(self, boxes) -> None:
        if boxes is None:
            self.unknown = True
        else:
            self.boxes.append(boxes)
            self._grow(boxes)

    def meets(self, nodes, mine) -> bool:
        """Whether a box of ``mine`` is met by one of a later tile of what was seen."""
        for n, i in self.reads:
            node = nodes[n]
            value = node.inputs[i]
            boxes = value.region(node.in_lo[i], node.in_hi[i])
            if len({pc.buffer for pc in value.pieces}) > 1:
                self.unknown = True
            else:
                self.add(boxes)
        self.reads = []
        if mine is None or self.unknown:
            return bool(self.boxes) or self.unknown
        bounds = _bounds(mine)
        if self.bbox is None or bounds is None:
            return False
        if self.bbox[2] != bounds[2]:
            return True                 # another geometry of the buffer: not compared
        if not _box_meets(self.bbox, bounds):
            return False
        return any(_later_meets(mine, seen) for seen in self.boxes)

    def _grow(self, boxes) -> None:
        b = _bounds(boxes)
        if b is None:
            return
        if self.bbox is None:
            self.bbox = b
        elif self.bbox[2] != b[2]:
            self.unknown = True         # another geometry of the buffer: not compared
        else:
            self.bbox = (np.minimum(self.bbox[0], b[0]), np.maximum(self.bbox[1], b[1]), b[2])


def _bounds(boxes):
    """The bounding box of a GmValue.region result and its buffer, or None if empty."""
    _, names, bufs, lo, hi = boxes
    if not len(lo):
        return None
    return lo.min(axis=0), hi.max(axis=0), names[int(bufs[0])]


def _box_meets(a, b) -> bool:
    return bool(np.all(a[0] < b[1]) and np.all(b[0] < a[1]))


def _later_meets(writes, other) -> bool:
    """Whether a box of ``other`` (a GmValue.region result) under a later tile than a box of
    ``writes`` (another) overlaps it in the same buffer."""
    wt, wnames, wb, wlo, whi = writes
    rt, rnames, rb, rlo, rhi = other
    wbuf = np.asarray([wnames[b] for b in wb.tolist()], object)
    rbuf = np.asarray([rnames[b] for b in rb.tolist()], object)
    later = (rt[None, :] > wt[:, None]) & (rbuf[None, :] == wbuf[:, None])
    meet = np.all((rlo[None, :, :] < whi[:, None, :]) & (wlo[:, None, :] < rhi[None, :, :]),
                  axis=2)
    return bool((later & meet).any())


def _reader_counts(ops_: list[TracedOp]) -> list[int]:
    """Per op, how many later ops read its result by name (until the name is bound again);
    an assemble or scatter_update names its GM target, not a result of its own."""
    counts, current = [0] * len(ops_), {}
    for pos, op in enumerate(ops_):
        if op.op == "rename":
            # another name of its input's value: who reads it reads the value
            if op.inputs[0] in current:
                current[op.out] = current[op.inputs[0]]
            continue
        for name in dict.fromkeys(op.inputs):
            if name in current:
                counts[current[name]] += 1
        if op.op not in ("assemble", "scatter_update"):
            current[op.out] = pos
    return counts


def _tile_bytes(lo: np.ndarray, hi: np.ndarray, dtype: str) -> int:
    return int(ub_bytes(lo, hi, DTYPE_BYTES[dtype]).max()) if len(lo) else 0


def _squeeze_only(a, b) -> bool:
    """A reshape that only inserts or drops dims of 1 (upstream's unsqueeze, or x[b, :])."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def _leading_rows(valid, shape) -> bool:
    """A valid region that is some number of leading rows (whole in every other dim)."""
    return len(valid) == len(shape) and tuple(valid[1:]) == tuple(shape[1:]) \
        and 0 <= valid[0] <= shape[0]


def _check_inside(op: TracedOp, offsets, shape, outer) -> None:
    if len(offsets) != len(outer) or len(shape) != len(outer):
        raise ConfigError(f"field '{op.where}': offsets {list(offsets)} and shape "
                          f"{list(shape)} must have one entry per dim of {list(outer)}.")
    for o, s, d in zip(offsets, shape, outer):
        if o < 0 or o + s > d:
            raise ConfigError(f"field '{op.where}': region at offsets {list(offsets)} with "
                              f"shape {list(shape)} leaves the tensor of shape {list(outer)}.")
