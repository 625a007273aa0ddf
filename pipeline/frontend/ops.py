"""The stand-in's ops: each records one kernel-language op and returns its traced result.

Shape rules follow upstream PyPTO where the kernel language can hold the op; where it
cannot (a compiler mechanism is missing), the op stops with what is supported instead.
"""
from __future__ import annotations

import math
from numbers import Real
from types import SimpleNamespace

from . import context
from .symbols import SymInt, is_int, same_dim
from .tensor import (DataType, DType, Tensor, _argument_element, _element, make, row_major,
                     schema_dtype, temporary, unravel)

COMMUTATIVE = ("add", "mul", "maximum", "minimum")
SUPPORTED_OPS = ["add", "sub", "mul", "div", "maximum", "minimum", "exp", "sqrt", "rsqrt", "abs",
                 "neg", "reciprocal", "relu", "log", "tanh", "clip", "ceil", "floor", "trunc",
                 "round", "exp2", "expm1", "pow", "erfc", "gather(input, dim, index)",
                 "scatter(input, dim, index, src)",
                 "scatter_update(input, -2, index, src) (index values given at import)", "cast",
                 "sum(dim, keepdim)",
                 "amax(dim, keepdim)", "amin(dim, keepdim)", "softmax", "sigmoid",
                 "matmul (2-D, batched 3-D/4-D)", "@", "view (GM and on-chip)", "slicing x[a:b, :]",
                 "assemble",
                 "reshape(GM tensor inplace, a copy of a GM tensor or view, or an on-chip value)",
                 "unsqueeze", "clone", "expand_clone", "eq ne lt le gt ge (and < <= > >=)",
                 "logical_not", "where", "zeros", "ones", "transpose", "concat", "full",
                 "arange", "topk(x, k) (MERGE_SORT, last dim)", "fillpad(x, 'constant', v)",
                 "experimental.gather_in_ub(param, indices, block_table, block_size, -2)",
                 "experimental.transposed_batchmatmul(a, b, dtype)",
                 "pypto.tensor", "+ - * / with scalars"]


BROADCAST_RULE = ["shapes aligned at the last dim whose dims match or are 1",
                  "a shorter shape gains leading dims of 1 ([N] with [M, N])"]


def _unsupported(name: str, why: str = "is not in the kernel language yet"):
    def fn(*args, **kwargs):
        raise context.rec().fail(f"pypto.{name} {why}", supported=SUPPORTED_OPS)
    fn.__name__ = name
    return fn


def _tensor(x, op: str, pos: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise context.rec().fail(f"{op} {pos} {x!r} is not a tensor")
    return x


def _is_one(d) -> bool:
    return is_int(d) and d == 1


def _broadcast(op: str, a: Tensor, b: Tensor) -> list:
    """numpy's broadcast, as PyPTO's binary ops: shapes align at the last dim, the shorter
    gains leading dims of 1, a dim of 1 stretches ([N] * [M, N], [M, 1] - [M, N])."""
    return _broadcast_dims(a.shape, b.shape, f"{op} of shapes {a.shape} and {b.shape}")


def _broadcast_dims(sa: list, sb: list, what: str) -> list:
    """The broadcast of two dim lists (numpy's rule), or a refusal naming ``what``."""
    R = context.rec()
    rank = max(len(sa), len(sb))
    sa = [1] * (rank - len(sa)) + list(sa)
    sb = [1] * (rank - len(sb)) + list(sb)
    out = []
    for x, y in zip(sa, sb):
        if same_dim(x, y) or _is_one(y):
            out.append(x)
        elif _is_one(x):
            out.append(y)
        else:
            raise R.fail(f"{what}: dims {x} and {y} neither match nor broadcast",
                         supported=BROADCAST_RULE)
    return out


def _local(op: str, shape, dtype: DType, fields: dict, inputs: list) -> Tensor:
    R = context.rec()
    where = R.where()
    out = make("local", shape, dtype, op)
    R.op({"op": op, **fields}, inputs, out.slot, where)
    return out


def _scalar(x, op: str):
    if isinstance(x, SymInt):
        raise context.rec().fail(f"{op} with the symbolic scalar '{x.text}' (a runtime value) "
                                 f"is not supported yet", supported=["float and int scalars"])
    if isinstance(x, bool) or not isinstance(x, Real):
        raise context.rec().fail(f"{op} operand {x!r} is neither a tensor nor a number")
    return float(x)


def _binary(op: str, a, b, dtype: DType | None = None) -> Tensor:
    """``dtype``: the result's, the tensor operand's unless given (a comparison's bool)."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return _local(op, _broadcast(op, a, b), dtype or a.dtype, {}, [a, b])
    if isinstance(a, Tensor):
        return _local(op, a.shape, dtype or a.dtype, {"scalar": _scalar(b, op)}, [a])
    if isinstance(b, Tensor):
        if op in COMMUTATIVE:
            return _local(op, b.shape, dtype or b.dtype, {"scalar": _scalar(a, op)}, [b])
        symbol = {"sub": "-", "div": "/"}.get(op, op)
        instead = [f"tensor {symbol} scalar"]
        if op == "sub":
            instead.append("-(x - c) for c - x")
        if op == "div":
            instead.append("pypto.reciprocal(x) * c for c / x")
        raise context.rec().fail(f"scalar {symbol} tensor (here {a!r} {symbol} a tensor) is "
                                 f"not in the kernel language yet", supported=instead)
    raise context.rec().fail(f"pypto.{op} needs a tensor operand")


# a scalar on the left of a comparison compares the other way round
_MIRRORED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _compare(op: str, a, b) -> Tensor:
    if not isinstance(a, Tensor) and isinstance(b, Tensor):
        op, a, b = _MIRRORED[op], b, a
    return _binary(op, a, b, DataType.DT_BOOL)


def eq(input, other): return _compare("eq", input, other)
def ne(input, other): return _compare("ne", input, other)
def lt(input, other): return _compare("lt", input, other)
def le(input, other): return _compare("le", input, other)
def gt(input, other): return _compare("gt", input, other)
def ge(input, other): return _compare("ge", input, other)


def logical_not(input):
    """True where the input is 0: a bool input is negated (one vnot), a number compared with
    0 (upstream takes every numeric dtype; the comparison is one vcmpvs)."""
    t = _tensor(input, "logical_not")
    if t.dtype != DataType.DT_BOOL:
        return eq(t, 0.0)
    return _local("logical_not", t.shape, DataType.DT_BOOL, {}, [t])


def where(condition, input, other):
    """pypto.where(cond, a, b): a where cond holds, else b (one vsel a tile); a scalar a or b
    is first broadcast into a tile of its own (pypto.full: one vector_dup)."""
    R = context.rec()
    cond = _tensor(condition, "where", "condition")
    if cond.dtype != DataType.DT_BOOL:
        raise R.fail(f"pypto.where condition is a {cond.dtype.name} tensor: it takes the bool "
                     f"result of a comparison")
    tensors = [x for x in (input, other) if isinstance(x, Tensor)]
    dtype = tensors[0].dtype if tensors else DataType.DT_FP32
    shape = list(cond.shape)
    for t in tensors:
        shape = _broadcast_dims(shape, t.shape, f"where of shapes {cond.shape} and {t.shape}")
    a, b = (x if isinstance(x, Tensor) else full(shape, x, dtype) for x in (input, other))
    if a.dtype != b.dtype:
        raise R.fail(f"pypto.where of {a.dtype.name} and {b.dtype.name}: cast one first")
    return _local("where", shape, dtype, {}, [cond, a, b])


def add(input, other, *, alpha=None):
    if alpha not in (None, 1):
        raise context.rec().fail("add with alpha is not supported")
    return _binary("add", input, other)


def sub(input, other, *, alpha=None):
    if alpha not in (None, 1):
        raise context.rec().fail("sub with alpha is not supported")
    return _binary("sub", input, other)


def mul(input, other):
    return _binary("mul", input, other)


def div(input, other, precision_type=None, *, rounding_mode=None):
    if rounding_mode is not None:
        raise context.rec().fail("div with rounding_mode is not supported")
    return _binary("div", input, other)


def maximum(input, other):
    return _binary("maximum", input, other)


def minimum(input, other):
    return _binary("minimum", input, other)


def _unary(op):
    def fn(input, precision_type=None):
        t = _tensor(input, op)
        return _local(op, t.shape, t.dtype, {}, [t])
    fn.__name__ = op
    return fn


exp, sqrt, rsqrt, abs, neg = (_unary(o) for o in ("exp", "sqrt", "rsqrt", "abs", "neg"))
reciprocal, relu, log = _unary("reciprocal"), _unary("relu"), _unary("log")


def cast(input, dtype, mode=None, satmode=None):
    # mode and satmode pick the rounding of each element; the model prices a cast by bytes
    t = _tensor(input, "cast")
    return _local("cast", t.shape, dtype, {"dtype": schema_dtype(dtype)}, [t])


def _reduce(op):
    def fn(input, dim=-1, keepdim=False):
        R = context.rec()
        t = _tensor(input, op)
        if not is_int(dim) or not -len(t.shape) <= dim < len(t.shape):
            raise R.fail(f"pypto.{op} dim {dim!r} is not a dim of shape {t.shape}")
        shape = t.shape
        axis = dim % len(shape)
        if keepdim or len(shape) == 1:
            shape[axis] = 1           # a 1-D reduction keeps one dim of 1 (no 0-d values)
        else:
            del shape[axis]
        fields = {"axis": dim}
        if not keepdim:
            fields["keepdim"] = False
        return _local(op, shape, t.dtype, fields, [t])
    fn.__name__ = op
    return fn


sum, amax, amin = _reduce("sum"), _reduce("amax"), _reduce("amin")


def matmul(input, mat2, out_dtype=None, *, a_trans=False, b_trans=False, c_matrix_nz=False,
           extend_params=None):
    R = context.rec()
    a, b = _tensor(input, "matmul"), _tensor(mat2, "matmul")
    if not (2 <= len(a.shape) <= 4 and 2 <= len(b.shape) <= 4):
        raise R.fail(f"matmul of shapes {a.shape} x {b.shape}: operands need 2 to 4 dims",
                     supported=["[M, K] @ [K, N]", "batched [B, M, K] @ [B, K, N]",
                                "broadcast [B, M, K] @ [K, N]"])
    bias = None
    if isinstance(extend_params, SimpleNamespace):    # a JSON object given with --arg
        extend_params = vars(extend_params)
    if extend_params:
        on_the_way_out = [k for k in ("scale", "relu_type") if k in extend_params]
        other = [k for k in extend_params if k != "bias_tensor" and k not in on_the_way_out]
        if other:
            raise R.fail(f"matmul extend_params {other} are not supported yet",
                         supported=["extend_params={'bias_tensor': bias, 'scale': s, "
                                    "'relu_type': pypto.ReLuType.RELU}", "a_trans", "b_trans",
                                    "out_dtype"])
        if on_the_way_out:
            # the per-tensor dequantisation scale and the ReLU run in the fixpipe as it
            # copies the result out of L0C (docs/zh/api/operation/pypto-matmul.md, table 2)
            R.notes.append(f"matmul at {R.where()}: extend_params {on_the_way_out} run in the "
                           f"fixpipe as the result leaves L0C; the model prices that copy-out "
                           f"and nothing more for them")
        if "bias_tensor" in extend_params:
            bias = _tensor(extend_params["bias_tensor"], "matmul", "bias")
    if c_matrix_nz:
        raise R.fail("matmul c_matrix_nz is not supported yet",
                     supported=["a_trans", "b_trans", "out_dtype", "bias_tensor"])
    m = a.shape[-1] if a_trans else a.shape[-2]
    n = b.shape[-2] if b_trans else b.shape[-1]
    ka, kb = (a.shape[-2] if a_trans else a.shape[-1]), (b.shape[-1] if b_trans else b.shape[-2])
    if not same_dim(ka, kb):
        raise R.fail(f"matmul K mismatch: {a.shape}{'^T' if a_trans else ''} x "
                     f"{b.shape}{'^T' if b_trans else ''}")
    batch = []
    if len(a.shape) > 2 or len(b.shape) > 2:
        batch = _broadcast_dims(a.shape[:-2] or [1], b.shape[:-2] or [1],
                                f"matmul batch dims of {a.shape} and {b.shape}")
    dtype = out_dtype or DataType.DT_FP32
    fields = {"dtype": schema_dtype(dtype)}
    if a_trans:
        fields["a_trans"] = True
    if b_trans:
        fields["b_trans"] = True
    inputs = [a, b] + ([bias] if bias is not None else [])
    return _local("matmul", batch + [m, n], dtype, fields, inputs)


def transposed_batchmatmul(tensor_a, tensor_b, out_dtype):
    """pypto.experimental.transposed_batchmatmul(a, b, dtype): A (M, B, K) by B (B, K, N) into
    (M, B, N), batch by batch, with no transpose made (the kernel op's
    ``transposed_batch``)."""
    R = context.rec()
    what = "pypto.experimental.transposed_batchmatmul"
    a, b = _tensor(tensor_a, what), _tensor(tensor_b, what)
    if len(a.shape) != 3 or len(b.shape) != 3 or not same_dim(a.shape[1], b.shape[0]) \
            or not same_dim(a.shape[2], b.shape[1]):
        raise R.fail(f"{what} of shapes {a.shape} x {b.shape}",
                     supported=["A (M, B, K) and B (B, K, N)"])
    return _local("matmul", [a.shape[0], a.shape[1], b.shape[2]], out_dtype,
                  {"dtype": schema_dtype(out_dtype), "transposed_batch": True}, [a, b])


def _gm(t, op: str) -> Tensor:
    R = context.rec()
    t = _tensor(t, op)
    if t.kind == "local":
        raise R.fail(f"{op} '{t.slot.root().hint}', an on-chip value (the result of an op), "
                     f"is not supported yet",
                     supported=[f"{op} kernel tensors, pypto.tensor temporaries and their "
                                f"views"])
    return t


def view(input, shape=None, offsets=None, *, valid_shape=None, dtype=None):
    R = context.rec()
    t = _tensor(input, "view")
    if dtype is not None:
        raise R.fail("view with dtype= (a reinterpreting view) is not supported yet",
                     supported=["pypto.view(x, shape, offsets, valid_shape=...)"])
    shape = list(t.shape if shape is None else shape)
    offsets = list([0] * len(shape) if offsets is None else offsets)
    fields = {"shape": R.check_dims(shape, "view shape"),
              "offsets": R.check_dims(offsets, "view offsets")}
    if valid_shape is not None:
        fields["valid_shape"] = R.check_dims(valid_shape, "view valid_shape")
    where = R.where()
    if t.kind == "local":
        # a box of an on-chip value: an op statement where the value exists (its readers
        # read that box of the producer's result)
        out = make("local", shape, t.dtype, "view", valid=valid_shape)
        R.op({"op": "view", **fields}, [t], out.slot, where)
    else:
        out = make("view", shape, t.dtype, "view", t.decl, valid=valid_shape)
        out.defined_by = R.window({"op": "view", **fields}, [t], out.slot, where)
    known = t.elements
    if known is not None:
        out.elements = lambda keys: known([k + o for k, o in zip(keys, offsets)])
    return out


def reshape(input, shape, *, valid_shape=None, inplace=False):
    t = _tensor(input, "reshape")
    out = _reshape(t, list(shape), valid_shape, inplace)
    known, src_shape = t.elements, list(t.shape)
    if known is not None:           # the same elements, read in row-major order
        out.elements = lambda keys: known(unravel(row_major(keys, shape), src_shape))
    return out


def _reshape(t: Tensor, shape, valid_shape, inplace: bool) -> Tensor:
    R = context.rec()
    if t.kind == "local" and R.segment not in t.present and not t.conds:
        # made in another root function: read from the GM workspace it is spilled to, so
        # the reshape is one of that tensor (in place: a window on it, as upstream's)
        R.reachable(t)
        workspace = R.workspace_of(t)
        if workspace is not None:
            t = workspace
    if t.kind == "local":
        return _local_reshape(t, shape, valid_shape)
    if valid_shape is not None and len(valid_shape) == len(shape) and all(
            same_dim(v, d) for v, d in zip(valid_shape, shape)):
        valid_shape = None      # valid throughout: the plain reshape
    leading = valid_shape is not None and len(valid_shape) == len(shape) and (all(
        same_dim(v, d) for v, d in zip(valid_shape[1:], shape[1:])) or
        _squeeze_only(t.shape, shape))
    if (valid_shape is not None and (inplace or not leading)) or (inplace and t.kind == "view"):
        raise R.fail("an inplace reshape with valid_shape, a valid_shape cut off any dim but "
                     "the first, or an inplace reshape of a view, is not supported (PyPTO "
                     "allows a view only inplace=False)",
                     supported=["pypto.reshape(kernel_tensor, shape, inplace=True)",
                                "pypto.reshape(tensor_or_view, shape) (a copy), with a "
                                "valid_shape of leading rows",
                                "pypto.reshape(on_chip_value, shape)"])
    if not inplace:
        # upstream gives the output an address of its own: the data is copied
        fields = {"shape": R.check_dims(shape, "reshape shape"), "inplace": False}
        if valid_shape is not None:
            fields["valid_shape"] = R.check_dims(valid_shape, "reshape valid_shape")
        return _local("reshape", list(shape), t.dtype, fields, [t])
    where = R.where()
    out = make("view", list(shape), t.dtype, "reshaped", t.decl)
    out.defined_by = R.window({"op": "reshape", "shape": R.check_dims(shape, "reshape shape"),
                               "inplace": True}, [t], out.slot, where)
    return out


def _squeeze_only(a, b) -> bool:
    """A reshape from ``a`` to ``b`` that only inserts or drops dims of 1."""
    kept_a = [d for d in a if not same_dim(d, 1)]
    kept_b = [d for d in b if not same_dim(d, 1)]
    return len(kept_a) == len(kept_b) and all(same_dim(x, y) for x, y in zip(kept_a, kept_b))


def _local_reshape(t: Tensor, shape, valid_shape) -> Tensor:
    """Reshape of an on-chip value: its elements read in row-major order under the new
    shape; a reader whose tiles are no contiguous runs of it reads it through the
    producer's workspace (the compiler, simcore/compiler/tiling.py)."""
    R = context.rec()
    shape = list(shape)
    fields = {}
    # only dims of 1 come or go (upstream's unsqueeze, x[b, :]): any valid box carries over
    squeeze = _squeeze_only(t.shape, shape)
    if valid_shape is not None and not (len(valid_shape) == len(shape) and all(
            same_dim(v, d) for v, d in zip(valid_shape, shape))):
        if len(valid_shape) != len(shape) or not (squeeze or all(
                same_dim(v, d) for v, d in zip(valid_shape[1:], shape[1:]))):
            raise R.fail("reshape of an on-chip value with a valid_shape smaller than its "
                         "shape off its first dim is not supported yet (unless the reshape "
                         "only adds or drops dims of 1)",
                         supported=["pypto.reshape(on_chip_value, shape)",
                                    "valid_shape = [leading rows, *shape[1:]]"])
        fields["valid_shape"] = R.check_dims(valid_shape, "reshape valid_shape")
    count, want = 1, 1
    for d in shape:
        count = count * d
    for d in t.shape:
        want = want * d
    if not same_dim(count, want):
        raise R.fail(f"reshape {t.shape} -> {shape} changes the element count")
    return _local("reshape", shape, t.dtype,
                  {"shape": R.check_dims(shape, "reshape shape"), **fields}, [t])


def assemble(*args, parallel=False):
    R = context.rec()
    if parallel:
        raise R.fail("assemble(parallel=True) is not supported yet")
    if len(args) == 2:
        pieces, dst = args
        for src, offsets in pieces:
            assemble(src, offsets, dst)
        return
    if len(args) != 3:
        raise R.fail("assemble takes (src, offsets, dst) or ([(src, offsets), ...], dst)")
    src, offsets, dst = args
    src = _tensor(src, "assemble", "source")
    dst = _gm(dst, "assemble into")
    if src.kind != "local":
        src = gm_load(src)       # GM into GM goes through UB: a move
    if len(offsets) != len(dst.shape):
        raise R.fail(f"assemble offsets {list(offsets)} need one entry per dim of {dst.shape}")
    fields = {"offsets": R.check_dims(offsets, "assemble offsets")}
    if dst.decl is not None and dst.decl.role == "input":
        dst.decl.role = "output"
    R.op({"op": "assemble", **fields}, [src], dst, R.where())


def rename(src, dst):
    """``dst[:] = src`` of an op's result into a pypto.tensor: upstream's Tensor.move repoints
    the tensor at the value, no op.  The kernel op ``rename`` does that: later ops of the root
    function read the value on chip, and the function writes it into the tensor once, at
    its end."""
    R = context.rec()
    R.op({"op": "rename"}, [src], dst, R.where())


def transpose(input, dim0, dim1):
    R = context.rec()
    t = _tensor(input, "transpose")
    perm = list(range(len(t.shape)))
    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
    shape = [t.shape[p] for p in perm]
    return _local("transpose", shape, t.dtype, {"perm": perm}, [t])


def concat(tensors, dim=0):
    R = context.rec()
    ts = [_tensor(t, "concat") for t in tensors]
    if len(ts) < 2:
        raise R.fail("concat needs at least 2 tensors")
    shape = ts[0].shape
    axis = dim % len(shape)
    total = shape[axis]
    for t in ts[1:]:
        total = total + t.shape[axis]
    shape[axis] = total
    return _local("concat", shape, ts[0].dtype, {"axis": dim}, ts)


def full(size, fill_value, dtype, *, valid_shape=None):
    """A tile filled with one value; a valid_shape says which region holds data (what its
    readers count as valid), as a view's does."""
    R = context.rec()
    fields = _valid_field("full", valid_shape, size)
    return _local("full", list(size), dtype, {"shape": R.check_dims(size, "full size"),
                                              "value": _scalar(fill_value, "full"),
                                              "dtype": schema_dtype(dtype), **fields}, [])


def _valid_field(op: str, valid_shape, shape) -> dict:
    """{"valid_shape": ...} for a valid region smaller than ``shape``, else {}."""
    if valid_shape is None or (len(valid_shape) == len(shape) and all(
            same_dim(v, d) for v, d in zip(valid_shape, shape))):
        return {}
    R = context.rec()
    if len(valid_shape) != len(shape):
        raise R.fail(f"{op} to {list(shape)} with valid_shape {list(valid_shape)}: one entry "
                     f"per dim", supported=["a valid_shape of the shape's rank"])
    return {"valid_shape": R.check_dims(valid_shape, f"{op} valid_shape")}


def arange(*args, dtype=None, **kwargs):
    """pypto.arange(end) / (start, end) / (start, end, step): a 1-D tensor of the
    ceil((end - start) / step) values from start by step, int32 unless a bound is a float
    (then fp32)."""
    R = context.rec()
    names = ("start", "end", "step")
    if len(args) == 1 and "end" not in kwargs:
        given = {"end": args[0]}
    else:
        given = dict(zip(names, args))
    given.update(kwargs)
    unknown = set(given) - set(names)
    if unknown or "end" not in given:
        raise R.fail(f"pypto.arange takes start, end and step, got {sorted(given)}",
                     supported=["pypto.arange(end)", "pypto.arange(start, end, step)"])
    start, end, step = given.get("start", 0), given["end"], given.get("step", 1)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
               for v in (start, end, step)):
        raise R.fail(f"pypto.arange({start!r}, {end!r}, {step!r}): bounds must be Python "
                     f"numbers known when the kernel is traced",
                     supported=["int or float start, end and step"])
    if -1e-8 <= step <= 1e-8 or (end - start) / step <= 0:
        raise R.fail(f"pypto.arange({start!r}, {end!r}, {step!r}) is empty or has step 0")
    count = int(math.ceil((end - start) / step))
    if dtype is None:
        floats = any(isinstance(v, float) for v in (start, end, step))
        dtype = DataType.DT_FP32 if floats else DataType.DT_INT32
    out = _local("arange", [count], dtype, {"shape": [count], "start": float(start),
                                            "step": float(step), "dtype": schema_dtype(dtype)},
                 [])
    if dtype == DataType.DT_INT32 and all(isinstance(v, int) for v in (start, step)):
        # its values are known: a scatter_update index made by arange needs no data
        out.elements = lambda keys: start + step * keys[0]
    return out


def _filled(value: float, size, dtype):
    """pypto.zeros / pypto.ones (upstream creation.py: a Full of 0 or 1): sizes as ints or one
    sequence, fp32 unless ``dtype``."""
    shape = list(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple)) else list(size)
    return full(shape, value, dtype if dtype is not None else DataType.DT_FP32)


def zeros(*size, dtype=None):
    return _filled(0.0, size, dtype)


def ones(*size, dtype=None):
    return _filled(1.0, size, dtype)


def softmax(input, dim):
    """Upstream's softmax is built from these ops: amax, sub, exp, sum, div (in FP32)."""
    t = _tensor(input, "softmax")
    x = cast(t, DataType.DT_FP32) if t.dtype.name != "DT_FP32" else t
    e = exp(sub(x, amax(x, dim, True)))
    out = div(e, sum(e, dim, True))
    return cast(out, t.dtype) if t.dtype.name != "DT_FP32" else out


def sigmoid(input):
    """Upstream's sigmoid is built from these ops: 1 / (exp(-x) + 1) (in FP32)."""
    t = _tensor(input, "sigmoid")
    x = cast(t, DataType.DT_FP32) if t.dtype.name != "DT_FP32" else t
    d = add(exp(mul(x, -1.0)), 1.0)
    out = div(full(d.shape, 1.0, DataType.DT_FP32), d)
    return cast(out, t.dtype) if t.dtype.name != "DT_FP32" else out


def tanh(input):
    """tanh(x) = 1 - 2 / (exp(2x) + 1), from these ops (in FP32): the pto-isa cost tables have
    no single tanh instruction to price upstream's TTanh by, its parts each have one."""
    t = _tensor(input, "tanh")
    x = cast(t, DataType.DT_FP32) if t.dtype.name != "DT_FP32" else t
    d = add(exp(mul(x, 2.0)), 1.0)
    out = add(mul(div(full(d.shape, 2.0, DataType.DT_FP32), d), -1.0), 1.0)
    return cast(out, t.dtype) if t.dtype.name != "DT_FP32" else out


def clip(input, min=None, max=None):
    """Upstream's clip as the kernel language holds it: maximum with the lower bound, then
    minimum with the upper (a scalar bound is vmaxs / vmins, a tensor one broadcasts)."""
    t = _tensor(input, "clip")
    out = t
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


def _rounding(name: str):
    def fn(input, decimals=0):
        """Rounding of a float tensor: a conversion to int32 with the rounding mode, then back
        (vconv f32 -> s32 with mode, s32 -> f32), each priced as a cast."""
        R = context.rec()
        t = _tensor(input, name)
        if not is_int(decimals) or (decimals and name != "round"):
            raise R.fail(f"pypto.{name}(decimals={decimals!r}) is not supported",
                         supported=[f"pypto.{name}(x)", "pypto.round(x, decimals=int)"])
        if t.dtype.name in ("DT_INT32", "DT_INT64", "DT_INT8"):
            return t
        scale = 10.0 ** decimals
        x = mul(t, scale) if decimals else t      # round(x, d) = round(x * 10^d) / 10^d
        out = cast(cast(x, DataType.DT_INT32), t.dtype)
        return mul(out, 1.0 / scale) if decimals else out
    fn.__name__ = name
    return fn


ceil, floor, trunc, round = (_rounding(n) for n in ("ceil", "floor", "trunc", "round"))


def erfc(input):
    """Upstream's erfc is one fp32 tile op (TErfc); fp16 and bf16 are cast around it."""
    t = _tensor(input, "erfc")
    x = cast(t, DataType.DT_FP32) if t.dtype.name != "DT_FP32" else t
    out = _local("erfc", x.shape, x.dtype, {}, [x])
    return cast(out, t.dtype) if t.dtype.name != "DT_FP32" else out


def exp2(input):
    """2^x = exp(x * ln 2)."""
    return exp(mul(_tensor(input, "exp2"), 0.6931471805599453))


def expm1(input):
    """exp(x) - 1."""
    return add(exp(_tensor(input, "expm1")), -1.0)


def pow(base, other, precision_type=None):
    """base ** other = exp(other * log(base)); a scalar exponent of 2 is one multiply."""
    t = _tensor(base, "pow")
    if isinstance(other, Real) and not isinstance(other, bool):
        if other == 1:
            return mul(t, 1.0)
        if other == 2:
            return mul(t, t)
        return exp(mul(log(t), float(other)))
    return exp(mul(log(t), _tensor(other, "pow", "exponent")))


def gather(input, dim, index):
    """pypto.gather(input, dim, index): the element gather of the kernel language."""
    R = context.rec()
    t, i = _tensor(input, "gather"), _tensor(index, "gather", "index")
    if not is_int(dim) or not -len(t.shape) <= dim < len(t.shape):
        raise R.fail(f"pypto.gather dim {dim!r} is not a dim of shape {t.shape}")
    if len(i.shape) != len(t.shape):
        raise R.fail(f"pypto.gather index of shape {i.shape} needs the {len(t.shape)} dims of "
                     f"its input {t.shape}")
    return _local("gather_elements", i.shape, t.dtype, {"axis": dim}, [t, i])


def gather_in_ub(param, indices, block_table, block_size, axis):
    """pypto.experimental.gather_in_ub(param, indices, block_table, block_size, -2): the
    [k, hidden] rows of a paged KV cache ([tokens, hidden] in GM) that the [1, k] int32 token
    indices name through the [1, n] int32 block table, loaded into UB.  The leaf tasks read
    the indices and the table, not the control flow: when the data is given (--arg
    NAME.values=...) the config keeps it and the rows read are the ones it names; without
    it the compiler reads stand-in rows (simcore/compiler/tiling.py _gather_rows)."""
    R = context.rec()
    what = "pypto.experimental.gather_in_ub"
    usage = [f"{what}(param [tokens, hidden], indices [1, k] int32, block_table [1, n] "
             f"int32, block_size, -2)"]
    p = _tensor(param, what, "param")
    i = _tensor(indices, what, "indices")
    t = _tensor(block_table, what, "block_table")
    if axis != -2:
        raise R.fail(f"{what} along axis {axis!r}: upstream gathers rows only (axis -2)",
                     supported=usage)
    if not is_int(block_size) or block_size < 1:
        raise R.fail(f"{what} block_size {block_size!r}: a positive Python int (tokens per "
                     f"paged block)", supported=usage)
    for name, x in (("param", p), ("indices", i), ("block_table", t)):
        if len(x.shape) != 2:
            raise R.fail(f"{what} {name} of shape {x.shape}: upstream takes 2-D tensors only",
                         supported=usage)
    for name, x in (("indices", i), ("block_table", t)):
        if not _is_one(x.shape[0]):
            raise R.fail(f"{what} {name} of shape {x.shape}: one row [1, n]", supported=usage)
        if getattr(x.dtype, "name", None) != "DT_INT32":
            raise R.fail(f"{what} {name} of {x.dtype.name}: upstream reads DT_INT32",
                         supported=usage)
        root, _ = _argument_element(x, [0, 0]) if x.kind == "view" else (x, None)
        if root.kind == "arg" and root.name in R.values:
            root.decl.data_values = True     # the leaf tasks read it: keep its data
    valid = None
    if i._valid is not None or p._valid is not None:
        valid = [i.valid_shape[1], p.valid_shape[1]]
    out = make("local", [i.shape[1], p.shape[1]], p.dtype, "gather_in_ub", valid=valid)
    R.op({"op": "gather_in_ub", "block_size": int(block_size), "axis": -2}, [p, i, t],
         out.slot, R.where())
    return out


def topk(input, k, dim=None, largest=True, algo=None):
    """pypto.topk(x, k, dim=-1, largest=True): (values, indices) of each row's k largest
    (or smallest) along the last dim.  One topk (the sort, leaving the k best (value,
    index) pairs, as upstream's sort tile ops do) and a topk_extract for each half; a half
    the kernel never reads still costs its extraction, as upstream writes both."""
    R = context.rec()
    t = _tensor(input, "topk")
    rank = len(t.shape)
    if dim is not None and not (is_int(dim) and dim in (-1, rank - 1)):
        raise R.fail(f"pypto.topk along dim {dim!r} of shape {t.shape}: upstream sorts along "
                     f"the last dim only", supported=["pypto.topk(x, k) or dim=-1"])
    if getattr(algo, "name", "MERGE_SORT") != "MERGE_SORT":
        raise R.fail(f"pypto.topk with algo={algo!r}: A2/A3 run MERGE_SORT only",
                     supported=["algo=pypto.TopKAlgo.MERGE_SORT (the default)"])
    if not is_int(k):
        raise R.fail(f"pypto.topk k={k!r}: a Python int", supported=["k=2048"])
    if t.dtype.name != "DT_FP32":
        raise R.fail(f"pypto.topk of {t.dtype.name}: MERGE_SORT sorts DT_FP32",
                     supported=["pypto.topk(pypto.cast(x, pypto.DT_FP32), k)"])
    lead = list(t.shape[:-1])
    order = {} if largest else {"largest": False}
    pairs = _local("topk", lead + [2 * (-(-k // 8) * 8)], t.dtype, {"k": k, **order}, [t])
    values = _local("topk_extract", lead + [k], t.dtype,
                    {"k": k, **order, "part": "values"}, [pairs])
    indices = _local("topk_extract", lead + [k], DataType.DT_INT32,
                     {"k": k, **order, "part": "indices"}, [pairs])
    return values, indices


def fillpad(input, mode="constant", value=0):
    """pypto.fillpad(x, "constant", value): x with the elements past its valid region set to
    ``value``, the same shape, all of it holding data (1-2 dims, constant mode only)."""
    R = context.rec()
    t = _tensor(input, "fillpad")
    if mode != "constant":
        raise R.fail(f"pypto.fillpad mode {mode!r}: upstream implements 'constant' only",
                     supported=["pypto.fillpad(x, 'constant', value)"])
    if not 1 <= len(t.shape) <= 2:
        raise R.fail(f"pypto.fillpad of a {len(t.shape)}-D tensor: upstream pads 1-2 dims",
                     supported=["a 1-D or 2-D tensor"])
    return _local("fillpad", t.shape, t.dtype, {"value": _scalar(value, "fillpad")}, [t])


def scatter(input, dim, index, src, *, reduce=None):
    """pypto.scatter(input, dim, index, src): the element scatter of the kernel language."""
    R = context.rec()
    t, i = _tensor(input, "scatter"), _tensor(index, "scatter", "index")
    if reduce is not None:
        raise R.fail(f"pypto.scatter(reduce={reduce!r}) is not supported yet",
                     supported=["pypto.scatter(input, dim, index, src)"])
    if not is_int(dim) or not -len(t.shape) <= dim < len(t.shape):
        raise R.fail(f"pypto.scatter dim {dim!r} is not a dim of shape {t.shape}")
    if isinstance(src, Tensor):
        return _local("scatter_elements", t.shape, t.dtype, {"axis": dim}, [t, i, src])
    return _local("scatter_elements", t.shape, t.dtype,
                  {"axis": dim, "scalar": _scalar(src, "scatter")}, [t, i])


def scatter_(input, dim, index, src, *, reduce=None):
    """In place: a GM tensor gets the result assembled into it; an on-chip value is the
    result from here on (renamed, as Tensor.move renames one)."""
    out = scatter(input, dim, index, src, reduce=reduce)
    if input.kind == "local":
        input.move(out)
    else:
        assemble(out, [0] * len(out.shape), input)
    return input


def scatter_update(input, dim, index, src):
    """pypto.scatter_update(input, -2, index, src): row i*s+j of ``src`` (2-D [b*s, d], or
    4-D [b, s, 1, d]) goes to row index[i, j] of ``input`` (2-D [rows, d], or the paged
    4-D [blocks, block_size, 1, d], where it is block index // block_size, slot
    index % block_size), in place.  Upstream's leaf task copies index and src into UB and
    writes each row out on its own; here each row is an assemble of one row of ``src`` at
    the row the index data names, so the index needs its values (--arg NAME.values=...).
    The leaf tasks read them, not the control flow: no host fetch before the launch.
    An on-chip ``input`` (a copying reshape of a view) is first written to a GM tensor of
    its own, which the rows go into and which ``input`` is from then on."""
    R = context.rec()
    target = _tensor(input, "scatter_update", "input")
    if target.kind == "local":
        # an op's result (a copying reshape of a view): upstream scatters into that copy,
        # a tensor of its own in GM, and the value is the copy from then on
        dst = temporary(list(target.shape), target.dtype, f"{target.slot.root().hint}_scatter")
        assemble(target, [0] * len(target.shape), dst)
    else:
        dst = _gm(target, "scatter_update into")
    idx = _tensor(index, "scatter_update", "index")
    rows = _tensor(src, "scatter_update", "src")
    if len(dst.shape) not in (2, 4) or dim not in (-2, len(dst.shape) - 2):
        raise R.fail(f"scatter_update into a {len(dst.shape)}-D tensor along dim {dim!r}",
                     supported=["scatter_update(input, -2, index, src) into a 2-D [rows, d] "
                                "or 4-D [blocks, block_size, 1, d] input"])
    if len(idx.shape) != 2 or not all(is_int(n) for n in idx.shape):
        raise R.fail(f"scatter_update index of shape {idx.shape}: a 2-D [b, s] index of "
                     f"static sizes", supported=["index [b, s] with int sizes"])
    b, s = idx.shape
    d = dst.shape[-1]
    want = [b * s, d] if len(rows.shape) == 2 else [b, s, 1, d]
    if len(rows.shape) not in (2, 4) or not all(same_dim(x, y)
                                                 for x, y in zip(rows.shape, want)):
        raise R.fail(f"scatter_update src of shape {rows.shape} for an index of shape "
                     f"{idx.shape}: expected {want}")
    if rows.kind != "local":
        rows = gm_load(rows)
    block = dst.shape[1] if len(dst.shape) == 4 else None
    valid = idx._valid if idx._valid is not None else idx.shape
    for i in range(b):
        for j in range(s):
            # only the index's valid entries name rows; a bound known per call only
            # (a valid_shape that names a loop index) makes the row's write conditional
            limits = [f"{k} < {v.text}" for k, v in zip((i, j), valid) if isinstance(v, SymInt)]
            if any(is_int(v) and k >= v for k, v in zip((i, j), valid)):
                continue
            R.conds.extend(limits)
            try:
                at = _element(idx, [i, j], control_flow=False)
                row = view(rows, [1, d] if len(rows.shape) == 2 else [1, 1, 1, d],
                           [i * s + j, 0] if len(rows.shape) == 2 else [i, j, 0, 0])
                offsets = [at, 0] if block is None else [at // block, at % block, 0, 0]
                R.op({"op": "scatter_update", "offsets": R.check_dims(offsets,
                                                                      "scatter_update row")},
                     [row], dst, R.where())
            finally:
                del R.conds[len(R.conds) - len(limits):]
    if dst.decl is not None and dst.decl.role == "input":
        dst.decl.role = "output"
    if target.kind == "local":
        target.move(dst)
        return target
    return dst


def gm_load(src):
    """A GM tensor or view moved into UB whole, to be assembled into GM: upstream's view and
    assemble of GM data, a copy-in and a copy-out with no Vector instruction (the kernel
    op ``move``)."""
    t = _tensor(src, "assemble", "source")
    return _local("move", t.shape, t.dtype, {}, [t])


def clone(input):
    """pypto.clone(x): upstream's Assign (OP_REGISTER_COPY) gives the result an address of its
    own.  Upstream's passes drop the copy where it is redundant
    (framework/src/passes/tile_graph_pass/graph_optimization/remove_redundant_op.h); ptolab
    always prices it, as the Vector copy of every tile (``copy``)."""
    t = _tensor(input, "clone")
    return _local("copy", t.shape, t.dtype, {}, [t])


def expand_clone(input, shape, *, valid_shape=None):
    """pypto.expand_clone(x, shape): x's dims of 1 stretched to ``shape`` in a tensor of its
    own (upstream's Expand), numpy's broadcast rule; a valid_shape is the region that holds
    data, for the result's readers."""
    R = context.rec()
    t = _tensor(input, "expand_clone")
    shape = list(shape)
    fields = _valid_field("expand_clone", valid_shape, shape)
    lead = len(shape) - len(t.shape)
    if lead < 0 or any(not (_is_one(d) or same_dim(d, s))
                       for d, s in zip(t.shape, shape[lead:])):
        raise R.fail(f"pypto.expand_clone of shape {t.shape} to {shape}: only dims of 1 "
                     f"stretch (and leading dims may be added)")
    return _local("expand", shape, t.dtype,
                  {"shape": R.check_dims(shape, "expand_clone shape"), **fields}, [t])


def unsqueeze(input, dim):
    """pypto.unsqueeze(x, dim): upstream's Unsqueeze is Reshape with a dim of 1 inserted
    (framework/src/interface/operation/operation_impl.cpp), so it is that reshape here."""
    R = context.rec()
    t = _tensor(input, "unsqueeze")
    rank = len(t.shape)
    if not is_int(dim) or not -rank - 1 <= dim <= rank:
        raise R.fail(f"pypto.unsqueeze dim {dim!r} is not a position in shape {t.shape} "
                     f"(from {-rank - 1} to {rank})")
    shape = list(t.shape)
    shape.insert(dim + rank + 1 if dim < 0 else dim, 1)
    return reshape(t, shape)


METHODS = {"add": add, "sub": sub, "mul": mul, "div": div, "maximum": maximum,
           "minimum": minimum, "exp": exp, "sqrt": sqrt, "rsqrt": rsqrt, "abs": abs, "neg": neg,
           "reciprocal": reciprocal, "sum": sum, "amax": amax, "amin": amin, "matmul": matmul,
           "view": view, "reshape": reshape, "transpose": transpose, "softmax": softmax,
           "sigmoid": sigmoid, "relu": relu, "log": log, "tanh": tanh, "clip": clip,
           "ceil": ceil, "floor": floor, "trunc": trunc, "round": round, "exp2": exp2,
           "expm1": expm1, "pow": pow, "erfc": erfc, "gather": gather, "scatter": scatter,
           "scatter_": scatter_, "scatter_update": scatter_update, "clone": clone,
           "unsqueeze": unsqueeze,
           "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge,
           "logical_not": logical_not,
           "expand_clone": expand_clone, "topk": topk, "fillpad": fillpad,
           "assemble": lambda self, src, offsets: assemble(src, offsets, self)}

UNSUPPORTED = ("log1p", "log2", "log10", "lrelu", "prelu",
               "index_select", "sign",
               "cumsum",
               "permute", "argmax", "argmin", "var", "atomic_add", "rms_norm",
               "sin", "cos")
