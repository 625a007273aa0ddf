"""Root calls that repeat: tile one, move the others' GM boxes.

A ``pypto.loop`` makes one root call per iteration (or per unrolled chunk), and its
calls usually differ only in where their views, gathers and assembles sit in GM: the
ops, tile shapes, scopes and dtypes are the same.  The tiler's leaf tasks, their work
and the shape of their accesses then come out the same too; only the GM boxes move.
So the first call of each such shape is tiled and merged in full, and a later one
takes its tasks with every access box shifted by how far the view (gather block,
assemble position) it came through moved.

A view or reshape of an op's result (an on-chip value) is no GM position: its offsets
are places inside that result, and they are part of the key, so calls of one key view
their results alike and only their GM data moves.

What the tiler decides from GM positions is whether two values or two boxes are the
same (a block loaded once per task, the L1-reuse classes of breadth merge).  A call
reuses another's tasks only when both give the same equality pattern over their GM values
and over their access boxes, and when every access box traces back to a unique shift;
otherwise it is tiled in full.  The
offset checks the tiler makes (a view or assemble inside its tensor, gather blocks that
exist) run on every call.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np

from .accesses import Accesses, GmBuffer
from .records import replaced
from .rows import row_ids
from .tiling import RootCallTiler, _check_inside
from .trace import attr_items
from .values import MAX_RANK, GmValue, LocalValue, padded

# attributes that say where an op's data sits in GM: a call may differ from another there
_POSITION_ATTRS = {"view": ("offsets",), "assemble": ("offsets",),
                   "scatter_update": ("offsets",), "gather": ("first_block",)}
# ops whose tiler handler only names data, GM data or (rename) an op's result (ops with
# no handler are computed)
_VALUE_HANDLERS = ("view", "reshape", "gather", "rename")
_WRITE_HANDLERS = ("assemble", "scatter_update")
# ops whose GM rows the index data of each call decides (tiling._gather_rows): a call is
# tiled in full, since another call's boxes moved by its views' offsets are not its rows
_DATA_ADDRESSED = ("gather_in_ub",)
# matching access boxes to the views they came through compares every box with every view
# of its buffer; a call past this many comparisons is tiled in full each time
MAX_MATCH_PAIRS = 4_000_000
# calls of one shape whose equality patterns differ (a view that meets another only in
# the first iteration) are each kept, up to this many; past it the rest are tiled in full
MAX_ENTRIES_PER_KEY = 4


def _frozen(value):
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _copies(op) -> bool:
    """A reshape that copies a GM value into a Vector op of its own (not in place): the
    tiler places it like a computed op."""
    return op.op == "reshape" and not op.get("inplace")


@functools.cache
def _has_handler(name: str) -> bool:
    """The tiler places this op with a handler of its own, not as a computed op."""
    return getattr(RootCallTiler, f"_op_{name}", None) is not None


def call_key(call) -> tuple | None:
    """What must match for two root calls to tile alike; None if it cannot be told."""
    bodies: dict = {}
    ops = []
    norm = call.instances
    computed: set = set()     # names of the call's op results (on-chip values)
    for op in call.ops:
        name = op.op
        if name in _DATA_ADDRESSED:
            return None     # rows from index data: no shift of another call's boxes
        drop = _POSITION_ATTRS.get(name)
        on_chip = name in _VALUE_HANDLERS and op.inputs[0] in computed
        if on_chip:
            drop = None       # a place inside an op's result, not in GM
        copy = _copies(op) and not on_chip
        if on_chip or copy or (name not in _VALUE_HANDLERS and name not in _WRITE_HANDLERS):
            computed.add(op.out)
        if drop is None and name not in _VALUE_HANDLERS and _has_handler(name):
            return None     # a handler this cache does not know how to replay
        items = attr_items(op.attrs)
        attrs = tuple([kv for kv in items if kv[0] not in drop]) if drop else items
        inputs, out = op.inputs, op.out
        if norm:
            inputs, out = tuple(norm.get(n, n) for n in inputs), norm.get(out, out)
        if drop is not None or (name in _VALUE_HANDLERS and not copy):
            # the tiler's GM handlers read neither tile shapes nor scopes nor labels
            ops.append((name, inputs, out, attrs))
            continue
        scope = op.scope
        # unrolled bodies are told apart by their loop indices: only which body matters
        body = bodies.setdefault(scope.loop_body, len(bodies))
        ops.append((name, inputs, out, op.vec_tile, op.cube_tile, op.label,
                    scope.id, scope.allow_parallel_merge, scope.allow_cross_scope_merge, body,
                    attrs))
    key = (call.root_key, tuple(ops))
    try:
        hash(key)
    except TypeError:       # a list among the attributes
        key = (call.root_key, tuple(op[:-1] + (tuple((k, _frozen(v)) for k, v in op[-1]),)
                                    for op in ops))
        try:
            hash(key)
        except TypeError:
            return None
    return key


@dataclass
class _Sources:
    """Where a call's GM data sits: one row per (op, operand or assemble, piece)."""
    values: list            # equality pattern: id of the first equal GM value, per value
    buffer: list[str]       # per source: the buffer its piece is in
    slot: list[int]         # operand index for reads, -1 for an assemble
    offset: np.ndarray      # per source: its piece's GM offset (+ the assemble's), padded
    extent: np.ndarray      # per source: the box its rows fall in (piece or assembled tile)
    multi_write: np.ndarray  # per source: an assemble into a value of several pieces
    write_offset: np.ndarray  # per source: the assemble offsets alone (0 for reads)
    workspace: str          # the prefix of the call's own GM workspace buffers
    instances: dict         # its fresh_per tensor instances, normalised (RootCall.instances)


_PLACEHOLDER = LocalValue(-1, (), "")


def replay(kernel, limits, call, call_index: int, assemble_shapes: list,
           tensors: dict) -> _Sources:
    """The GM values of ``call``'s ops, with the tiler's own checks of their offsets.

    Computed results are placeholders; an assemble's source shape (its valid region) is
    the one the first call of this shape found (``assemble_shapes``, in assemble order).
    """
    t = RootCallTiler(kernel, limits, call, call_index)
    values_of = t.values

    def lookup(name, op):
        # a whole tensor's value depends on the kernel alone: build it once per compile
        v = values_of.get(name)
        if v is None:
            v = tensors.get(name)
            if v is None:
                v = tensors[name] = RootCallTiler.lookup(t, name, op)
        return v

    t.lookup = lookup
    seen: dict = {}     # GM value: (its id, its pieces' (buffer, offset, extent) rows)
    values, buffer, slot, offset, extent, multi, woff = [], [], [], [], [], [], []
    no_shift = (0,) * MAX_RANK

    def note(v):
        found = seen.get(v)
        if found is None:
            found = seen[v] = (len(seen), [(p.buffer, padded(p.offsets), padded(p.shape, 1))
                                           for p in v.pieces])
        values.append(found[0])
        return found[1]

    def read(v, operand: int) -> None:
        """The GM pieces of ``v`` as sources an op's ``operand`` reads."""
        for piece, off, ext in note(v):
            buffer.append(piece)
            slot.append(operand)
            offset.append(off)
            extent.append(ext)
            multi.append(False)
            woff.append(no_shift)

    n_assemble = 0
    for op in call.ops:
        if op.op in _VALUE_HANDLERS:
            v = lookup(op.inputs[0], op)
            if isinstance(v, LocalValue):
                values_of[op.out] = _PLACEHOLDER    # on chip: the same in every call
            elif _copies(op):
                read(v, 0)                          # read by the copy
                values_of[op.out] = _PLACEHOLDER
            else:
                getattr(t, f"_op_{op.op}")(op)
            continue
        if op.op in _WRITE_HANDLERS:
            src_shape = assemble_shapes[n_assemble]
            n_assemble += 1
            target = t._gm(op, op.out)
            offsets = op.get("offsets")
            _check_inside(op, offsets, src_shape, target.shape)
            shift = padded(offsets)
            pieces = note(target)
            for name, off, _ in pieces:
                buffer.append(name)
                slot.append(-1)
                offset.append(tuple(a + b for a, b in zip(off, shift)))
                extent.append(padded(src_shape, 1))
                multi.append(len(pieces) > 1)
                woff.append(shift)
            continue
        for i, name in enumerate(op.inputs):
            v = lookup(name, op)
            if isinstance(v, GmValue):
                read(v, i)
        values_of[op.out] = _PLACEHOLDER
    as_array = lambda rows: np.asarray(rows, np.int64).reshape(-1, MAX_RANK)
    return _Sources(values, buffer, slot, as_array(offset), as_array(extent),
                    np.asarray(multi, bool), as_array(woff), t.workspace, call.instances)


@dataclass
class _Entry:
    """The first call of one shape: its tasks before and after breadth merge."""
    call: object
    call_index: int
    workspace: str
    pre: Accesses               # accesses before breadth merge
    post: object                # the merged _CallTasks
    kept: np.ndarray            # per post-merge access row: its row before the merge
    workspace_bytes: int
    assemble_shapes: list
    sources: _Sources | None = None
    pairs: tuple | None = None  # (row, source) of every source a row's box lies in
    partition: np.ndarray | None = None   # box ids of ``pre`` (equal boxes, equal ids)
    buffer_lead: np.ndarray | None = None  # per row of ``pre``: the first row of its buffer
    usable: bool = True


@dataclass
class CallCache:
    entries: dict = field(default_factory=dict)
    tensors: dict = field(default_factory=dict)     # whole-tensor GM values by name
    hits: int = 0

    def lookup(self, key) -> list[_Entry]:
        """The tiled calls a call of this key may take its tasks from."""
        entries = self.entries.get(key, ()) if key is not None else ()
        return [e for e in entries if e.usable]

    def store(self, key, call, call_index, tiler, pre: Accesses, post, kept) -> None:
        if key is None or tiler.regeometried:
            return    # an assemble's boxes are not where its offsets put them: tile each call
        entries = self.entries.setdefault(key, [])
        if len(entries) >= MAX_ENTRIES_PER_KEY:
            return
        # the region each assemble's bounds were checked on (the result's valid region,
        # or the view or reshape of it that is written)
        entries.append(_Entry(call, call_index, tiler.workspace, pre, post, kept,
                              tiler.workspace_bytes(), list(tiler.assemble_shapes)))

    def take(self, key, kernel, limits, call, call_index: int):
        """(merged tasks, workspace bytes) of ``call`` from a tiled call's, or None."""
        mine = None
        for entry in self.lookup(key):
            if entry.sources is None:
                _prepare(entry, kernel, limits, self.tensors)
                if not entry.usable:
                    continue
            if mine is None:
                # the assembled shapes follow from the key: every entry of it has the same
                mine = replay(kernel, limits, call, call_index, entry.assemble_shapes,
                              self.tensors)
            found = self.reuse(entry, mine)
            if found is not None:
                return found
        return None

    def reuse(self, entry: _Entry, mine: _Sources):
        """(merged tasks, workspace bytes) of the call whose GM values are ``mine`` from
        ``entry``'s, or None if they do not move alike."""
        a = entry.sources
        if mine.values != a.values or mine.offset.shape != a.offset.shape:
            return None
        delta_src = mine.offset - a.offset
        moved_write = np.any(mine.write_offset != a.write_offset, axis=1)
        if np.any(moved_write & a.multi_write):
            return None   # an assemble moved across the pieces of a gathered target
        rows, srcs, first = entry.pairs
        pre = entry.pre
        delta = np.zeros((pre.size, MAX_RANK), np.int64)
        if rows.size:
            d = delta_src[srcs]
            # every source a box lies in must move it alike
            if np.any(d != d[first]):
                return None
            delta[rows] = d
        # the boxes of a buffer that all move alike stay equal or apart as they were; only
        # a buffer whose boxes move apart (a gather's blocks) can make boxes meet or part
        apart = np.any(delta != delta[entry.buffer_lead], axis=1)
        if apart.any():
            rows = np.isin(pre.buffer, np.unique(pre.buffer[apart]))
            if not _same_partition(entry.partition[rows], _box_partition(
                    pre.buffer[rows], pre.lo[rows] + delta[rows], pre.hi[rows] + delta[rows])):
                return None
        self.hits += 1
        post = entry.post
        d_post = delta[entry.kept]
        rename = _renamer(entry.workspace, mine.workspace, a.instances, mine.instances)
        acc = replace(post.acc, buffers=tuple(rename(b) for b in post.acc.buffers),
                      lo=post.acc.lo + d_post, hi=post.acc.hi + d_post)
        return replace(post, acc=acc), entry.workspace_bytes


def _prepare(entry: _Entry, kernel, limits, tensors: dict) -> None:
    """Match the first call's access boxes to the views they came through."""
    src = replay(kernel, limits, entry.call, entry.call_index, entry.assemble_shapes, tensors)
    pre = entry.pre
    index = {b.name: i for i, b in enumerate(pre.buffers)}
    ws = np.asarray([b.name.startswith(f"{entry.workspace}.") for b in pre.buffers]
                    or [False])
    is_ws = ws[pre.buffer] if pre.size else np.zeros(0, bool)
    slot = np.where(pre.write, -1, pre.operand)
    src_buf = np.asarray([index.get(name, -1) for name in src.buffer], np.int64)
    src_slot = np.asarray(src.slot, np.int64)
    rows_all, srcs_all = [], []
    budget = MAX_MATCH_PAIRS
    for b in np.unique(src_buf[src_buf >= 0]):
        r = np.flatnonzero((pre.buffer == b) & ~is_ws)
        s = np.flatnonzero(src_buf == b)
        if not r.size:
            continue
        budget -= r.size * s.size
        if budget < 0:
            entry.usable = False
            return
        lo, hi = pre.lo[r][:, None, :], pre.hi[r][:, None, :]
        s_lo = src.offset[s][None, :, :]
        s_hi = s_lo + src.extent[s][None, :, :]
        inside = np.all((lo >= s_lo) & (hi <= s_hi), axis=2) & \
            (slot[r][:, None] == src_slot[s][None, :])
        ri, si = np.nonzero(inside)
        rows_all.append(r[ri])
        srcs_all.append(s[si])
    rows = np.concatenate(rows_all) if rows_all else np.zeros(0, np.int64)
    srcs = np.concatenate(srcs_all) if srcs_all else np.zeros(0, np.int64)
    matched = np.zeros(pre.size, bool)
    matched[rows] = True
    if not np.all(matched | is_ws):
        entry.usable = False      # a box no view accounts for: tile every call
        return
    order = np.argsort(rows, kind="stable")
    rows, srcs = rows[order], srcs[order]
    entry.sources = src
    entry.pairs = (rows, srcs, np.searchsorted(rows, rows))
    entry.partition = _box_partition(pre.buffer, pre.lo, pre.hi)
    _, lead, inverse = np.unique(pre.buffer, return_index=True, return_inverse=True)
    entry.buffer_lead = lead[inverse.ravel()]


def _box_partition(buffer, lo, hi) -> np.ndarray:
    return row_ids(np.concatenate([buffer[:, None], lo, hi], axis=1))[0] if buffer.size \
        else np.zeros(0, np.int64)


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    if a.size != b.size:
        return False
    if not a.size:
        return True
    pairs = np.unique(a * (int(b.max()) + 1) + b).size
    return pairs == np.unique(a).size == np.unique(b).size


def _renamer(old: str, new: str, old_instances: dict, new_instances: dict):
    prefix = f"{old}."
    by_norm = {norm: name for name, norm in new_instances.items()}
    instance = {name: by_norm[norm] for name, norm in old_instances.items()}

    def rename(b: GmBuffer) -> GmBuffer:
        if b.name.startswith(prefix):
            # a window on a workspace (an on-chip value's reshape) names it as its storage
            storage = f"{new}.{b.storage[len(prefix):]}" if b.storage.startswith(prefix) \
                else b.storage
            return replaced(b, name=f"{new}.{b.name[len(prefix):]}", storage=storage)
        if b.name in instance:
            return replaced(b, name=instance[b.name], storage=instance.get(b.storage, b.storage))
        if b.storage in instance:
            # a window on an instance (a reshape of it) is named after it: STORAGE@SHAPE
            storage = instance[b.storage]
            name = storage + b.name[len(b.storage):] if b.name.startswith(b.storage) \
                else b.name
            return replaced(b, name=name, storage=storage)
        return b
    return rename
