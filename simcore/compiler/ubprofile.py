"""The UB a leaf function holds while each of its ops runs, kept op by op.

A tile is live from the op that makes (or first loads) it to the last op of the function
that reads it, as the on-chip buffer allocator reuses a buffer once its last reader is
done; a result no op of the function reads yet is live at its producer only (it is copied
out from there).  An op whose result takes an input's buffer (upstream's SrcDstBufferMerge,
``UbProfile._reused_key``) holds one buffer for both while it runs.

The depth merge asks, for every op it may add to a subgraph, whether the subgraph's live
tiles still fit UB.  Rebuilding the profile for each question costs the subgraph's length,
so a long chain (a 100-op inverse of the GDR case's chunk loop) was quadratic.  A
``UbProfile`` is built from the ops in trace order and extended one op at a time;
``peak_with`` answers the question without changing it.  Adding an op only raises what
came before it: the tiles it reads live on until it runs, and an input's buffer an earlier
op's result took is no longer free for that when the input gains a reader.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..spec.kernel import DTYPE_BYTES
from . import ops
from .ops import Node
from .values import LocalValue


class TileBytes:
    """UB bytes of each node's result tile and of each input tile it reads (the largest
    over its tiles), measured once per node, and once per box arrays nodes share
    (nodememo.py: nodes of one template share them, and nothing changes them)."""

    def __init__(self, measure: Callable[[np.ndarray, np.ndarray, str], int]):
        self._measure = measure
        self._out: dict[int, int] = {}
        self._in: dict[int, list[int]] = {}
        # (id lo, id hi, dtype): (lo, hi, bytes); the arrays held so their ids stay theirs
        self._by_arrays: dict[tuple, tuple] = {}

    def out(self, node: Node) -> int:
        b = self._out.get(node.index)
        if b is None:
            b = self._out[node.index] = self._shared(node.out_lo, node.out_hi, node.out_dtype)
        return b

    def inputs(self, node: Node) -> list[int]:
        b = self._in.get(node.index)
        if b is None:
            b = self._in[node.index] = [self._shared(lo, hi, v.dtype) for v, lo, hi in
                                        zip(node.inputs, node.in_lo, node.in_hi)]
        return b

    def _shared(self, lo: np.ndarray, hi: np.ndarray, dtype: str) -> int:
        key = (id(lo), id(hi), dtype)
        hit = self._by_arrays.get(key)
        if hit is None:
            hit = self._by_arrays[key] = (lo, hi, self._measure(lo, hi, dtype))
        return hit[2]


class UbProfile:
    """The live UB bytes at each op of ``members`` (node indices in trace order)."""

    def __init__(self, nodes: list[Node], sizes: TileBytes, members=()):
        self.nodes, self.sizes = nodes, sizes
        self.members: list[int] = []
        self.at: dict[int, int] = {}
        self.live: dict = {}           # key: [first position, last position, bytes]
        self.reads: dict = {}          # key: how many ops of the function read it
        self.keys: list[dict] = []     # per position: its inputs' keys, each once
        self.reused: list[bool] = []   # per position: its result took an input's buffer
        self._values = np.zeros(16, np.int64)
        for n in members:
            self.extend(n)

    def values(self) -> np.ndarray:
        return self._values[:len(self.members)]

    def peak(self) -> int:
        return int(self.values().max()) if self.members else 0

    def peak_with(self, n: int) -> int:
        """The peak if op ``n`` (later in the trace than every member) joined."""
        return self._add(n, commit=False)

    def extend(self, n: int) -> None:
        self._add(n, commit=True)

    # -- one more op -------------------------------------------------------------------
    def _add(self, n: int, commit: bool) -> int:
        node, m = self.nodes[n], len(self.members)
        out_bytes = self.sizes.out(node)
        mine: dict = {}                # key: the value read through it
        new_spans: dict = {}           # key first read here: its bytes
        moved: dict = {}               # key read before: the position it was last live at
        for v, nbytes in zip(node.inputs, self.sizes.inputs(node)):
            key = ("node", v.node) if isinstance(v, LocalValue) and v.node in self.at else v
            if key not in mine:
                mine[key] = v
            span = self.live.get(key)
            if span is not None:
                moved.setdefault(key, span[1])
            elif key not in new_spans:
                new_spans[key] = nbytes
        last = {key: m for key in mine}
        reads = {key: self.reads.get(key, 0) + 1 for key in mine}

        def last_of(key):
            return last[key] if key in last else self.live[key][1]

        def reads_of(key):
            return reads[key] if key in reads else self.reads[key]

        def bytes_of(key):
            return self.live[key][2] if key in self.live else new_spans[key]

        values = self._values[:m] if commit else self._values[:m].copy()
        for key, before in moved.items():
            values[before + 1:m] += self.live[key][2]
        undone = [pos for pos in sorted(set(moved.values())) if self.reused[pos] and
                  self._reused_key(self.nodes[self.members[pos]], pos, self.keys[pos],
                                   last_of, reads_of, bytes_of) is None]
        for pos in undone:
            values[pos] += self.sizes.out(self.nodes[self.members[pos]])
        here = out_bytes + sum(self.live[key][2] for key in moved) + sum(new_spans.values())
        reuse_here = self._reused_key(node, m, mine, last_of, reads_of, bytes_of) is not None
        if reuse_here:
            here -= out_bytes
        if commit:
            for key in moved:
                self.live[key][1] = m
            for key, nbytes in new_spans.items():
                self.live[key] = [m, m, nbytes]
            self.live[("node", n)] = [m, m, out_bytes]
            self.reads.update(reads)
            for pos in undone:
                self.reused[pos] = False
            self.members.append(n)
            self.at[n] = m
            self.keys.append(mine)
            self.reused.append(reuse_here)
            if m == self._values.size:
                self._values = np.concatenate([self._values, np.zeros(m, np.int64)])
            self._values[m] = here
        return max(int(values.max()) if m else 0, here)

    def _reused_key(self, node: Node, pos: int, keys: dict, last_of, reads_of, bytes_of):
        """The input whose UB buffer the result of ``node`` (at ``pos``) takes, or None.
        Upstream's SrcDstBufferMerge (framework/src/passes/block_graph_pass/memory_reuse/
        merge_src_dst_buffer.cpp, before the OoO scheduler assigns addresses) gives an AIV
        op's result the buffer of its first input of the same size and element width that
        has no other consumer: no later reader in the leaf function, not copied out (a
        result read elsewhere or assembled), unless the opcode excludes reuse."""
        if node.kind != "vector" or not ops.reuses_buffer(node.op):
            return None
        out_bytes, width = self.sizes.out(node), DTYPE_BYTES[node.out_dtype]
        for key, value in keys.items():
            if last_of(key) != pos or reads_of(key) != 1 or bytes_of(key) != out_bytes or \
                    DTYPE_BYTES[value.dtype] != width:
                continue
            if isinstance(key, tuple) and self.nodes[key[1]].extra.get("readers", 2) != 1:
                continue            # also read elsewhere or assembled: it is copied out
            return key
        return None
