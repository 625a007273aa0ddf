"""pypto.topk, as upstream expands it into tile ops (TiledTopK in
framework/src/interface/operation/vector/sort.cpp, the same at 08cec41e4 and 883e7dfb).

Along the last axis a row is cut into tiles of the TileShape's last dim, widened for a long
row (up to 8192 elements a tile) and padded to 32.  Each tile is sorted on its own: an
index list filled by the scalar unit (TCI), one vbitsort a 32 elements (TSORT32, giving
(value, index) pairs, 8 bytes an element), then vmrgsort4 passes, each merging four sorted
runs into one (32 -> 128 -> 512 ...) and moving the whole tile back (TMOV), until the tile
is one sorted list of which its best k pairs stay.  The tiles' lists then merge four at a
time (TILEDMRGSORT), level after level, into one list, and two extractions (TGATHER by a
mask pattern) take its values and its indices.  The kernel language keeps that split:
``topk`` is the sort and the merges, its result the k best pairs of each row; two
``topk_extract`` read the values and the indices out of them.

Pricing (docs/sources.md §2, Sort): the scalar fill and the instructions of each step are
charged with the hardware's rates; the passes of one tile depend on each other.
"""
from __future__ import annotations

import numpy as np

from ..spec.errors import ConfigError
from ..spec.kernel import DTYPE_BYTES
from .limits import Limits
from .ops import Node, Value, _check_ub, _elements, _vec_tile, tile_rows
from .trace import TracedOp
from .values import grid

SORT_BLOCK = 32          # TSORT32 sorts 32 elements a repeat; a tile's row pads to it (kBlockSize)
PAIRS_ALIGN = 8          # the pairs a list keeps: k rounded up to 8 (kBlockFpNum)
WIDEN_ELEMENTS = 8192    # a long row's tile is widened up to this many elements (maxNumValue)
MERGE_WAYS = 4           # vmrgsort4 merges up to four sorted lists
PAIR_BYTES = 8           # an fp32 value and its uint32 index


def _align(n, to: int):
    return -(-n // to) * to


def tile_width(row_elements: int, length: int, tile: int) -> int:
    """The elements a sort tile takes along the row: the TileShape's, unless the row is
    more than twice as long, then widened as far as the whole tile stays under 8192
    elements (the whole row if it fits); padded to 32."""
    if length > 2 * tile:
        if row_elements * length < WIDEN_ELEMENTS:
            tile = length
        elif row_elements * tile < WIDEN_ELEMENTS:
            tile = max(SORT_BLOCK, WIDEN_ELEMENTS // row_elements // SORT_BLOCK * SORT_BLOCK)
    return _align(tile, SORT_BLOCK)


def merge_passes(width: int) -> int:
    """vmrgsort4 passes that sort a tile of ``width`` (a multiple of 32) sorted 32-runs:
    full passes while four runs fit, then, if runs are left, a tail of two-list merges,
    counted as one more pass over the tile."""
    passes, run = 0, SORT_BLOCK
    while MERGE_WAYS * run <= width:
        passes, run = passes + 1, run * MERGE_WAYS
    return passes + (1 if run < width else 0)


def _kept(k: int, width: int) -> int:
    """Pairs one sorted list keeps: k, at most the tile's elements, rounded up to 8."""
    return _align(np.minimum(k, width), PAIRS_ALIGN)


def topk(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """Each tile sorted into its k best pairs; several tiles of a row leave a partial
    result (``splits`` lists) that ``merge`` combines."""
    (src,) = inputs
    k, axis = int(op.get("k")), len(src.shape) - 1
    if src.dtype != "fp32":
        raise ConfigError(f"field '{op.where}': topk sorts fp32 on this chip (upstream's "
                          f"MERGE_SORT), got {src.dtype}; cast to fp32 first.")
    tile = list(_vec_tile(op, src.shape))
    if not 1 <= k <= min(tile[axis], src.shape[axis]):
        raise ConfigError(f"field '{op.where}': topk k={k} must be at least 1 and at most the "
                          f"TileShape's last dim ({op.vec_tile[axis]}) and the row "
                          f"({src.shape[axis]}); upstream checks k <= vecTile[-1].")
    row_elements = int(np.prod(tile[:axis])) if axis else 1
    width = tile_width(row_elements, src.shape[axis], tile[axis])
    tile[axis] = width
    lo, hi = grid(src.shape, tuple(tile))
    splits = -(-src.shape[axis] // width)
    kept = int(_kept(k, width))
    along = hi[:, axis] - lo[:, axis]       # the tile's elements along the row
    padded = _align(along, SORT_BLOCK)
    rows = tile_rows(lo, hi)
    out_shape = (*src.shape[:axis], splits * 2 * kept)
    out_lo, out_hi = lo.copy(), hi.copy()
    part = lo[:, axis] // width
    out_lo[:, axis] = part * 2 * kept
    out_hi[:, axis] = out_lo[:, axis] + 2 * _kept(k, along)
    # live at once: the input, the pairs and TSORT32's scratch while sorting; then the
    # pairs, the merge's scratch and the kept list (a buffer is reused after its reader)
    ub = rows * np.maximum((4 + 2 * PAIR_BYTES) * padded,
                           2 * PAIR_BYTES * padded + PAIR_BYTES * kept)
    _check_ub(limits, op, tuple(tile), ub)
    passes = merge_passes(int(padded.max()))
    parts = [("bitsort", 1)]
    if passes:
        parts += [("mrgsort", passes), ("ubcopy", passes)]
    if not op.get("largest", True):
        parts.append(("adds", 1))      # the keys' sign flipped first, so smallest sorts first
    pair_bytes = (padded * PAIR_BYTES).astype(np.float64)
    node = Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype="fp32", out_lo=out_lo, out_hi=out_hi, in_lo=[lo], in_hi=[hi],
                flops=_elements(lo, hi).astype(np.float64), ub_bytes=ub,
                in_flight=np.ones(len(lo)), vector_kind="mrgsort",
                vector_bytes=rows * pair_bytes, vector_rows=rows.astype(np.float64),
                vector_row_bytes=pair_bytes, vector_parts=tuple(parts),
                scalar_stores=along.astype(np.float64))   # one index list a tile, all rows
    node.extra.update(splits=splits, axis=axis, kept=kept, width=width)
    return node


def valid_pairs(node: Node, valid: tuple[int, ...]) -> tuple[int, ...]:
    """The region of a topk's lists that counts as holding data when its input holds data in
    ``valid``: the valid rows; along the row, the lists of the tiles that hold any of it,
    the last one cut in the proportion of its tile that is valid, so that its sort (index
    fill, runs, passes) is priced on the valid elements.  A tile past the valid length
    sorts nothing (upstream's tile ops return at once on an empty tile)."""
    axis, width, kept = node.extra["axis"], node.extra["width"], node.extra["kept"]
    length = valid[axis]
    lists = -(-length // width)
    last = -(-2 * kept * (length - (lists - 1) * width) // width) if lists else 0
    return (*valid[:axis], max(lists - 1, 0) * 2 * kept + last)


def merge(index: int, partial: Node, value, limits: Limits) -> Node:
    """One level of TILEDMRGSORT: every four lists of a row merged into one that keeps
    the k best.  A lone list left at the end of a level is priced as a merge of itself,
    where upstream passes it on for nothing."""
    op, axis, splits, kept = (partial.op, partial.extra["axis"], partial.extra["splits"],
                              partial.extra["kept"])
    groups = -(-splits // MERGE_WAYS)
    out_shape = (*partial.out_shape[:axis], groups * 2 * kept)
    tile = tuple(min(t, s) for t, s in zip(op.vec_tile, out_shape[:axis])) + (2 * kept,)
    lo, hi = grid(out_shape, tile)
    in_lo, in_hi = lo.copy(), hi.copy()
    group = lo[:, axis] // (2 * kept)
    in_lo[:, axis] = group * MERGE_WAYS * 2 * kept
    in_hi[:, axis] = np.minimum((group + 1) * MERGE_WAYS, splits) * 2 * kept
    rows = tile_rows(lo, hi)
    list_bytes = 2 * kept * DTYPE_BYTES["fp32"]
    # the four lists, the merged one and the merge's scratch of four lists
    ub = rows * (2 * MERGE_WAYS + 1) * list_bytes
    _check_ub(limits, op, tile, ub)
    read = ((in_hi[:, axis] - in_lo[:, axis]) * DTYPE_BYTES["fp32"]).astype(np.float64)
    node = Node(index=index, op=op, kind="vector", inputs=[value], out_shape=out_shape,
                out_dtype="fp32", out_lo=lo, out_hi=hi, in_lo=[in_lo], in_hi=[in_hi],
                flops=(rows * read / PAIR_BYTES).astype(np.float64), ub_bytes=ub,
                in_flight=np.ones(len(lo)), vector_kind="mrgsort",
                vector_bytes=rows * read, vector_rows=rows.astype(np.float64),
                vector_row_bytes=read, combine_of=partial.index)
    node.extra.update(splits=groups, axis=axis, kept=kept)
    return node


def topk_extract(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """The values (fp32) or indices (int32) of a topk's pairs, the first k of each row:
    one vreducev2 by a mask pattern over the pairs (upstream's Extract tile op)."""
    (pairs,) = inputs
    k, axis = int(op.get("k")), len(pairs.shape) - 1
    kept = int(_kept(k, k))
    if pairs.dtype != "fp32" or pairs.shape[axis] != 2 * kept:
        raise ConfigError(f"field '{op.where}': topk_extract reads the pairs a topk with k={k} "
                          f"gives ([..., {2 * kept}] fp32), got '{op.inputs[0]}' of shape "
                          f"{list(pairs.shape)} {pairs.dtype}.")
    values = op.get("part") == "values"
    out_shape = (*pairs.shape[:axis], k)
    tile = tuple(min(t, s) for t, s in zip(_vec_tile(op, pairs.shape), out_shape[:axis])) + (k,)
    lo, hi = grid(out_shape, tile)
    in_lo, in_hi = lo.copy(), hi.copy()
    in_lo[:, axis], in_hi[:, axis] = 0, 2 * kept
    rows = tile_rows(lo, hi)
    row_bytes = np.full(len(lo), 2.0 * kept * DTYPE_BYTES["fp32"])
    ub = rows * (row_bytes + k * DTYPE_BYTES["fp32"])
    _check_ub(limits, op, tile, ub)
    parts = (("gathermask", 1), ("adds", 1)) if values and not op.get("largest", True) else ()
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype="fp32" if values else "int32", out_lo=lo, out_hi=hi,
                in_lo=[in_lo], in_hi=[in_hi], flops=(rows * k).astype(np.float64),
                ub_bytes=ub, in_flight=np.ones(len(lo)), vector_kind="gathermask",
                vector_bytes=rows * row_bytes, vector_rows=rows.astype(np.float64),
                vector_row_bytes=row_bytes, vector_parts=parts)


BUILDERS = {"topk": topk, "topk_extract": topk_extract}
COMBINERS = {"topk": merge}
