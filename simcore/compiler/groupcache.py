"""Groups that repeat inside a root call: expand one, move the others' GM boxes.

A Python ``for`` unrolls into one root call, and its iterations usually give groups
(leaf functions) that differ only in where their views and assembles sit in GM: the
same ops on the same tiles, the same scopes and valid regions, the same workspace
traffic.  The tiler then builds the same work and the same access rows for each, only
the GM boxes shifted by how far the views moved and the workspace buffers named after
other nodes.  ``expand`` tiles the first group of each shape in full and gives a later
one its leaf tasks with every GM box moved and every workspace renamed; the callcache
(callcache.py) does the same for whole root calls of one shape.

The key holds everything ``RootCallTiler._expand`` reads besides GM offsets and node
indices: every field of every node (arrays by value), its inputs (a GM view by buffer,
piece shapes, dtype, format and valid region; an on-chip value by where its producer
sits, inside the group or not), its valid region, whether it spills, what it assembles
where (a gathered target, whose pieces decide which rows a box lands in, by its offsets
too).  A group the key cannot describe (an attribute of a kind it does not know) is
expanded in full.
"""
from __future__ import annotations

import re
from dataclasses import fields

import numpy as np

from .accesses import Accesses
from .columns import shifted
from .ops import Node
from .records import replaced
from .values import GmValue, LocalValue, padded

_NODE_FIELDS = tuple(f.name for f in fields(Node) if f.name not in ("index", "op", "inputs"))
_WORKSPACE = re.compile(r"^(?P<ws>[^.]+)\.n(?P<node>\d+)(?P<rest>@.*)?$")


class _Unknown(Exception):
    """A value the key has no rule for: the group is expanded in full."""


def _frozen(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        return ("nd", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted(((repr(k), _frozen(v)) for k, v in value.items())))
    if isinstance(value, (set, frozenset)):
        return ("set",) + tuple(sorted(repr(v) for v in value))
    raise _Unknown(type(value).__name__)


def _fields(tiler, node, extras: dict) -> tuple:
    """Every field of a node but its index, op and inputs: a node built from a template
    (nodememo.py) by the template's number and its own ``extra``."""
    shape = tiler.memo.shape_id.get(node.index)
    if shape is not None:
        return ("shape", shape, _frozen_extra(node.extra, extras))
    return tuple(_frozen(getattr(node, f)) for f in _NODE_FIELDS)


def _frozen_extra(extra: dict, extras: dict):
    """``_frozen(extra)``, made once per equal items: most nodes' extras hold a few plain
    numbers, alike over the groups of a Python ``for``."""
    try:
        items = tuple(extra.items())
        found = extras.get(items)
    except TypeError:       # an array or a set among them: frozen each time
        return _frozen(extra)
    if found is None:
        found = extras[items] = _frozen(extra)
    return found


def _gm(value: GmValue) -> tuple:
    """A GM value without where it sits."""
    return ("gm", tuple((p.buffer, p.shape, p.storage) for p in value.pieces), value.shape,
            value.dtype, value.format, value.bypass, value.buffer_shape, value.valid)


class Walk:
    """One group's key, the GM offsets its access rows move with (in the order the
    expansion adds them) and the nodes its workspace buffers are named after."""

    def __init__(self, tiler, group, extras: dict):
        self.offsets: list[tuple[int, ...]] = []
        self.workspaces: list[int] = []
        members = {n: j for j, n in enumerate(group.nodes)}
        parts = [group.kind, group.forced, group.scope.allow_parallel_merge]
        for n in group.nodes:
            node = tiler.nodes[n]
            op = node.op
            parts.append((op.op, op.label, op.get("src"), _fields(tiler, node, extras),
                          _frozen(tiler.valid.get(n)), n in tiler.spilled))
            for value in node.inputs:
                parts.append(self._input(tiler, value, members))
            if n in tiler.spilled:
                self.workspaces.append(n)
            for target, offsets, box in tiler.assembled.get(n, []):
                parts.append(self._assemble(target, offsets, box))
        self.key = tuple(parts)

    def _input(self, tiler, value, members) -> tuple:
        if isinstance(value, GmValue):
            self.offsets.extend(padded(p.offsets) for p in value.pieces)
            return _gm(value)
        if not isinstance(value, LocalValue):
            raise _Unknown(type(value).__name__)
        where = members.get(value.node)
        if where is None:     # read from its producer's workspace: named after it
            self.workspaces.append(value.node)
            where = ("out", tiler.nodes[value.node].out_shape)
        return ("local", where, value.shape, value.dtype, _frozen(value.path),
                _frozen(value.valid))

    def _assemble(self, target: GmValue, offsets, box) -> tuple:
        if len(target.pieces) > 1:
            # the pieces decide which rows a moved box lands in: only the same offsets match
            return ("asm", _gm(target), tuple(offsets), _frozen(box))
        (piece,) = target.pieces
        self.offsets.append(tuple(a + b for a, b in zip(padded(piece.offsets), padded(offsets))))
        return ("asm", _gm(target), _frozen(box))


class _Entry:
    """An expanded group and what moving it to another group of its key needs: its GM
    offsets, the access rows that move with them, and its workspace buffer names cut
    into (node, the rest) where they name one of the root call's workspaces."""

    def __init__(self, batch, walk: Walk, sources: np.ndarray, workspace: str):
        self.batch, self.workspaces = batch, walk.workspaces
        self.offsets = np.asarray(walk.offsets, np.int64)
        self.rows = np.flatnonzero(sources >= 0)
        self.sources = sources[self.rows]
        self.workspace = workspace
        self.names = [(b, _parsed(b.name, workspace),
                       _parsed(b.storage, workspace) if b.storage else None)
                      for b in batch.accesses.buffers]

    def moved(self, walk: Walk):
        """This group's batch for another of its key: workspaces renamed now, GM boxes
        moved by ``moved_boxes`` once every group's batch is joined (a numpy pass per hit
        costs more than the hit's other work)."""
        acc = self.batch.accesses
        buffers = self._renamed({str(a): str(b) for a, b in zip(self.workspaces,
                                                                 walk.workspaces)})
        shift = (self, walk.offsets) if self.rows.size else None
        return replaced(self.batch, accesses=replaced(acc, buffers=buffers), shift=shift)

    def _renamed(self, mapping: dict[str, str]) -> tuple:
        """The buffers with workspace names of this group's nodes in another's."""
        out = []
        for buffer, name, storage in self.names:
            new_name = self._name(buffer.name, name, mapping)
            new_storage = self._name(buffer.storage, storage, mapping)
            if new_name == buffer.name and new_storage == buffer.storage:
                out.append(buffer)
            else:
                out.append(replaced(buffer, name=new_name, storage=new_storage))
        return tuple(out)

    def _name(self, old: str, parsed, mapping: dict[str, str]) -> str:
        if parsed is None or parsed[0] not in mapping:
            return old
        return f"{self.workspace}.n{mapping[parsed[0]]}{parsed[1]}"


def _parsed(name: str, workspace: str):
    """(node, the rest) of a buffer of the root call's ``workspace``, else None."""
    m = _WORKSPACE.match(name)
    if m is None or m.group("ws") != workspace:
        return None
    return m.group("node"), m.group("rest") or ""


def moved_boxes(acc: Accesses, batches: list) -> None:
    """Move, in ``acc`` (the batches' accesses joined in order), the GM boxes of every
    batch a cache hit gave: each source's shift is the hit's GM offset less the expanded
    group's, and each moving row adds its source's shift."""
    hits = [(k, b.shift) for k, b in enumerate(batches) if b.shift is not None]
    if not hits:
        return
    starts = np.cumsum([0] + [b.accesses.size for b in batches])
    new, old, rows, sources, row_at, source_at = [], [], [], [], [], []
    for k, (entry, offsets) in hits:
        source_at.append(len(new))
        new.extend(offsets)
        old.append(entry.offsets)
        rows.append(entry.rows)
        sources.append(entry.sources)
        row_at.append(starts[k])
    shift = np.asarray(new, np.int64) - np.concatenate(old)
    moving = shifted(rows, row_at)
    by = shift[shifted(sources, source_at)]
    acc.lo[moving] += by
    acc.hi[moving] += by


class GroupCache:
    """The expanded groups of one root call, by key."""

    def __init__(self):
        self.entries: dict = {}
        self.hits = 0
        self.extras: dict = {}      # a node's extra items: their frozen form

    def expand(self, tiler, group):
        try:
            walk = Walk(tiler, group, self.extras)
            hash(walk.key)
        except (_Unknown, TypeError):
            return tiler._expand(group)
        entry = self.entries.get(walk.key)
        if entry is None:
            batch, offsets, sources = tiler._expand(group, record=True)
            if offsets == walk.offsets:     # the walk saw the sources the expansion used
                self.entries[walk.key] = _Entry(batch, walk, sources, tiler.workspace)
            return batch
        self.hits += 1
        return entry.moved(walk)
