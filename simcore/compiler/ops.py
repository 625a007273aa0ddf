"""Op semantics for tiling: output shape, tile grid, the input region of every tile, and work.

Each op becomes a ``Node`` whose arrays have one row per output tile: the tile's
box in the output, the box it reads from every input, and the work it asks of
one core's pipes in hardware-independent units (bytes per vector op kind,
fractals, MTE1 and FIXP bytes; the machine prices them).  GM bytes are counted
when the node is placed in a leaf function, because a merged chain keeps its
intermediates on chip.  The hardware is consulted only for what constrains the
mapping: does a tile fit its buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..spec.errors import ConfigError, OoOError
from ..spec.kernel import BINARY_OPS, COMPARE_OPS, DTYPE_BYTES, REDUCE_OPS, UNARY_OPS
from .limits import Limits
from .program import CoreType
from .records import made
from .trace import TracedOp
from .values import MAX_RANK, UB_BLOCK_BYTES, GmValue, LocalValue, grid, ub_bytes

Value = GmValue | LocalValue
FRACTAL = 16


@dataclass
class Node:
    index: int
    op: TracedOp
    kind: str                     # "vector" or "cube"
    inputs: list[Value]
    out_shape: tuple[int, ...]
    out_dtype: str
    out_lo: np.ndarray            # T x R output tile boxes
    out_hi: np.ndarray
    in_lo: list[np.ndarray]       # per input: T x R_i boxes read
    in_hi: list[np.ndarray]
    flops: np.ndarray             # per tile
    ub_bytes: np.ndarray          # live on-chip bytes of one tile (inputs + output)
    in_flight: np.ndarray         # k steps a cube tile pipelines
    vector_kind: str = ""         # key of the hardware's vector rate table
    vector_bytes: np.ndarray | None = None   # per tile: bytes the vector op works on
    vector_rows: np.ndarray | None = None    # per tile: rows (all dims but the last)
    vector_row_bytes: np.ndarray | None = None   # per tile: bytes of one row
    vector_reduce: bool = False   # folds every row (a reduction along the last axis)
    # a composite tile op: (vector kind, instructions) run in order over the whole tile
    vector_parts: tuple[tuple[str, int], ...] = ()
    # per tile: elements a scalar loop moves (a transpose whose UB strides the Vector
    # path cannot take), each a scalar load and store between two pipe hand-overs
    scalar_elements: np.ndarray | None = None
    scalar_stores: np.ndarray | None = None  # per tile: elements a scalar fill loop stores
    cube_dtype: str = ""          # A's dtype: it sets the cycles per fractal
    fractals: np.ndarray | None = None       # per tile: 16x16x16 fractals
    mte1_bytes: np.ndarray | None = None     # per tile: A and B fed to L0A/L0B
    k_steps: np.ndarray | None = None        # per tile: L1 k steps
    fixp_bytes: np.ndarray | None = None     # per tile: the result out of L0C
    accumulate: bool = False      # split-K partial sums accumulate in GM
    l0_single: bool = False       # an L0A or L0B tile fills over half its buffer
    combine_of: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def core(self) -> CoreType:
        return CoreType.AIC if self.kind == "cube" else CoreType.AIV

    @property
    def tiles(self) -> int:
        return self.out_lo.shape[0]


def _elements(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (hi - lo).prod(axis=1)


def tile_rows(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per tile, its rows: the product of every dim but the last."""
    ext = hi - lo
    return ext[:, :-1].prod(axis=1) if ext.shape[1] > 1 else np.ones(len(ext), np.int64)


def _rows(lo: np.ndarray, hi: np.ndarray, elem: int) -> dict:
    """The row structure of a vector tile: rows and the bytes of one row."""
    ext = hi - lo
    tail = ext[:, -1] if ext.shape[1] else np.ones(len(ext), np.int64)
    return {"vector_rows": tile_rows(lo, hi).astype(float),
            "vector_row_bytes": (tail * elem).astype(float)}


def _vec_tile(op: TracedOp, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The tile that cuts ``shape``: one dim per tensor dim.

    A TileShape of higher rank than the tensor is allowed, as upstream allows it (its
    ExpandFunction rejects only a tile shorter than the op's output): upstream's tiling
    loops index the tile by the tensor's axis, tile[0] for axis 0 and so on
    (framework/src/interface/operation/vector/binary.cpp, TiledBinaryOperation), so the
    tensor is cut by the tile's first dims and the others go unused.
    """
    if op.vec_tile is None:
        raise ConfigError(f"field '{op.where}': op '{op.op}' runs before any "
                          f"set_vec_tile_shapes; set a vector TileShape first.")
    if len(op.vec_tile) < len(shape):
        raise ConfigError(f"field '{op.where}': vector TileShape {list(op.vec_tile)} has "
                          f"{len(op.vec_tile)} dims but '{op.op}' works on shape {list(shape)}; "
                          f"give at least one tile dim per tensor dim.")
    return tuple(min(t, s) for t, s in zip(op.vec_tile, shape))


def _check_tail_alignment(op: TracedOp, tile: tuple[int, ...], dtype: str) -> None:
    """The tail axis of a vector tile must be 32-byte aligned unless it spans the axis."""
    tail_bytes = tile[-1] * DTYPE_BYTES[dtype]
    if tail_bytes % UB_BLOCK_BYTES:
        raise ConfigError(f"field '{op.where}': vector TileShape {list(op.vec_tile)} gives a tail "
                          f"axis of {tail_bytes} bytes for '{op.op}' ({dtype}); the tail axis "
                          f"must be a multiple of {UB_BLOCK_BYTES} bytes "
                          f"({UB_BLOCK_BYTES // DTYPE_BYTES[dtype]} elements).")


def _check_ub(limits: Limits, op: TracedOp, tile, ub_bytes: np.ndarray) -> None:
    need = int(ub_bytes.max()) if ub_bytes.size else 0
    if need > limits.buffers.ub:
        raise OoOError(op=f"{op.op} ({op.where})", tile=list(tile), buffer="UB", need=need,
                       capacity=limits.buffers.ub)


def broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """numpy's rule, which PyPTO's binary ops follow: shapes align at their last dim, a
    shorter one gains leading dims of 1 (upstream unsqueezes it,
    framework/src/interface/operation/vector/binary.cpp BinaryOperationBroadCast), and a dim
    of 1 stretches to the other's.  None if they do not broadcast."""
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    out = tuple(max(dims) for dims in zip(*padded))
    if any(a not in (b, 1) for p in padded for a, b in zip(p, out)):
        return None
    return out


# Tile ops that no single pto-isa instruction prices, as the instructions their tile body
# runs, each over the whole tile and each waiting for the one before (SyncV).  erfc: upstream
# TErfc (framework/src/interface/tileop/vector/unary.h): clip to [-10, 10] (mins, maxs), the
# sign x / (|x| + tiny) (abs, adds, div), a rational polynomial in |x| (R: 1 muls, 8 adds,
# 7 mul; S: 5 adds, 4 mul; R / S), times exp(-x^2) (mul, muls, exp, mul), and the sign fix
# (muls, adds, mul, add); in fp32 with four fp32 tiles of scratch (ErfcOperationTileFunc).
COMPOSITES = {"erfc": (("minimums", 1), ("maximums", 1), ("abs", 1), ("adds", 15), ("div", 2),
                       ("muls", 3), ("mul", 14), ("exp", 1), ("add", 1))}
COMPOSITE_SCRATCH = {"erfc": 4}   # fp32 tiles of UB scratch


def elementwise(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    shapes = [v.shape for v in inputs]
    out_shape = broadcast_shape(shapes) if inputs else op.get("shape")
    if out_shape is None:
        raise ConfigError(f"field '{op.where}': inputs of '{op.op}' have shapes "
                          f"{[list(x) for x in shapes]}; they must match or broadcast "
                          f"(a dim of 1, or fewer leading dims).")
    in_dtype = inputs[0].dtype if inputs else (op.get("dtype") or "fp32")
    dtype = op.get("dtype") if op.op in ("cast", "full") and op.get("dtype") else in_dtype
    if op.op in COMPARE_OPS or op.op == "logical_not":
        dtype = "bool"
    elif op.op == "where":
        dtype = inputs[1].dtype
    tile = _vec_tile(op, out_shape)
    if len(out_shape) > 1 and tile[-1] != out_shape[-1]:
        _check_tail_alignment(op, tile, dtype)
    lo, hi = grid(out_shape, tile)
    boxes = [_broadcast_boxes(s, out_shape, lo, hi) for s in shapes]
    in_lo, in_hi = [b[0] for b in boxes], [b[1] for b in boxes]
    n = _elements(lo, hi)
    elem = max([DTYPE_BYTES[dtype]] + [DTYPE_BYTES[v.dtype] for v in inputs])
    # a comparison is one vcmpv (vcmpvs with a scalar), where one vsel, logical_not one vnot:
    # pto-isa's cost model has no measured profile for them (a generic 6 + 2 cycles a
    # repeat), so they take the rate table's default
    kind = {"full": "dup", "where": "select", "logical_not": "not", "fillpad": "copy",
            **{c: "compare" for c in COMPARE_OPS}}.get(op.op, op.op)
    kind = kind + "s" if op.get("scalar") is not None else kind
    # UB holds a tile of each input (one for an input read twice, x + x) and of the result,
    # each in its own dtype (a bf16 -> fp32 cast takes 2 + 4 bytes an element, not twice
    # the wider)
    ub = sum(ub_bytes(lo, hi, DTYPE_BYTES[d])
             for d in [dtype] + [v.dtype for v in dict.fromkeys(inputs)])
    parts = COMPOSITES.get(op.op, ())
    if parts:
        if dtype != "fp32":
            raise ConfigError(f"field '{op.where}': '{op.op}' works on fp32, got {dtype}; cast "
                              f"to fp32 first (upstream casts fp16 and bf16 around it).")
        ub = ub + COMPOSITE_SCRATCH[op.op] * ub_bytes(lo, hi, DTYPE_BYTES["fp32"])
    flops = n.astype(np.float64) if op.op != "full" else np.zeros(len(n))
    if parts:
        flops = flops * sum(c for _, c in parts)
    taken = False       # the result already holds a buffer it shares (below)
    if op.op == "fillpad":
        # pto-isa's TFillPad (a2a3): a vcopy of the valid rows, then vector_dup of the
        # padding on the right and below, priced as a copy and a dup of the whole tile
        parts = (("copy", 1), ("dup", 1))
    if not op.get("combine_axis") and _expands_rows(shapes, out_shape):
        # upstream expands an input broadcast along the last axis to the result's shape
        # first (BroadcastOperandTensor, framework/src/interface/operation/vector/
        # binary.cpp, unless combine_axis is set, which defaults off): a TROWEXPAND of the
        # tile into a UB tile of its own, then the op on equal tiles (docs/sources.md §2).
        # UB then holds the expanded tile where ``ub`` counted the operand as one, plus the
        # operand itself, a 32-byte block a row
        parts = (("rowexpand", 1), (kind, 1))
        column = next(i for i, s in enumerate(shapes) if s[-1] == 1)
        ub = ub + _elements(in_lo[column], in_hi[column]) * UB_BLOCK_BYTES
        if DTYPE_BYTES[inputs[column].dtype] == DTYPE_BYTES[dtype] and reuses_buffer(op):
            # the expanded tile's only reader is the op: the result takes its buffer
            # (upstream's SrcDstBufferMerge, ubprofile.UbProfile._reused_key)
            ub = ub - ub_bytes(lo, hi, DTYPE_BYTES[dtype])
            taken = True
    need, unsure = ub, 0
    if not taken and reuses_buffer(op) and any(
            s == out_shape and DTYPE_BYTES[v.dtype] == DTYPE_BYTES[dtype]
            for s, v in zip(shapes, inputs)):
        # the result may take such an input's buffer if nothing else reads that input:
        # known once the leaf functions are formed, where the tiler checks it again
        need, unsure = ub - ub_bytes(lo, hi, DTYPE_BYTES[dtype]), int(ub.max())
    _check_ub(limits, op, tile, need)
    node = Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=dtype, out_lo=lo, out_hi=hi, in_lo=in_lo, in_hi=in_hi, flops=flops,
                ub_bytes=need, in_flight=np.ones(len(n)), vector_kind=kind,
                vector_bytes=n * elem, vector_parts=parts, **_rows(lo, hi, elem))
    if unsure > limits.buffers.ub:
        node.extra["ub_if_no_reuse"] = (unsure, tile)
    return node


def reuses_buffer(op: TracedOp) -> bool:
    """The op's result may take an input's UB buffer (BUFFER_REUSE_OPS, DIVS excluded)."""
    return op.op in BUFFER_REUSE_OPS and not (op.op == "div" and op.get("scalar") is not None)


def _broadcast_boxes(shape, out_shape, lo: np.ndarray, hi: np.ndarray):
    """The boxes an input of ``shape`` reads under result boxes lo..hi: a lower-rank input
    the trailing dims of each, a dim of 1 that stretches its one row."""
    lead = len(out_shape) - len(shape)
    stretched = np.asarray([d == 1 and o != 1 for d, o in zip(shape, out_shape[lead:])])
    return np.where(stretched, 0, lo[:, lead:]), np.where(stretched, 1, hi[:, lead:])


def _expands_rows(shapes: list[tuple[int, ...]], out_shape: tuple[int, ...]) -> bool:
    """A binary op one of whose inputs has a last axis of 1 where the result's is longer:
    its expand to the result's shape runs along the rows (whatever it does to the
    leading axes, which the model does not price)."""
    return len(shapes) == 2 and out_shape[-1] != 1 and any(s[-1] == 1 for s in shapes)


def reduce(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """A reduction tiled over its input; a split reduce axis yields partial results."""
    (src,) = inputs
    axis = op.get("axis") % len(src.shape)
    tile = _vec_tile(op, src.shape)
    lo, hi = grid(src.shape, tile)
    splits = -(-src.shape[axis] // tile[axis])
    out_shape = tuple(splits if d == axis else s for d, s in enumerate(src.shape))
    out_lo, out_hi = lo.copy(), hi.copy()
    out_lo[:, axis] = lo[:, axis] // tile[axis]
    out_hi[:, axis] = out_lo[:, axis] + 1
    n = _elements(lo, hi)
    elem = DTYPE_BYTES[src.dtype]
    ub = ub_bytes(lo, hi, elem) + ub_bytes(out_lo, out_hi, elem)
    _check_ub(limits, op, tile, ub)
    if splits == 1 and not op.get("keepdim", True):
        out_shape, out_lo, out_hi = squeeze(out_shape, out_lo, out_hi, axis)
    node = Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=src.dtype, out_lo=out_lo, out_hi=out_hi, in_lo=[lo], in_hi=[hi],
                flops=n.astype(np.float64), ub_bytes=ub, in_flight=np.ones(len(n)),
                vector_kind=f"row{op.op}", vector_bytes=n * elem, **_rows(lo, hi, elem),
                vector_reduce=axis == len(src.shape) - 1)
    node.extra["splits"] = splits
    node.extra["axis"] = axis
    return node


def squeeze(shape: tuple[int, ...], lo: np.ndarray, hi: np.ndarray, axis: int):
    """keepdim=False (upstream's default for sum/amax/amin): the reduced axis leaves the
    value's shape and its tiles' boxes, so later ops see (and broadcast) the lower rank.
    A reduction of a 1-D value keeps one dim of 1: the kernel language has no 0-d values."""
    if len(shape) == 1:
        return shape, lo, hi
    keep = [d for d in range(len(shape)) if d != axis]
    return tuple(shape[d] for d in keep), lo[:, keep], hi[:, keep]


def combine(index: int, partial: Node, value: LocalValue, limits: Limits) -> Node:
    """Combine the partial results of a split reduce, at most a tile's extent of them at a
    time: upstream reduces a split axis as a tree of tile-sized pieces and no op ever holds
    more than a few tiles (TileReduceNew, framework/src/interface/operation/vector/
    reduction.cpp at 08cec41e4).  Past that many partials the result is again partial (its
    ``splits``), for the next level to combine."""
    op, axis, splits = partial.op, partial.extra["axis"], partial.extra["splits"]
    fan = max(min(op.vec_tile[axis], splits), 2)       # partials one combining tile reads
    groups = -(-splits // fan)
    out_shape = tuple(groups if d == axis else s for d, s in enumerate(partial.out_shape))
    tile = tuple(1 if d == axis else min(t, s)
                 for d, (t, s) in enumerate(zip(op.vec_tile, out_shape)))
    lo, hi = grid(out_shape, tile)
    in_lo, in_hi = lo.copy(), hi.copy()
    in_lo[:, axis] = lo[:, axis] * fan
    in_hi[:, axis] = np.minimum(in_lo[:, axis] + fan, splits)
    n = _elements(in_lo, in_hi)
    elem = DTYPE_BYTES[partial.out_dtype]
    ub = ub_bytes(in_lo, in_hi, elem) + ub_bytes(lo, hi, elem)     # as reduce counts it
    _check_ub(limits, op, tuple(fan if d == axis else t for d, t in enumerate(tile)), ub)
    vector_reduce = axis == len(out_shape) - 1
    if groups == 1 and not op.get("keepdim", True):
        out_shape, lo, hi = squeeze(out_shape, lo, hi, axis)
    node = Node(index=index, op=op, kind="vector", inputs=[value], out_shape=out_shape,
                out_dtype=partial.out_dtype, out_lo=lo, out_hi=hi, in_lo=[in_lo],
                in_hi=[in_hi], flops=n.astype(np.float64), ub_bytes=ub,
                in_flight=np.ones(len(n)), vector_kind=f"row{op.op}", vector_bytes=n * elem,
                combine_of=partial.index, **_rows(in_lo, in_hi, elem),
                vector_reduce=vector_reduce)
    node.extra["splits"], node.extra["axis"] = groups, axis
    return node


def _fractal_up(a_dtype: str, b_dtype: str):
    """Rounds a cube tile dim up to fractal alignment (32 with an int8 operand, else 16)."""
    align = 32 if "int8" in (a_dtype, b_dtype) else FRACTAL
    return lambda x: -(-x // align) * align


def _l0_tiles(op: TracedOp, a_dtype: str, b_dtype: str) -> tuple[int, int]:
    """Bytes of one L0A and one L0B tile, dims rounded up to fractal alignment."""
    t, up = op.cube_tile, _fractal_up(a_dtype, b_dtype)
    return (up(t.m[0]) * up(t.k[0]) * DTYPE_BYTES[a_dtype],
            up(t.n[0]) * up(t.k[0]) * DTYPE_BYTES[b_dtype])


def _cube_fit(limits: Limits, op: TracedOp, a_dtype: str, b_dtype: str,
              m: int, k: int, n: int) -> None:
    """L0A/L0B/L0C/L1 checks of set_cube_tile_shapes for an M x K x N matmul: each tile dim
    no larger than the matrix's (a tile never holds more than the matrix, as a vector tile
    is cut to its tensor), rounded up to fractal alignment."""
    t, up = op.cube_tile, _fractal_up(a_dtype, b_dtype)
    sa, sb = DTYPE_BYTES[a_dtype], DTYPE_BYTES[b_dtype]
    sc = 4
    (m0, m1), (k0, ka1, kb1), (n0, n1) = t.m, t.k, t.n
    m0, m1, n0, n1 = min(m0, m), min(m1, m), min(n0, n), min(n1, n)
    k0, ka1, kb1 = min(k0, k), min(ka1, k), min(kb1, k)
    l0a, l0b = up(m0) * up(k0) * sa, up(n0) * up(k0) * sb
    checks = (("L0A", l0a, limits.buffers.l0a, [m0, k0]),
              ("L0B", l0b, limits.buffers.l0b, [k0, n0]),
              ("L0C", up(m0) * up(n0) * sc, limits.buffers.l0c, [m0, n0]),
              ("L1", up(m1) * up(ka1) * sa + up(n1) * up(kb1) * sb, limits.buffers.l1,
               [m1, max(ka1, kb1), n1]))
    for buffer, need, capacity, tile in checks:
        if need > capacity:
            raise OoOError(op=f"{op.op} ({op.where})", tile=tile, buffer=buffer, need=need,
                           capacity=capacity)


def padded_rows(rows: np.ndarray, m_l0: int) -> np.ndarray:
    """Rows the Cube computes for tiles of ``rows`` valid rows: every L0 block that holds
    data is a whole mL0 block (rounded up to the 16-row fractal)."""
    block = -(-m_l0 // FRACTAL) * FRACTAL
    return np.ceil(rows / m_l0) * block


def _batch(op: TracedOp, a: Value, b: Value) -> tuple[int, ...]:
    """The batch dims of a batched matmul: A's and B's leading dims, broadcast as numpy
    broadcasts them ([B, M, K] @ [K, N] multiplies every batch by the same B)."""
    batch = broadcast_shape([a.shape[:-2] or (1,), b.shape[:-2] or (1,)])
    if batch is None:
        raise ConfigError(f"field '{op.where}': matmul batch dims of {list(a.shape)} and "
                          f"{list(b.shape)} neither match nor broadcast.")
    return batch if len(a.shape) > 2 or len(b.shape) > 2 else ()


def _operand_box(lo3, hi3, nb: int, rank: int, shape, cols: tuple[int, int], trans: bool):
    """An operand's box under each tile: its batch dims (a dim of 1 under a larger batch
    reads its only slice), then its two matrix dims, swapped when it is transposed."""
    parts_lo, parts_hi = [], []
    lead = rank - 2
    for d in range(lead):
        c = nb - lead + d
        if shape[d] == 1:
            parts_lo.append(np.zeros(len(lo3), np.int64))
            parts_hi.append(np.ones(len(lo3), np.int64))
        else:
            parts_lo.append(lo3[:, c])
            parts_hi.append(hi3[:, c])
    r, c = cols
    box_lo = np.stack(parts_lo + [lo3[:, r], lo3[:, c]], 1)
    box_hi = np.stack(parts_hi + [hi3[:, r], hi3[:, c]], 1)
    if trans:
        box_lo[:, lead:] = box_lo[:, lead:][:, ::-1]
        box_hi[:, lead:] = box_hi[:, lead:][:, ::-1]
    return box_lo, box_hi


def _bias_box(op: TracedOp, bias: Value, n: int, n_lo: np.ndarray, n_hi: np.ndarray):
    """The bias a cube tile loads: its N columns of a [N] or [1, N] bias.  The Cube adds it
    as it accumulates (upstream's extend_params bias_tensor goes to the bias table through
    L1), so it costs a GM read and no Vector work."""
    if bias.shape[-1] != n or any(d != 1 for d in bias.shape[:-1]):
        raise ConfigError(f"field '{op.where}': matmul bias of shape {list(bias.shape)} needs "
                          f"shape [{n}] or [1, {n}].")
    lead = len(bias.shape) - 1
    zeros = np.zeros((len(n_lo), lead), np.int64)
    return (np.concatenate([zeros, n_lo[:, None]], 1),
            np.concatenate([zeros + 1, n_hi[:, None]], 1))


CUBE_DTYPES = ("fp32", "fp16", "bf16", "int8")


def matmul(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """A (batched) matmul tiled by set_cube_tile_shapes; a batched one is cut into one
    tile per batch (upstream's batch matmul loops over the batch and runs one matmul each),
    so the Cube work, and its cost, is counted per batch."""
    a, b = inputs[:2]
    if op.cube_tile is None:
        raise ConfigError(f"field '{op.where}': matmul runs before any set_cube_tile_shapes; "
                          f"set a cube TileShape first.")
    if op.get("transposed_batch"):
        return _transposed_batch(index, op, inputs, limits)
    if not (2 <= len(a.shape) <= MAX_RANK and 2 <= len(b.shape) <= MAX_RANK):
        raise ConfigError(f"field '{op.where}': matmul takes 2-D to {MAX_RANK}-D operands, got "
                          f"{list(a.shape)} and {list(b.shape)}.")
    bad = [v.dtype for v in (a, b) if v.dtype not in CUBE_DTYPES]
    if bad:
        raise ConfigError(f"field '{op.where}': the Cube multiplies {', '.join(CUBE_DTYPES)}; "
                          f"got {bad[0]}.")
    m, ka = (a.shape[-1], a.shape[-2]) if op.get("a_trans") else a.shape[-2:]
    kb, n = (b.shape[-1], b.shape[-2]) if op.get("b_trans") else b.shape[-2:]
    if ka != kb:
        raise ConfigError(f"field '{op.where}': matmul K mismatch: A {list(a.shape)}"
                          f"{'ᵀ' if op.get('a_trans') else ''} x B {list(b.shape)}"
                          f"{'ᵀ' if op.get('b_trans') else ''} gives K {ka} vs {kb}.")
    batch = _batch(op, a, b)
    nb = len(batch)
    if nb + 2 > MAX_RANK:
        raise ConfigError(f"field '{op.where}': matmul output {list(batch) + [m, n]} has more "
                          f"than {MAX_RANK} dims.")
    _cube_fit(limits, op, a.dtype, b.dtype, m, ka, n)
    t = op.cube_tile
    split_k = t.split_k
    k_tile = t.k[1] if split_k else ka
    lo3, hi3 = grid((*batch, m, n, ka), (1,) * nb + (t.m[1], t.n[1], k_tile))
    lo, hi = lo3[:, :nb + 2], hi3[:, :nb + 2]
    ms, ns, ks = (hi3[:, nb:] - lo3[:, nb:]).T
    a_lo, a_hi = _operand_box(lo3, hi3, nb, len(a.shape), a.shape, (nb, nb + 2),
                              op.get("a_trans"))
    b_lo, b_hi = _operand_box(lo3, hi3, nb, len(b.shape), b.shape, (nb + 2, nb + 1),
                              op.get("b_trans"))
    in_lo, in_hi = [a_lo, b_lo], [a_hi, b_hi]
    if len(inputs) == 3:
        bias_lo, bias_hi = _bias_box(op, inputs[2], n, lo3[:, nb + 1], hi3[:, nb + 1])
        in_lo.append(bias_lo)
        in_hi.append(bias_hi)
    out_dtype = op.get("dtype") or "fp32"
    sa, sb, sc = DTYPE_BYTES[a.dtype], DTYPE_BYTES[b.dtype], DTYPE_BYTES[out_dtype]
    # The Cube works on whole L0 tiles: a tile with fewer valid rows than mL0 still
    # fills L0A with mL0 x kL0 and multiplies every fractal of it, as upstream's cost
    # model prices a tile op on its tile shape, not its valid shape
    # (framework/src/cost_model/simulation/arch/PipeSimulatorFast.cpp).  GM traffic
    # (MTE2 in, FIXP out) stays the valid rows: padding lives only on chip.
    padded_m = padded_rows(ms, t.m[0])
    fractals = np.ceil(padded_m / FRACTAL) * np.ceil(ns / FRACTAL) * np.ceil(ks / FRACTAL)
    # A is fed to L0A once per n L0 block, B to L0B once per m L0 block.
    mte1_bytes = padded_m * ks * sa * np.ceil(ns / t.n[0]) + ks * ns * sb * np.ceil(ms / t.m[0])
    steps = np.ceil(ks / t.k[1])
    # L0A and L0B take a tile at their head, the next at their tail (upstream's BufferPool
    # in the OoO scheduler): a tile over half the buffer leaves no room for a second, so the
    # next k step's L1 -> L0 move waits for this step's multiply (docs/sources.md §2)
    l0a, l0b = _l0_tiles(op, a.dtype, b.dtype)
    single = 2 * l0a > limits.buffers.l0a or 2 * l0b > limits.buffers.l0b
    node = Node(index=index, op=op, kind="cube", inputs=inputs, out_shape=(*batch, m, n),
                out_dtype=out_dtype, out_lo=lo, out_hi=hi, in_lo=in_lo,
                in_hi=in_hi, flops=2.0 * ms * ns * ks, ub_bytes=np.zeros(len(ms)),
                in_flight=steps, cube_dtype=a.dtype, fractals=fractals, mte1_bytes=mte1_bytes,
                k_steps=steps, fixp_bytes=ms * ns * sc, accumulate=split_k,
                l0_single=single)
    if nb:
        node.extra["k_lo"] = lo3[:, nb + 2]   # split-K writers, by K chunk
    # K elements per GM -> L1 copy of A and B: a kAL1 / kBL1 block with
    # enable_multi_data_load, else one piece per kL0 step (tiling._k_block)
    node.extra["l1_blocks"] = (t.k[1], t.k[2]) if t.multi_data_load else (t.k[0], t.k[0])
    return node


def _transposed_batch(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """Upstream's transposed_batchmatmul: A (M, B, K) times B (B, K, N) gives (M, B, N), batch
    b multiplying A[:, b, :] by B[b] into C[:, b, :]: the batched matmul of A seen as
    (B, M, K), its tiles reading A's rows and writing C's where they lie, B rows apart
    (pypto.experimental.transposed_batchmatmul at 883e7dfb; no transpose is made)."""
    a, b = inputs
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[1] != b.shape[0] \
            or a.shape[2] != b.shape[1]:
        raise ConfigError(f"field '{op.where}': transposed_batch multiplies A (M, B, K) by "
                          f"B (B, K, N); got {list(a.shape)} and {list(b.shape)}.")
    if {a.dtype, b.dtype} - {"fp16", "bf16"} or getattr(a, "format", "ND") != "ND":
        raise ConfigError(f"field '{op.where}': transposed_batch takes fp16 or bf16 operands "
                          f"and an ND A, as upstream's transposed_batchmatmul does; got A "
                          f"{a.dtype} {getattr(a, 'format', 'ND')}, B {b.dtype}.")
    swap = [1, 0, 2]
    seen_as = replace(a, shape=tuple(a.shape[i] for i in swap),
                      valid=None if a.valid is None else tuple(a.valid[i] for i in swap))
    node = matmul(index, made(TracedOp, **{**vars(op), "attrs": {
        **op.attrs, "transposed_batch": False}}), [seen_as, b], limits)
    node.inputs = inputs
    node.op = op
    node.in_lo[0], node.in_hi[0] = node.in_lo[0][:, swap], node.in_hi[0][:, swap]
    node.out_lo, node.out_hi = node.out_lo[:, swap], node.out_hi[:, swap]
    node.out_shape = tuple(node.out_shape[i] for i in swap)
    return node


def transpose(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    (src,) = inputs
    perm = op.get("perm")
    if sorted(perm) != list(range(len(src.shape))):
        raise ConfigError(f"field '{op.where}': perm {list(perm)} is not a permutation of the "
                          f"{len(src.shape)} dims of {list(src.shape)}.")
    out_shape = tuple(src.shape[p] for p in perm)
    # upstream tiles a transpose over its input and swaps each tile (TiledInnerTranspose in
    # framework/src/interface/operation/vector/tensor_transformation.cpp): the TileShape is
    # the input's, so a consumer of a (64, 128)-tiled transpose aligns with (128, 64)
    tile = _vec_tile(op, tuple(src.shape))
    in_lo, in_hi = grid(tuple(src.shape), tile)
    # tiles in the output's row-major order, as every other op's: a consumer's tile j then
    # reads the transpose's tile j when their TileShapes align
    order = np.lexsort(in_lo[:, perm].T[::-1])
    in_lo, in_hi = in_lo[order], in_hi[order]
    lo, hi = in_lo[:, perm], in_hi[:, perm]
    n = _elements(lo, hi)
    elem = DTYPE_BYTES[src.dtype]
    ub = ub_bytes(in_lo, in_hi, elem) + ub_bytes(lo, hi, elem)
    _check_ub(limits, op, tile, ub)
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=src.dtype, out_lo=lo, out_hi=hi, in_lo=[in_lo],
                in_hi=[in_hi], flops=np.zeros(len(n)), ub_bytes=ub,
                in_flight=np.ones(len(n)), vector_kind="transpose", vector_bytes=n * elem,
                scalar_elements=np.where(_scalar_transpose(in_lo, in_hi, lo, hi, elem), n, 0),
                **_rows(lo, hi, elem))


def _scalar_transpose(in_lo, in_hi, lo, hi, elem: int) -> np.ndarray:
    """Per tile: whether pto-isa's TTRANS moves it element by element on the scalar unit.

    Rows in UB are padded to 32 bytes; the Vector path (vnchwconv) needs the destination
    row stride a multiple of 16 elements and the source's a multiple of 8, else TTRANS
    runs a scalar loop over the valid elements between a V->S and an S->V hand-over
    (pto-isa TTrans.hpp ``TTransOperation`` and ``TransTailTiles``, docs/sources.md §2).
    An fp32 [8, i] -> [i, 8] tile takes the loop; a [16, 16] one the Vector path.
    """
    per_block = UB_BLOCK_BYTES // elem
    stride = lambda cols: -(-cols // per_block) * per_block
    src_cols, dst_cols = (in_hi - in_lo)[:, -1], (hi - lo)[:, -1]
    return (stride(dst_cols) % 16 != 0) | (stride(src_cols) % 8 != 0)


def concat(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """concat copies its inputs into a new tensor (assemble writes in place instead)."""
    return _copy(index, op, inputs, op.get("axis") % len(inputs[0].shape))


def copy(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """A copy of one GM value into a new tensor: what a reshape with ``inplace=False`` does
    (upstream gives its output an address of its own; the readers then read the copy).
    The copy is tiled in its input's geometry: by the TileShape in force when it has the
    input's rank, else by upstream's default tile of an inserted copy (no TileShape, or one
    of the reshaped rank: InferMemoryConflict::InferTileShape)."""
    return _copy(index, op, inputs, 0, copy_tile(op, tuple(inputs[0].shape)))


def copy_tile(op: TracedOp, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The tile of a copy of a value of ``shape``: None when the TileShape in force has the
    value's rank (the copy takes it), else upstream's default tile of a copy it inserts."""
    if op.vec_tile is not None and len(op.vec_tile) == len(shape):
        return None
    return default_copy_tile(shape)


# upstream's budget for the default tile of a copy it inserts (elements)
COPY_TILE_ELEMENTS = 16384


def default_copy_tile(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Upstream's default vector tile for a copy it inserts (InferMemoryConflict::
    SetDefaultShape, framework/src/passes/tensor_graph_pass/infer_memory_conflict.cpp): the
    last dim rounded up to a power of two (at least 32), then each dim before it the same,
    within a budget of 16384 elements that each later dim's tile divides down."""
    def pow2(n: int) -> int:
        return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
    tile = [1] * len(shape)
    budget = COPY_TILE_ELEMENTS
    tile[-1] = min(budget, 32 if shape[-1] < 32 else pow2(shape[-1]))
    for d in range(len(shape) - 2, -1, -1):
        budget //= tile[d + 1]
        tile[d] = max(1, min(budget, pow2(shape[d]) if shape[d] > 0 else 1))
    return tuple(min(t, s) for t, s in zip(tile, shape))


def arange(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """pypto.arange as upstream's TRange tile op (framework/src/interface/tileop/vector/
    range.h) builds each tile: the first 32-byte block's values stored one by one from the
    scalar unit, then each further block of the first repeat a TADDS of the block before
    (up to 7), then each further 256-byte repeat a TADDS of the repeat before, every TADDS
    behind a pipe barrier: a chain of one-block or one-repeat adds."""
    shape = tuple(op.get("shape"))
    if len(shape) != 1:
        raise ConfigError(f"field '{op.where}': arange makes a 1-D tensor, got shape "
                          f"{list(shape)}.")
    dtype = op.get("dtype") or "int32"
    elem = DTYPE_BYTES[dtype]
    tile = _vec_tile(op, shape)
    lo, hi = grid(shape, tile)
    n = _elements(lo, hi)
    block, repeat = UB_BLOCK_BYTES // elem, 256 // elem
    full = int(n.max())
    adds = 0
    if full > block:
        adds += min(full, repeat) // block - 1 + (full < repeat and full % block > 0)
    if full > repeat:
        adds += full // repeat - 1 + (full % repeat > 0)
    ub = ub_bytes(lo, hi, elem)
    _check_ub(limits, op, tile, ub)
    row = np.minimum(n * elem, 256).astype(np.float64)
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=shape,
                out_dtype=dtype, out_lo=lo, out_hi=hi, in_lo=[], in_hi=[],
                flops=n.astype(np.float64), ub_bytes=ub, in_flight=np.ones(len(n)),
                vector_kind="adds" if adds else "", vector_bytes=row,
                vector_rows=np.ones(len(n)),
                vector_row_bytes=row, vector_parts=(("adds", adds),) if adds else (),
                scalar_stores=np.minimum(n, block).astype(np.float64))


def move(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """GM data copied through UB, untiled: the kernel op ``move``, what an assemble of a GM
    view into a GM tensor is.  Upstream's legacy passes leave the view and the assemble it
    feeds whole, turn the view into one UB tensor (a COPY_IN on the AIV's MTE2) and the
    assemble into its COPY_OUT (MTE3), with no Vector instruction between
    (InferDiscontinuousInput's DDRTensorAssignUB, GenerateMoveOp; docs/sources.md §5).  So
    the result is the loaded buffer: one tile, UB holds it once, and the op needs no
    TileShape."""
    (src,) = inputs
    if not isinstance(src, GmValue):
        raise ConfigError(f"field '{op.where}': move takes GM data (a tensor or a view of "
                          f"one); an op's result is already in UB.")
    out_shape = tuple(src.shape)
    lo, hi = grid(out_shape, out_shape)
    elem = DTYPE_BYTES[src.dtype]
    ub = ub_bytes(lo, hi, elem)
    _check_ub(limits, op, out_shape, ub)
    n = _elements(lo, hi)
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=src.dtype, out_lo=lo, out_hi=hi, in_lo=[lo.copy()],
                in_hi=[hi.copy()], flops=np.zeros(len(n)), ub_bytes=ub,
                in_flight=np.ones(len(n)), vector_kind="", vector_bytes=np.zeros(len(n)),
                **_rows(lo, hi, elem))


def _copy(index: int, op: TracedOp, inputs: list[Value], axis: int, tile=None) -> Node:
    shape = list(inputs[0].shape)
    for v in inputs[1:]:
        if len(v.shape) != len(shape) or any(a != b for d, (a, b) in
                                             enumerate(zip(v.shape, shape)) if d != axis):
            raise ConfigError(f"field '{op.where}': concat inputs "
                              f"{[list(v.shape) for v in inputs]} differ off axis {axis}.")
    starts = np.cumsum([0] + [v.shape[axis] for v in inputs])
    shape[axis] = int(starts[-1])
    out_shape = tuple(shape)
    tile = tile or _vec_tile(op, out_shape)
    lo, hi = grid(out_shape, tile)
    in_lo, in_hi = [], []
    for v, s0 in zip(inputs, starts):
        a = lo.copy()
        b = hi.copy()
        a[:, axis] = np.clip(lo[:, axis] - s0, 0, v.shape[axis])
        b[:, axis] = np.clip(hi[:, axis] - s0, 0, v.shape[axis])
        in_lo.append(a)
        in_hi.append(np.maximum(a, b))
    n = _elements(lo, hi)
    elem = DTYPE_BYTES[inputs[0].dtype]
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=inputs[0].dtype, out_lo=lo, out_hi=hi, in_lo=in_lo, in_hi=in_hi,
                flops=np.zeros(len(n)), ub_bytes=2 * ub_bytes(lo, hi, elem),
                in_flight=np.ones(len(n)), vector_kind="copy", vector_bytes=n * elem,
                **_rows(lo, hi, elem))


def gather_elements(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """``pypto.gather(input, dim, index)``: out[..., j, ...] = input[..., index[...], ...] along
    ``dim``, the shape of ``index``.  A tile of the output reads its index tile and, since an
    index may name any position along ``dim``, the whole of that axis of the input under the
    tile's other coordinates; the Vector gathers (vgather) the output's bytes."""
    src, idx = inputs
    if len(src.shape) != len(idx.shape):
        raise ConfigError(f"field '{op.where}': gather index {list(idx.shape)} needs the "
                          f"{len(src.shape)} dims of its input {list(src.shape)}.")
    if idx.dtype not in ("int32", "int64"):
        raise ConfigError(f"field '{op.where}': gather index is {idx.dtype}; it takes int32 "
                          f"or int64.")
    axis = op.get("axis") % len(src.shape)
    if any(i > s for d, (i, s) in enumerate(zip(idx.shape, src.shape)) if d != axis):
        raise ConfigError(f"field '{op.where}': gather index {list(idx.shape)} is larger than "
                          f"its input {list(src.shape)} off the gather axis {axis}.")
    out_shape = tuple(idx.shape)
    tile = _vec_tile(op, out_shape)
    if len(out_shape) > 1 and tile[-1] != out_shape[-1]:
        _check_tail_alignment(op, tile, src.dtype)
    lo, hi = grid(out_shape, tile)
    src_lo, src_hi = lo.copy(), hi.copy()
    src_lo[:, axis], src_hi[:, axis] = 0, src.shape[axis]
    n = _elements(lo, hi)
    elem = DTYPE_BYTES[src.dtype]
    ub = (ub_bytes(lo, hi, elem) + ub_bytes(lo, hi, DTYPE_BYTES[idx.dtype])
          + ub_bytes(src_lo, src_hi, elem))
    _check_ub(limits, op, tile, ub)
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=src.dtype, out_lo=lo, out_hi=hi, in_lo=[src_lo, lo],
                in_hi=[src_hi, hi], flops=np.zeros(len(n)), ub_bytes=ub,
                in_flight=np.ones(len(n)), vector_kind="gather", vector_bytes=n * elem,
                **_rows(lo, hi, elem))


def scatter_elements(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """``pypto.scatter(input, dim, index, src)``: the input with ``src`` (a scalar or a tensor
    shaped like ``index``) written where ``index`` points along ``dim``.  A tile of the output
    reads its input tile and, since any index along ``dim`` may point into it, the whole of
    that axis of ``index`` (and ``src``) under the tile's other coordinates.  No pto-isa
    profile prices a scatter instruction: the vector table's default rate applies."""
    src, idx = inputs[0], inputs[1]
    if len(src.shape) != len(idx.shape) or any(i > s for i, s in zip(idx.shape, src.shape)):
        raise ConfigError(f"field '{op.where}': scatter index {list(idx.shape)} needs the dims "
                          f"of its input {list(src.shape)}, none larger.")
    if idx.dtype not in ("int32", "int64"):
        raise ConfigError(f"field '{op.where}': scatter index is {idx.dtype}; it takes int32 "
                          f"or int64.")
    if len(inputs) == 3 and tuple(inputs[2].shape) != tuple(idx.shape):
        raise ConfigError(f"field '{op.where}': scatter src {list(inputs[2].shape)} needs the "
                          f"index's shape {list(idx.shape)}.")
    axis = op.get("axis") % len(src.shape)
    out_shape = tuple(src.shape)
    tile = _vec_tile(op, out_shape)
    if len(out_shape) > 1 and tile[-1] != out_shape[-1]:
        _check_tail_alignment(op, tile, src.dtype)
    lo, hi = grid(out_shape, tile)
    i_lo = np.minimum(lo, np.asarray(idx.shape))
    i_hi = np.minimum(hi, np.asarray(idx.shape))
    i_lo[:, axis], i_hi[:, axis] = 0, idx.shape[axis]
    n = _elements(lo, hi)
    elem = DTYPE_BYTES[src.dtype]
    ni = _elements(i_lo, i_hi)
    ub = (2 * ub_bytes(lo, hi, elem) + ub_bytes(i_lo, i_hi, DTYPE_BYTES[idx.dtype])
          + (ub_bytes(i_lo, i_hi, elem) if len(inputs) == 3 else 0))
    _check_ub(limits, op, tile, ub)
    extra = len(inputs) - 2               # a src tensor is read like the index
    in_lo, in_hi = [lo, i_lo] + [i_lo] * extra, [hi, i_hi] + [i_hi] * extra
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=src.dtype, out_lo=lo, out_hi=hi, in_lo=in_lo, in_hi=in_hi,
                flops=np.zeros(len(n)), ub_bytes=ub, in_flight=np.ones(len(n)),
                vector_kind="scatter", vector_bytes=ni * elem, **_rows(i_lo, i_hi, elem))


def expand(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """``pypto.expand_clone(x, shape)``: upstream's Expand writes x with its dims of 1
    stretched to ``shape`` into a tensor of its own (python/pypto/op/mutating.py).  A tile of
    the result reads the box of x under it, a dim of 1 at its one row; an expanded last axis
    is a row expand (each row's value read on the scalar unit, then a vector_dup of the row,
    as a binary op's broadcast operand), any other expand a Vector copy of x's rows."""
    (src,) = inputs
    out_shape = tuple(int(d) for d in op.get("shape"))
    if len(src.shape) > len(out_shape) or broadcast_shape([src.shape, out_shape]) != out_shape:
        raise ConfigError(f"field '{op.where}': expand of shape {list(src.shape)} to "
                          f"{list(out_shape)}: only dims of 1 stretch (and leading dims may "
                          f"be added).")
    tile = _vec_tile(op, out_shape)
    if len(out_shape) > 1 and tile[-1] != out_shape[-1]:
        _check_tail_alignment(op, tile, src.dtype)
    lo, hi = grid(out_shape, tile)
    in_lo, in_hi = _broadcast_boxes(src.shape, out_shape, lo, hi)
    elem = DTYPE_BYTES[src.dtype]
    rows_expand = src.shape[-1] == 1 and out_shape[-1] != 1
    ub = ub_bytes(lo, hi, elem) + ub_bytes(in_lo, in_hi, elem)
    _check_ub(limits, op, tile, ub)
    n = _elements(lo, hi)
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=src.dtype, out_lo=lo, out_hi=hi, in_lo=[in_lo], in_hi=[in_hi],
                flops=np.zeros(len(n)), ub_bytes=ub, in_flight=np.ones(len(n)),
                vector_kind="rowexpand" if rows_expand else "copy", vector_bytes=n * elem,
                **_rows(lo, hi, elem))


def gather_in_ub(index: int, op: TracedOp, inputs: list[Value], limits: Limits) -> Node:
    """``pypto.experimental.gather_in_ub(param, indices, block_table, block_size, -2)``:
    out[j, :] = param[block_table[0, t // block_size] * block_size + t % block_size, :] for
    the token t = indices[0, j], a [k, hidden] result in UB.

    Upstream tiles the result by the TileShape's first two dims (k, then hidden,
    TiledGatherInUB in framework/src/interface/operation/operation_impl.cpp); a tile's op
    sees all of the param's rows in its column range, its slice of the indices and the
    whole block table, all in GM (the opcode's inputs are DDR, its output UB, MTE2 its pipe,
    opcode.cpp).  Its tile op (TgatherInUB, framework/src/interface/tileop/vector/gather.h)
    walks the tile's rows: the index and the block-table entry are scalar reads from GM,
    then one TLOAD brings that row's columns into UB.  So a tile costs one copy-in per row
    and no Vector instruction; which rows it reads the tiler decides from the index data
    (``RootCallTiler._gather_rows``), so the boxes here are empty: nothing of the inputs
    lands in UB but the rows the result is made of."""
    param, idx, table = inputs
    where = op.where
    for name, value in (("param", param), ("indices", idx), ("block_table", table)):
        if len(value.shape) != 2:
            raise ConfigError(f"field '{where}.inputs': gather_in_ub {name} has shape "
                              f"{list(value.shape)}; it takes a 2-D "
                              f"{'[tokens, hidden] KV cache' if name == 'param' else '[1, n] int32 row'}"
                              f", as upstream's GatherInUB.")
    if not isinstance(param, GmValue) or len(param.pieces) != 1:
        raise ConfigError(f"field '{where}.inputs': gather_in_ub reads its param from one GM "
                          f"tensor (the KV cache, or a view of it); give it a kernel tensor or "
                          f"a view, not an op's result or a paged gather.")
    for name, value in (("indices", idx), ("block_table", table)):
        if value.shape[0] != 1:
            raise ConfigError(f"field '{where}.inputs': gather_in_ub {name} has shape "
                              f"{list(value.shape)}; it takes one row [1, n] (view the batch's "
                              f"row first).")
        if value.dtype != "int32":
            raise ConfigError(f"field '{where}.inputs': gather_in_ub {name} is {value.dtype}; "
                              f"upstream's GatherInUB reads int32 {name} (cast it to int32).")
        if isinstance(value, LocalValue) and value.path:
            raise ConfigError(f"field '{where}.inputs': gather_in_ub {name} is a view or "
                              f"reshape of an op's result; upstream reads {name} from GM: "
                              f"assemble them into a tensor and view that.")
    out_shape = (int(idx.shape[1]), int(param.shape[1]))
    tile = _vec_tile(op, out_shape)
    lo, hi = grid(out_shape, tile)
    elem = DTYPE_BYTES[param.dtype]
    ub = ub_bytes(lo, hi, elem)
    _check_ub(limits, op, tile, ub)
    rows = (hi - lo)[:, 0]
    n = len(lo)
    none = lambda: (np.zeros((n, 2), np.int64), np.zeros((n, 2), np.int64))
    boxes = [none() for _ in inputs]
    return Node(index=index, op=op, kind="vector", inputs=inputs, out_shape=out_shape,
                out_dtype=param.dtype, out_lo=lo, out_hi=hi, in_lo=[b[0] for b in boxes],
                in_hi=[b[1] for b in boxes], flops=np.zeros(n), ub_bytes=ub,
                in_flight=np.ones(n), vector_kind="", vector_bytes=np.zeros(n),
                # per row, its index and its block-table entry, each a scalar load from GM
                # (then the address arithmetic): two elements of a scalar loop
                scalar_elements=(2 * rows).astype(np.float64), **_rows(lo, hi, elem))


# ops whose result may take an input's UB buffer (upstream's opcodes without
# excludeBufferReuse, opcode.cpp at 08cec41e4 and 883e7dfb: the elementwise arithmetic and
# their scalar forms but DIVS, the unary ops but RECIPROCAL, CAST, EXPAND, WHERE, compares,
# LOGICALNOT, CONCAT; not the row max/min, transposes, gathers, UB copies)
BUFFER_REUSE_OPS = tuple(o for o in UNARY_OPS
                         if o not in ("reciprocal", "copy", "erfc", "fillpad")) \
    + BINARY_OPS + ("where", "expand", "concat", "logical_not")

# ops whose result has their inputs' geometry (a broadcast input aligned at the last dim)
SAME_GEOMETRY = UNARY_OPS + BINARY_OPS + ("full", "where")
BUILDERS = {**{op: elementwise for op in SAME_GEOMETRY},
            **{op: reduce for op in REDUCE_OPS},
            "matmul": matmul, "transpose": transpose, "concat": concat,
            "gather_elements": gather_elements, "scatter_elements": scatter_elements,
            "expand": expand, "move": move, "arange": arange, "gather_in_ub": gather_in_ub}
