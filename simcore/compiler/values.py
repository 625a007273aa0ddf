"""What an op's operand is: a region of GM (possibly stitched from pieces) or an on-chip result.

A ``GmValue`` is a view: one or more boxes of GM buffers stacked along axis 0
(a paged gather stacks KV blocks).  ``region`` maps a batch of boxes in the
value's coordinates to the GM boxes they touch, vectorised over tiles.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_RANK = 4
# UB pads each row of a tensor to this many bytes (PadLocalBuffer, docs/sources.md §2)
UB_BLOCK_BYTES = 32


@dataclass(frozen=True)
class Piece:
    buffer: str                 # the geometry its offsets are in: a tensor or an inplace reshape
    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    storage: str = ""           # the tensor whose bytes it is ("": the buffer itself)

    @property
    def base(self) -> str:
        return self.storage or self.buffer


@dataclass(frozen=True)
class GmValue:
    pieces: tuple[Piece, ...]
    shape: tuple[int, ...]
    dtype: str
    format: str = "ND"
    bypass: bool = False                 # set_cache_policy bypass
    buffer_shape: tuple[int, ...] = ()   # the whole GM tensor, for burst lengths
    valid: tuple[int, ...] | None = None

    def region(self, lo: np.ndarray, hi: np.ndarray):
        """(tile index, buffer names, buffer index, lo, hi) for the GM boxes under each tile."""
        names = [p.buffer for p in self.pieces]
        if len(self.pieces) == 1 and len(lo):
            # one box under every tile (a plain view): no stacking to undo
            (piece,) = self.pieces
            stop = piece.shape[0]
            if lo[:, 0].max() < stop and hi[:, 0].min() > 0:
                off = np.asarray(piece.offsets)
                plo, phi = lo + off, hi + off
                plo[:, 0] = np.maximum(lo[:, 0], 0) + off[0]
                phi[:, 0] = np.minimum(hi[:, 0], stop) + off[0]
                n = len(lo)
                return np.arange(n), names, np.zeros(n, np.int64), plo, phi
        tiles, bufs, los, his = [], [], [], []
        start = 0
        for k, piece in enumerate(self.pieces):
            stop = start + piece.shape[0]
            hit = (lo[:, 0] < stop) & (hi[:, 0] > start)
            idx = np.flatnonzero(hit)
            if idx.size:
                plo = lo[idx].copy()
                phi = hi[idx].copy()
                plo[:, 0] = np.maximum(plo[:, 0], start) - start
                phi[:, 0] = np.minimum(phi[:, 0], stop) - start
                off = np.asarray(piece.offsets)
                tiles.append(idx)
                bufs.append(np.full(idx.size, k, np.int64))
                los.append(plo + off)
                his.append(phi + off)
            start = stop
        if not tiles:
            empty = np.zeros((0, lo.shape[1]), dtype=np.int64)
            return np.zeros(0, np.int64), names, np.zeros(0, np.int64), empty, empty
        return (np.concatenate(tiles), names, np.concatenate(bufs), np.concatenate(los),
                np.concatenate(his))


@dataclass(frozen=True)
class LocalValue:
    """An op's result, or a view or reshape of one, which stays where the result lives.

    ``path`` leads from this value's coordinates back to the producer's result, outermost
    step last: ``("view", offsets, shape_before)`` shifts a box into the value it views,
    ``("reshape", shape_before, where)`` reinterprets the row-major elements of the value
    it reshapes.  A reader of such a value reads the producer's boxes ``source`` gives,
    on chip when it shares the producer's leaf task and through its workspace otherwise.
    """
    node: int
    shape: tuple[int, ...]
    dtype: str
    path: tuple = ()
    valid: tuple[int, ...] | None = None     # a view's valid region (views only)

    def source(self, lo: np.ndarray, hi: np.ndarray):
        """(lo, hi, ok): each box in the producer's coordinates; ok is False for a box a
        reshape does not carry onto one box (it is no contiguous run there)."""
        lo, hi, ok, _ = _carry(lo, hi, self.shape, self.path)
        return lo, hi, ok


    def bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per box, a box of the producer's result holding every element it reads: the box
        itself where ``source`` carries it, else the bounding box of the run of row-major
        elements from its first to its last element (a reshape keeps that order)."""
        shape = self.shape
        for step in reversed(self.path):
            if step[0] == "view":
                off = np.asarray(step[1], np.int64)
                lo, hi, shape = lo + off, hi + off, step[2]
                continue
            new_lo, new_hi, good = reshape_boxes(lo, hi, shape, step[1])
            if not good.all():
                b_lo, b_hi = _run_bounds(_ravel(lo, list(shape)),
                                         _ravel(np.maximum(hi - 1, lo), list(shape)), step[1])
                new_lo = np.where(good[:, None], new_lo, b_lo)
                new_hi = np.where(good[:, None], new_hi, b_hi)
            lo, hi, shape = new_lo, new_hi, step[1]
        return lo, hi

    def unaligned_box(self, lo: np.ndarray, hi: np.ndarray, producer_shape: tuple[int, ...],
                      elem: int):
        """(lo, hi, shape) for a read through a reshape whose layout UB cannot hold, else None.

        UB pads every tensor's rows to the 32-byte block, so a reshape whose input or output
        has a last axis of another size is no reinterpretation of the bytes in UB: upstream
        writes the input out to a GM workspace and reads the output back in its own
        geometry (RemoveUnalignedReshape, which tests the padding PadLocalBuffer gave the
        raw tensors; docs/sources.md §2).  The boxes are in the coordinates of that
        reshape's output when only reshapes lie between it and the producer, else in the
        producer's (the bytes are the same, the runs only approximately).  Consecutive
        reshapes count as one, from the first's input to the last's output, as upstream's
        RemoveRedundantReshape leaves no reshape of a reshape."""
        steps = self.path
        raw = tuple(producer_shape)          # the raw tensor a step's input is a view of
        padded = lambda shape: (shape[-1] * elem) % UB_BLOCK_BYTES != 0
        for first, k in _reshape_runs(steps):
            out = tuple(self.shape if k + 1 == len(steps) else
                        steps[k + 1][2 if steps[k + 1][0] == "view" else 1])
            if out != tuple(steps[first][1]) and (padded(raw) or padded(out)):
                break
            raw = out
        else:
            return None
        if any(s[0] == "view" for s in steps[:k]):
            # the copy-out writes a view: read the same bytes in the producer's geometry
            plo, phi, ok = self.source(lo, hi)
            return (plo, phi, tuple(producer_shape)) if ok.all() else None
        lo, hi, ok, shape = _carry(lo, hi, self.shape, steps[k + 1:])
        return (lo, hi, tuple(shape)) if ok.all() else None

    def workspace_box(self, lo: np.ndarray, hi: np.ndarray):
        """(lo, hi, shape) for a read that ``source`` cannot carry onto the producer's boxes:
        the boxes in the coordinates of the reshaped value that breaks them, a shape the
        producer's result can be reinterpreted as (every step between it and the producer is
        a reshape), so the read can go through the producer's workspace in that geometry;
        None when a view lies between (its elements are not the result's row-major bytes)."""
        shape = self.shape
        steps = list(reversed(self.path))
        for k, step in enumerate(steps):
            if step[0] == "view":
                off = np.asarray(step[1], np.int64)
                lo, hi, shape = lo + off, hi + off, step[2]
                continue
            new_lo, new_hi, good = reshape_boxes(lo, hi, shape, step[1])
            if good.all():
                lo, hi, shape = new_lo, new_hi, step[1]
                continue
            if any(rest[0] != "reshape" for rest in steps[k + 1:]):
                return None
            return lo, hi, tuple(shape)
        return None


def _reshape_runs(steps):
    """(first, last) step index of every run of consecutive reshapes in a path."""
    k = 0
    while k < len(steps):
        if steps[k][0] == "reshape":
            first = k
            while k + 1 < len(steps) and steps[k + 1][0] == "reshape":
                k += 1
            yield first, k
        k += 1


def _carry(lo: np.ndarray, hi: np.ndarray, shape: tuple[int, ...], steps):
    """Boxes of a value carried back through ``steps`` (a path, outermost last): (lo, hi,
    ok, shape) in the coordinates before the first step; ok is False for a box a reshape
    does not carry onto one box."""
    ok = np.ones(len(lo), bool)
    for step in reversed(steps):
        if step[0] == "view":
            off = np.asarray(step[1], np.int64)
            lo, hi, shape = lo + off, hi + off, step[2]
        else:
            lo, hi, good = reshape_boxes(lo, hi, shape, step[1])
            ok &= good
            shape = step[1]
    return lo, hi, ok, shape


def carry_out(lo: np.ndarray, hi: np.ndarray, steps, shape: tuple[int, ...]):
    """Boxes of the producer's result carried out through ``steps`` (a path, outermost
    last) into the coordinates of the value of ``shape`` at its end: (lo, hi, ok), a view
    clipping each box to its window; ok is False for a box a reshape does not carry onto
    one box."""
    ok = np.ones(len(lo), bool)
    for k, step in enumerate(steps):
        after = shape if k + 1 == len(steps) else \
            steps[k + 1][2] if steps[k + 1][0] == "view" else steps[k + 1][1]
        if step[0] == "view":
            off, top = np.asarray(step[1], np.int64), np.asarray(after, np.int64)
            lo, hi = np.clip(lo - off, 0, top), np.clip(hi - off, 0, top)
        else:
            lo, hi, good = reshape_boxes(lo, hi, tuple(step[1]), tuple(after))
            ok &= good
    return lo, hi, ok


def dim_groups(a: tuple[int, ...], b: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """The dims of two shapes of one element count in runs of equal products: a reshape
    [B*S, D] -> [B, S, D] is ([0], [0, 1]) and ([1], [2]); dims of 1 join the run before."""
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        ga, gb, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ga.append(i)
                pa *= a[i]
                i += 1
            else:
                gb.append(j)
                pb *= b[j]
                j += 1
        groups.append((ga, gb))
    if groups:
        groups[-1][0].extend(range(i, len(a)))
        groups[-1][1].extend(range(j, len(b)))
    return groups


def _ravel(idx: np.ndarray, dims: list[int]) -> np.ndarray:
    flat = np.zeros(len(idx), np.int64)
    for c, d in enumerate(dims):
        flat = flat * d + idx[:, c]
    return flat


def _run_bounds(first: np.ndarray, last: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """The smallest box of ``shape`` holding the row-major elements first..last: the dims
    before the first that differs are fixed, that one spans its range, later ones are whole."""
    dims = list(shape)
    a = np.stack(np.unravel_index(first, dims), axis=1).astype(np.int64)
    b = np.stack(np.unravel_index(last, dims), axis=1).astype(np.int64)
    differs = a != b
    lead = np.where(differs.any(axis=1), differs.argmax(axis=1), len(dims))
    col = np.arange(len(dims))[None, :]
    whole = col > lead[:, None]
    lo = np.where(whole, 0, a)
    hi = np.where(whole, np.asarray(dims)[None, :], b + 1)
    return lo, hi


def reshape_boxes(lo: np.ndarray, hi: np.ndarray, new: tuple[int, ...], old: tuple[int, ...]):
    """Boxes of a row-major reshape to ``new`` as boxes of ``old``, run of dims by run: a
    box is carried when, inside every run, it is one contiguous range of elements that
    is itself a box of the old dims.  (lo, hi, ok); rows with ok False are undefined."""
    n = len(lo)
    out_lo = np.zeros((n, len(old)), np.int64)
    out_hi = np.ones((n, len(old)), np.int64)
    empty = (hi <= lo).any(axis=1)          # a tile reading nothing of it (concat)
    lo, hi = np.where(empty[:, None], 0, lo), np.where(empty[:, None], 1, hi)
    ok = np.ones(n, bool)
    for ga, gb in dim_groups(tuple(new), tuple(old)):
        na, nb = [new[d] for d in ga], [old[d] for d in gb]
        start = _ravel(lo[:, ga], na)
        end = _ravel(hi[:, ga] - 1, na) + 1
        ok &= end - start == (hi[:, ga] - lo[:, ga]).prod(axis=1)   # one contiguous run
        found = np.zeros(n, bool)
        for k in range(len(nb) - 1, -1, -1):   # the innermost old dim the run fits in
            inner = int(np.prod(nb[k + 1:], dtype=np.int64))
            q0, q1 = start // inner, end // inner
            fits = ~found & (start % inner == 0) & (end % inner == 0) & \
                (q0 // nb[k] == (q1 - 1) // nb[k])
            if not fits.any():
                continue
            rows = np.flatnonzero(fits)
            outer = q0[rows] // nb[k]
            for c in range(k - 1, -1, -1):     # the dims before k: one index each
                out_lo[rows, gb[c]] = outer % nb[c]
                out_hi[rows, gb[c]] = out_lo[rows, gb[c]] + 1
                outer = outer // nb[c]
            out_lo[rows, gb[k]] = q0[rows] % nb[k]
            out_hi[rows, gb[k]] = (q1[rows] - 1) % nb[k] + 1
            for c in range(k + 1, len(nb)):
                out_lo[rows, gb[c]] = 0
                out_hi[rows, gb[c]] = nb[c]
            found |= fits
        ok &= found
    out_hi[empty] = 0
    out_lo[empty] = 0
    return out_lo, out_hi, ok | empty


def padded(t, fill: int = 0) -> tuple[int, ...]:
    """One box corner or extent as a MAX_RANK tuple (unused dims ``fill``)."""
    return tuple(int(x) for x in t) + (fill,) * (MAX_RANK - len(t))


def pad(a: np.ndarray, fill: int) -> np.ndarray:
    """Pad boxes to MAX_RANK columns so boxes of any rank share one array."""
    if a.shape[1] == MAX_RANK:
        return a
    out = np.full((a.shape[0], MAX_RANK), fill, dtype=np.int64)
    out[:, :a.shape[1]] = a
    return out


def grid(shape: tuple[int, ...], tile: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """All tile boxes of ``shape`` cut by ``tile``, row-major; tails are smaller."""
    axes = [np.arange(0, s, t) for s, t in zip(shape, tile)]
    if axes and all(a.size == 1 for a in axes):   # one tile covers the shape: no meshgrid
        lo = np.zeros((1, len(axes)), np.int64)
    else:
        mesh = np.meshgrid(*axes, indexing="ij")
        lo = np.stack([m.ravel() for m in mesh], axis=1).astype(np.int64)
    hi = np.minimum(lo + np.asarray(tile), np.asarray(shape))
    return lo, hi


def contiguous_bytes(lo: np.ndarray, hi: np.ndarray, buffer_shape: tuple[int, ...],
                     elem: int, fmt: str, to_l1: bool = False) -> np.ndarray:
    """Length of one burst: the contiguous run of a box in a row-major (ND) buffer.

    NZ stores 16x16 fractals contiguously, so a tile loads as one stream
    whatever its tail axis is.  ND moves one run per row of the box, and
    rows that span the whole buffer width join into one run, except on the way
    into L1 for the Cube, where ND is reordered into fractals row by row, and
    into UB when a row does not fill whole 32-byte blocks: UB pads each row to
    the block, so the next row lands apart from it (a [n, 1] fp32 column is n runs).
    """
    ext = hi - lo
    run = ext[:, -1].astype(np.int64)
    full = (run * elem) % UB_BLOCK_BYTES == 0 if not to_l1 else np.zeros(len(lo), bool)
    for d in range(len(buffer_shape) - 1, 0, -1):
        full &= ext[:, d] == buffer_shape[d]
        run = np.where(full, run * ext[:, d - 1], run)
    burst = run * elem
    if fmt == "NZ":
        # fractal blocks of a tile lie back to back: one stream per box
        burst = ext.prod(axis=1) * elem
    return np.maximum(burst, 1)


def ub_bytes(lo: np.ndarray, hi: np.ndarray, elem: int) -> np.ndarray:
    """The UB bytes a tile of each box takes: every row padded to whole 32-byte blocks, as
    upstream's PadLocalBuffer lays UB tensors out (so an fp32 [n, 1] column takes 32 n
    bytes, not 4 n)."""
    ext = hi - lo
    # the product over no leading dims is 1: a 1-D tile is one row
    return ext[:, :-1].prod(axis=1) * ((ext[:, -1] * elem + UB_BLOCK_BYTES - 1)
                                       // UB_BLOCK_BYTES * UB_BLOCK_BYTES)
