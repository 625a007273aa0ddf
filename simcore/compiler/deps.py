"""Tile-level dependencies from the GM regions each leaf task reads and writes.

A reader depends on the latest earlier writer of every distinct box it
overlaps (read after write); a writer likewise on earlier writers (write after
write), and the first later writer of every box a task reads waits for that read
(write after read).  Later writers wait for that one (write after write), so one
anti edge per read box orders them all.  The order is the task order: an assemble
writes from its producer's tasks, so the tiler moves a producer ranked before a reader
traced ahead of its assemble behind that reader (tiling.py ``_write_after_reads``), or,
where the reader needs the producer's group, writes the value from a copy task of its own
after the reads (``_late_copy``), as it does when tiles of one group would meet out of
order (``_reads_own_writes``).  tests/test_gm_order.py checks the traced order on random
kernels.  Upstream's HEAD orders the same three ways (its token pass,
``GetRWDepends`` in framework/src/interface/tensor/token_pass.h, and the runtime's
read and write cells between root calls); at 08cec41e4 it had data edges only, and
a read of a tensor traced before an independent write of it came out after the
write (a known issue its FAQ gives, docs/tutorials/appendix/issue.md).  ptolab keeps
the traced order.  Aligned producer and consumer tiles therefore give one-to-one edges and
misaligned ones many-to-many, as on the chip.  Split-K partial sums write one
box several times under different tags: a reader waits for all of them, while the
partial writes do not wait for each other.
Vectorised per buffer: candidates come from a window on the first axis, so the
cost follows the number of overlapping boxes, not the square of the tasks.

An inplace reshape is another geometry of its base tensor's bytes.  Accesses of a
tensor seen through one geometry compare boxes as above; a tensor seen through
several meets on flat byte ranges instead, so a box written as [64, 512] rows
overlaps the [128, 256] rows read from the same bytes.
"""
from __future__ import annotations

import numpy as np

from .accesses import used_rank
from .rows import distinct_row_ids
from .values import MAX_RANK

# A box of a tensor seen through several geometries is compared as the contiguous
# byte runs it covers (one run for a box of whole trailing rows).  Past this many runs
# it is compared as the hull of its bytes instead: conservative (it may add an edge to
# a writer of bytes between its runs, never miss one) and bounded in cost.
MAX_RUNS_PER_BOX = 1024


def _box_ids(buf, lo, hi, tag) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (buffer, box, tag) rows -> ids, and the first row of each id."""
    # box ids only pair queries with boxes; the edges come out sorted whatever they are
    return distinct_row_ids(np.concatenate([buf[:, None], lo, hi, tag[:, None]], axis=1))


def _expand_windows(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query index, position) pairs for every position in [start, stop) of every query."""
    counts = np.maximum(stop - start, 0)
    q = np.repeat(np.arange(start.size), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return q, np.repeat(start, counts) + offsets


def _geometries(buf: np.ndarray, buffers):
    """Per row: its geometry (one id per distinct storage and shape), its storage id, and
    whether that storage is seen through more than one geometry; and per geometry its
    row-major element strides (None without ``buffers``)."""
    if not buffers:
        return buf, buf, np.zeros(buf.size, bool), None
    geo_ids: dict = {}
    store_ids: dict = {}
    geo = np.asarray([geo_ids.setdefault((b.base, tuple(b.shape), b.elem), len(geo_ids))
                      for b in buffers], np.int64)
    store = np.asarray([store_ids.setdefault(b.base, len(store_ids)) for b in buffers],
                       np.int64)
    shapes_of = np.bincount(np.unique(np.stack([store, geo], 1), axis=0)[:, 0],
                            minlength=len(store_ids))
    rank = max((len(shape) for _, shape, _ in geo_ids), default=1)
    shape = np.ones((len(geo_ids), max(rank, MAX_RANK)), np.int64)
    for (_, dims, _), g in geo_ids.items():
        shape[g, :len(dims)] = dims
    strides = np.ones_like(shape)
    for d in range(shape.shape[1] - 2, -1, -1):
        strides[:, d] = strides[:, d + 1] * shape[:, d + 1]
    return geo[buf], store[buf], (shapes_of > 1)[store[buf]], (shape, strides)


def flat_runs(lo: np.ndarray, hi: np.ndarray, shape: tuple[int, ...], elem: int,
              max_runs: int = MAX_RUNS_PER_BOX):
    """(box index, first byte, end byte) of the contiguous runs each row-major box covers.

    The run of a box spans its dims from ``j`` on, where every dim after ``j`` is whole;
    the dims before ``j`` enumerate the runs.  A box of more than ``max_runs`` runs
    gives its hull: the bytes from its first to its last element.
    """
    rank = len(shape)
    lo, hi = lo[:, :rank].astype(np.int64), hi[:, :rank].astype(np.int64)
    ext = hi - lo
    strides = np.cumprod((list(shape[1:]) + [1])[::-1])[::-1].astype(np.int64)
    whole = ext == np.asarray(shape, np.int64)
    # j: the first dim from which every later dim is whole
    later_whole = np.flip(np.cumprod(np.flip(np.concatenate(
        [whole[:, 1:], np.ones((len(lo), 1), bool)], axis=1), axis=1), axis=1), axis=1)
    j = np.argmax(later_whole.astype(bool), axis=1)
    outer = np.arange(rank)[None, :] < j[:, None]
    count = np.where(outer, ext, 1).prod(axis=1)
    hull = count > max_runs
    count = np.where(hull, 1, count)
    box = np.repeat(np.arange(len(lo)), count)
    o = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    start = np.zeros(box.size, np.int64)
    for d in range(rank - 1, -1, -1):
        digit = np.where(outer[box, d] & ~hull[box], o % np.maximum(ext[box, d], 1), 0)
        o = np.where(outer[box, d] & ~hull[box], o // np.maximum(ext[box, d], 1), o)
        start += (lo[box, d] + digit) * strides[d]
    rows = np.arange(len(lo))
    length = np.where(hull, (hi - 1) @ strides + 1 - lo @ strides,
                      ext[rows, j] * strides[j])[box]
    return box, start * elem, (start + length) * elem


def _windows(qgeo, q_from, q_to, g, b_from, b_to):
    """Per query, the range of boxes (in the returned order) whose start lies in
    [query start - longest box of its geometry, query end): every box of the query's
    geometry whose span on this one axis overlaps the query's."""
    n_geo = int(max(g.max(), qgeo.max())) + 1
    length = b_to - b_from
    # a geometry's keys lie in [g * span, g * span + largest coordinate]: a window, which
    # reaches at most its geometry's longest box below its query, never enters another
    # geometry's keys
    span = int(max(b_to.max(), q_to.max(), 0)) + max(int(length.max()), 0) + 1
    key = g * span + b_from
    order = np.argsort(key, kind="stable")
    key = key[order]
    reach = _longest_per_geometry(g[order], length[order], n_geo)
    base = qgeo * span
    start = np.searchsorted(key, base + q_from - reach[qgeo], side="right")
    stop = np.searchsorted(key, base + q_to, side="left")
    return order, start, stop


def _longest_per_geometry(g_sorted, length, n_geo: int) -> np.ndarray:
    """Per geometry the longest of its boxes (0 without any), from boxes grouped by
    geometry: one reduce per group instead of an unbuffered maximum.at per box."""
    reach = np.zeros(n_geo, np.int64)
    heads = np.flatnonzero(np.concatenate([[True], g_sorted[1:] != g_sorted[:-1]]))
    reach[g_sorted[heads]] = np.maximum(np.maximum.reduceat(length, heads), 0)
    return reach


def _geometry_pairs(qrows, qgeo, qlo, qhi, boxes, box_geo, box_lo, box_hi, layout=None):
    """(query row, box) pairs whose boxes overlap within one geometry, every geometry at
    once.  Candidates come from a window on one axis: the first, or, when that is not
    selective (tiles cut the inner dims of a few outer rows), each box's span of
    row-major element offsets, which contains every element of the box."""
    g = box_geo[boxes]
    order, start, stop = _windows(qgeo, qlo[:, 0], qhi[:, 0], g, box_lo[boxes, 0],
                                  box_hi[boxes, 0])
    pairs = int(np.maximum(stop - start, 0).sum())
    if layout is not None and pairs > 8 * len(qrows) + 1024:
        shape, strides = layout
        width = qlo.shape[1]
        inside = np.all(box_hi[boxes] <= shape[g][:, :width], axis=None) and \
            np.all(qhi <= shape[qgeo][:, :width], axis=None)
        if inside:
            bs, qs = strides[g][:, :width], strides[qgeo][:, :width]
            flat = _windows(qgeo, (qlo * qs).sum(axis=1), ((qhi - 1) * qs).sum(axis=1) + 1, g,
                            (box_lo[boxes] * bs).sum(axis=1),
                            ((box_hi[boxes] - 1) * bs).sum(axis=1) + 1)
            if int(np.maximum(flat[2] - flat[1], 0).sum()) < pairs:
                order, start, stop = flat
    qi, pos = _expand_windows(start, stop)
    cand = boxes[order[pos]]
    hit = np.all((box_lo[cand] < qhi[qi]) & (qlo[qi] < box_hi[cand]), axis=1) & \
        (box_geo[cand] == qgeo[qi])
    return qrows[qi[hit]], cand[hit]


def _layouts(buffers) -> tuple[dict, np.ndarray]:
    """The distinct (shape, element size) of ``buffers``, and each buffer's index in them."""
    layouts: dict = {}
    layout_of = np.asarray([layouts.setdefault((tuple(b.shape), b.elem), len(layouts))
                            for b in buffers], np.int64)
    return layouts, layout_of


def _runs(ids, rows, buf, lo, hi, layouts: dict, layout_of: np.ndarray):
    """(id, first byte, end byte) of the runs of access ``rows``, each owned by its ``ids``:
    one pass per buffer shape (``_layouts``), however many buffers share it."""
    kind = layout_of[buf[rows]]
    order = np.argsort(kind, kind="stable")
    bounds = np.searchsorted(kind[order], np.arange(len(layouts) + 1))
    owner, first, end = [], [], []
    for (shape, elem), k in layouts.items():
        sel = order[bounds[k]:bounds[k + 1]]
        if sel.size == 0:
            continue
        box, s, e = flat_runs(lo[rows[sel]], hi[rows[sel]], shape, elem)
        owner.append(ids[sel][box])
        first.append(s)
        end.append(e)
    return np.concatenate(owner), np.concatenate(first), np.concatenate(end)


def _storage_pairs(queries, boxes, box_row, buf, lo, hi, buffers, store):
    """(query row, box) pairs of the storages seen through several geometries, every
    storage at once: the byte runs of every query against the byte runs of every box
    written to its storage."""
    layouts = _layouts(buffers)
    q_row, q_first, q_end = _runs(queries, queries, buf, lo, hi, *layouts)
    b_box, b_first, b_end = _runs(boxes, box_row[boxes], buf, lo, hi, *layouts)
    order, start, stop = _windows(store[q_row], q_first, q_end, store[box_row[b_box]],
                                  b_first, b_end)
    qi, pos = _expand_windows(start, stop)
    cand = order[pos]
    hit = q_first[qi] < b_end[cand]
    pairs = np.unique(np.stack([q_row[qi[hit]], b_box[cand[hit]]], 1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def region_edges(task, buf, lo, hi, write, tag, n_tasks: int,
                 buffers=(), kinds: bool = False):
    """Edges (src, dst), sorted, for accesses of tasks numbered in program order; with
    ``kinds``, also per edge whether it is only an anti edge (a read before a write,
    no data flows along it).

    ``buffers`` (the ``GmBuffer`` of every ``buf`` index) says which buffers are
    geometries of one storage; without it every buffer is its own.
    """
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if kinds:
        empty = empty + (np.zeros(0, bool),)
    w = np.flatnonzero(write)
    if w.size == 0:
        return empty
    geo, store, mixed, layout = _geometries(buf, buffers)
    rank = used_rank(buffers, lo, hi) if buffers else lo.shape[1]
    if rank < lo.shape[1]:
        # unused trailing dims overlap every box and add no byte offset: every per-row
        # temporary after this is only as wide as the buffers
        lo, hi = np.ascontiguousarray(lo[:, :rank]), np.ascontiguousarray(hi[:, :rank])
    box_id, first = _box_ids(geo[w], lo[w], hi[w], tag[w])
    box_row = w[first]
    box_lo, box_hi, box_tag = lo[box_row], hi[box_row], tag[box_row]
    box_geo, box_mixed = geo[box_row], mixed[box_row]
    # writes of each box ordered by task, keyed box * n + task for searchsorted
    keys = np.sort(box_id.astype(np.int64) * (n_tasks + 1) + task[w])
    q_all, c_all = [], []
    plain = np.flatnonzero(~box_mixed)
    if plain.size:
        # only accesses of a geometry something writes can meet a box
        written = np.zeros(int(geo.max()) + 1, bool)
        written[box_geo[plain]] = True
        queries = np.flatnonzero(~mixed & written[geo])
        q, c = _geometry_pairs(queries, geo[queries], lo[queries], hi[queries], plain,
                               box_geo, box_lo, box_hi, layout)
        q_all.append(q)
        c_all.append(c)
    boxes = np.flatnonzero(box_mixed)
    if boxes.size:
        q, c = _storage_pairs(np.flatnonzero(mixed), boxes, box_row, buf, lo, hi, buffers,
                              store)
        q_all.append(q)
        c_all.append(c)
    if not q_all:
        return empty
    q, cand = np.concatenate(q_all), np.concatenate(c_all)
    # partial sums accumulate in any order: one chunk's write never waits for another's
    both_partial = write[q] & (tag[q] > 0) & (box_tag[cand] > 0)
    q, cand = q[~both_partial], cand[~both_partial]
    qtask = task[q]
    at = cand * (n_tasks + 1) + qtask
    k = np.searchsorted(keys, at, side="left") - 1
    ok = k >= 0
    found = keys[np.maximum(k, 0)]
    ok &= found // (n_tasks + 1) == cand
    pred = found % (n_tasks + 1)
    ok &= pred != qtask
    data = np.unique(pred[ok] * (n_tasks + 1) + qtask[ok])
    # write after read: a read's box, at the first write of it after the reading task
    reads = ~write[q]
    k = np.searchsorted(keys, at[reads], side="right")
    later = k < keys.size
    found = keys[np.minimum(k, keys.size - 1)]
    later &= found // (n_tasks + 1) == cand[reads]
    anti = np.unique(qtask[reads][later] * (n_tasks + 1) + found[later] % (n_tasks + 1))
    pairs = np.union1d(data, anti)
    if not pairs.size:
        return empty
    src, dst = pairs // (n_tasks + 1), pairs % (n_tasks + 1)
    if kinds:
        return src, dst, ~np.isin(pairs, data)
    return src, dst
