"""The kernel language: tensors, ops, loops and tile shapes, as config data.

A kernel file mirrors a PyPTO ``@jit`` function: global tensors with shapes over
named params, a body of statements (ops with PyPTO's names, ``pypto.loop`` or
Python ``for`` loops, ``set_vec_tile_shapes`` / ``set_cube_tile_shapes``,
``sg_set_scope``, ``set_operation_options``), and default jit options.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from .base import Strict
from .expr import ExprError, parse
from .loader import load
from .options import JitOptions, validate_scope

Dim = Union[int, str]
DType = Literal["fp32", "fp16", "bf16", "int8", "int32", "int64", "bool"]

# element sizes; int64 is 8 bytes as upstream's BytesOf(DT_INT64) (seq_lens, block tables
# and indices are int64 in many upstream kernels)
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int32": 4, "int64": 8, "bool": 1}
# "copy": a Vector copy of every tile into a tensor of its own (pypto.clone)
# "erfc" (fp32) is one tile op made of several vector instructions (compiler/ops.py COMPOSITES)
UNARY_OPS = ("exp", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "cast", "relu", "log", "copy",
             "erfc", "logical_not", "fillpad")
# fillpad: pypto.fillpad(x, "constant", value), x's elements past its valid region set to
# ``value``; the result holds data everywhere
# comparisons give a bool tensor (one byte an element, upstream's DT_BOOL); where(cond, a, b)
# takes a where cond holds, else b
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum") + COMPARE_OPS
ELEMENTWISE_OPS = UNARY_OPS + BINARY_OPS + ("where",)
REDUCE_OPS = ("sum", "amax", "amin")
OP_NAMES = ELEMENTWISE_OPS + REDUCE_OPS + (
    "matmul", "transpose", "reshape", "view", "assemble", "concat", "full", "gather",
    "scatter_update", "gather_elements", "scatter_elements", "expand", "move", "arange",
    "topk", "topk_extract", "gather_in_ub", "rename")
# topk: pypto.topk's sort along the last axis, giving each row's k best (value, index) pairs
# interleaved, [..., 2 * align8(k)] fp32, as upstream's sort tile ops keep them;
# topk_extract: the values (fp32) or the indices (int32) of those pairs, [..., k].
# pypto.topk(x, k) returning (values, indices) is one topk and two topk_extract
# arange: pypto.arange, a 1-D tensor start, start + step, ... of ``shape`` [n]
# rename: ``out[:] = value`` (upstream's Tensor.move), the tensor ``out`` names the on-chip value
# from here to the end of the root call: later ops of the call read the value itself, no
# copy.  The call then writes the value into the tensor once, for the calls after it (a
# running state carried from one unrolled loop body to the next stays on chip)
# move: GM data (a tensor or a view) loaded into UB whole and nothing else, as upstream
# moves a view it assembles into another GM tensor (a copy-in, then the assemble's copy-out)
# expand: pypto.expand_clone(x, shape), x's dims of 1 broadcast to ``shape`` in a tensor of
# its own
# gather: paged blocks stacked along axis 0; gather_elements: pypto.gather(input, dim, index),
# an element gather by an index tensor; scatter_elements: pypto.scatter(input, dim, index,
# src), inputs [input, index] with a scalar src or [input, index, src]
# gather_in_ub: pypto.experimental.gather_in_ub(param, indices, block_table, block_size, -2),
# inputs [param, indices, block_table]: the k rows of a paged KV cache the [1, k] token
# indices name, mapped through the [1, n] block table, loaded row by row into UB as [k, hidden]
_ARITY = {"view": 1, "assemble": 1, "scatter_update": 1, "transpose": 1, "reshape": 1,
          "matmul": 2, "full": 0, "arange": 0, "gather": 1, "gather_elements": 2, "where": 3,
          "topk": 1, "topk_extract": 1, "gather_in_ub": 3, "rename": 1,
          **{op: 1 for op in REDUCE_OPS}}


def _check_dims(dims):
    for dim in dims or []:
        if isinstance(dim, str):
            try:
                parse(dim)
            except ExprError as exc:
                raise ValueError(str(exc)) from None
        elif dim < 0:
            raise ValueError(f"dimension {dim} is negative")
    return dims


def _dims_validator(*fields):
    return field_validator(*fields)(classmethod(lambda cls, v: _check_dims(v)))


class TensorSpec(Strict):
    shape: list[Dim] = Field(min_length=1)
    dtype: DType = "fp32"
    format: Literal["ND", "NZ"] = "ND"
    role: Literal["input", "output", "temporary"] = "temporary"
    # pypto.set_cache_policy: "bypass" keeps a streamed tensor from evicting useful L2 data
    cache_policy: Literal["default", "bypass"] = "default"
    # the kernel's control flow reads this tensor's values (data-dependent trip counts, block
    # tables): the control AICPU must fetch it before building anything, unless the launch
    # lists it in runtime_options.ready_on_host_tensors
    control_flow_input: bool = False
    # a pypto.tensor made inside this pypto.loop's body: each iteration of the loop gets
    # memory of its own (upstream allocates it anew per iteration), so iterations share
    # nothing through it and need not wait for each other's writes
    fresh_per: str | None = None

    _dims = _dims_validator("shape")

    @model_validator(mode="after")
    def _fresh_only_for_temporaries(self) -> "TensorSpec":
        if self.fresh_per is not None and self.role != "temporary":
            raise ValueError(f"fresh_per names loop '{self.fresh_per}' on a tensor of role "
                             f"'{self.role}'; only a temporary gets memory per iteration")
        return self


class OpStmt(Strict):
    """One PyPTO op call: ``out = pypto.<op>(*inputs, ...)``."""
    op: Literal[OP_NAMES]
    inputs: list[str] = Field(default_factory=list)
    out: str
    scalar: float | None = None          # scalar form: pypto.add(x, 1.0)
    dtype: DType | None = None           # cast target, matmul out dtype, full dtype
    shape: list[Dim] | None = None       # view, reshape, full, expand
    offsets: list[Dim] | None = None     # view, assemble, scatter_update
    valid_shape: list[Dim] | None = None  # view, on-chip reshape: the region that holds data
    axis: int | None = None              # reductions, concat
    keepdim: bool = True
    a_trans: bool = False
    b_trans: bool = False
    # matmul: A is (M, B, K) and the result (M, B, N), each batch's rows strided by B
    # (upstream's pypto.experimental.transposed_batchmatmul)
    transposed_batch: bool = False
    perm: list[int] | None = None        # transpose
    inplace: bool = False                # reshape: share the input's bytes (PyPTO's default: copy)
    # full; infinities are values a mask fills with (pypto.where(mask, x, -inf))
    value: float = Field(default=0.0, allow_inf_nan=True)
    start: float = 0.0                   # arange: the first value
    step: float = 1.0                    # arange: the difference of consecutive values
    block_rows: Dim | None = None        # gather: rows per paged block
    first_block: Dim = 0                 # gather: first logical block
    count: Dim | None = None             # gather: blocks gathered
    permute: Dim = 0                     # gather: block-table permutation multiplier (0 = identity)
    block_size: Dim | None = None        # gather_in_ub: tokens per paged block
    k: Dim | None = None                 # topk, topk_extract: how many of each row
    largest: bool = True                 # topk, topk_extract: the k largest (else smallest)
    part: Literal["values", "indices"] | None = None   # topk_extract: which half of the pairs
    label: str | None = None             # pypto.set_semantic_label
    cond: str | None = None              # the op exists only where this is true (is_loop_begin ...)
    src: str | None = None               # FILE.py:LINE of the Python statement that made it

    _dims = _dims_validator("shape", "offsets", "valid_shape")

    @field_validator("label")
    @classmethod
    def _label(cls, label):
        import re
        if label is not None and re.fullmatch(r"func\d+_\d+", label):
            raise ValueError(f"semantic label '{label}' looks like a hashOrder key "
                             f"(func<magic>_<order>); PyPTO rejects it, choose another")
        return label

    @model_validator(mode="after")
    def _arity(self) -> "OpStmt":
        if self.op in BINARY_OPS:
            want = 1 if self.scalar is not None else 2
        elif self.op == "concat":
            want = None
        elif self.op == "scatter_elements":
            want = 2 if self.scalar is not None else 3
        elif self.op == "matmul":
            # [a, b] or [a, b, bias]: extend_params' bias_tensor, added by the Cube
            want = len(self.inputs) if len(self.inputs) in (2, 3) else 2
        else:
            want = _ARITY.get(self.op, 1)
        if want is not None and len(self.inputs) != want:
            raise ValueError(f"op '{self.op}' takes {want} input(s), got {len(self.inputs)}")
        if self.transposed_batch and (self.op != "matmul" or len(self.inputs) != 2
                                      or self.a_trans or self.b_trans):
            raise ValueError("transposed_batch is a matmul of two operands, A (M, B, K) and "
                             "B (B, K, N), neither transposed (upstream's "
                             "transposed_batchmatmul)")
        if self.op == "concat" and (len(self.inputs) < 2 or self.axis is None):
            raise ValueError("op 'concat' needs at least 2 inputs and 'axis'")
        needs = {"view": ("shape", "offsets"), "assemble": ("offsets",),
                 "scatter_update": ("offsets",), "cast": ("dtype",), "full": ("shape",),
                 "arange": ("shape",),
                 "expand": ("shape",),
                 "reshape": ("shape",), "transpose": ("perm",),
                 "gather": ("block_rows", "count"), "gather_elements": ("axis",),
                 "scatter_elements": ("axis",), "topk": ("k",), "topk_extract": ("k", "part"),
                 "gather_in_ub": ("block_size", "axis"),
                 **{op: ("axis",) for op in REDUCE_OPS}}
        missing = [f for f in needs.get(self.op, ()) if getattr(self, f) is None]
        if missing:
            raise ValueError(f"op '{self.op}' needs {' and '.join(repr(m) for m in missing)}")
        if self.op == "gather_in_ub" and self.axis != -2:
            # upstream's GatherInUB ignores the argument and gathers rows; its Python API
            # documents -2 as the only value, so anything else is a kernel mistake
            raise ValueError(f"op 'gather_in_ub' gathers rows of its param: 'axis' must be -2, "
                             f"got {self.axis}; write axis: -2")
        if self.op == "gather_in_ub" and isinstance(self.block_size, int) and self.block_size < 1:
            raise ValueError(f"op 'gather_in_ub' needs a positive 'block_size' (tokens per "
                             f"paged block), got {self.block_size}")
        return self


class LoopHead(Strict):
    name: str
    idx: str
    trip: Dim
    # "pypto": pypto.loop, one root call per iteration (or per unroll chunk);
    # "for": a Python for, unrolled inside the enclosing root function.
    style: Literal["pypto", "for"] = "pypto"
    unroll_list: list[int] | None = None   # pypto.loop_unroll: greedy decomposition
    parallel: bool = False

    _dims = field_validator("trip")(classmethod(lambda cls, v: _check_dims([v])[0]))

    @field_validator("unroll_list")
    @classmethod
    def _unroll(cls, value):
        if value is not None and (not value or any(u < 1 for u in value)):
            raise ValueError("unroll_list needs positive factors, e.g. [64, 16, 4]")
        return value


class LoopStmt(Strict):
    loop: LoopHead
    body: list["Statement"] = Field(min_length=1)


class TileStmt(Strict):
    """``pypto.set_vec_tile_shapes(...)``: a tile name from ``tiles`` or literal dims."""
    set_vec_tile_shapes: str | list[Dim]


class CubeTile(Strict):
    """``pypto.set_cube_tile_shapes(m, k, n, enable_multi_data_load, enable_split_k)``:
    [L0, L1] per axis."""
    m: list[Dim] = Field(min_length=2, max_length=2)
    k: list[Dim] = Field(min_length=2, max_length=3)   # [L0, L1] or [L0, kAL1, kBL1]
    n: list[Dim] = Field(min_length=2, max_length=2)
    # "large-packet" loads: A and B come into L1 a kAL1 / kBL1 block per copy; without it
    # every kL0 step copies its own piece (upstream cube_operation_impl.cpp at 08cec41e4)
    enable_multi_data_load: bool = False
    enable_split_k: bool = False

    _dims = _dims_validator("m", "k", "n")


class CubeTileStmt(Strict):
    set_cube_tile_shapes: str | CubeTile


class ScopeStmt(Strict):
    """``pypto.sg_set_scope``: int, or (scope_id, allow_parallel_merge, allow_cross_scope_merge)."""
    sg_set_scope: int | list[Any]

    @field_validator("sg_set_scope", mode="before")
    @classmethod
    def _scope(cls, value):
        return validate_scope(value, "sg_set_scope")


class OperationOptions(Strict):
    """``pypto.experimental.set_operation_options``: ``combine_axis`` lets an op apply an
    operand broadcast along the last axis ([M, 1] with [M, N]) in place; off (upstream's
    default), the operand is expanded to [M, N] first (a TROWEXPAND, docs/sources.md §2).
    An option left out keeps the value in force, as upstream's call does."""
    combine_axis: bool | None = None


class OperationOptionsStmt(Strict):
    set_operation_options: OperationOptions


_KEYS = ("loop", "set_vec_tile_shapes", "set_cube_tile_shapes", "sg_set_scope",
         "set_operation_options", "op")


def _statement_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in _KEYS:
            if key in value:
                return f"{key} statement"
        return None
    return type(value).__name__


Statement = Annotated[
    Union[Annotated[OpStmt, Tag("op statement")], Annotated[LoopStmt, Tag("loop statement")],
          Annotated[TileStmt, Tag("set_vec_tile_shapes statement")],
          Annotated[CubeTileStmt, Tag("set_cube_tile_shapes statement")],
          Annotated[ScopeStmt, Tag("sg_set_scope statement")],
          Annotated[OperationOptionsStmt, Tag("set_operation_options statement")]],
    Discriminator(_statement_kind, custom_error_type="statement",
                  custom_error_message="a statement needs one of the keys " + ", ".join(
                      f"'{k}'" for k in _KEYS)),
]
LoopStmt.model_rebuild()


Values = Union[list[int], list[list[int]], list[list[list[int]]], list[list[list[list[int]]]]]


class Kernel(Strict):
    name: str
    description: str = ""
    params: dict[str, int] = Field(default_factory=dict)
    tensors: dict[str, TensorSpec] = Field(min_length=1)
    tiles: dict[str, Union[list[Dim], CubeTile]] = Field(default_factory=dict)
    body: list[Statement] = Field(min_length=1)
    options: JitOptions = Field(default_factory=JitOptions)
    # The data of input tensors whose elements the kernel reads as scalars (seq_lens[b],
    # block_table[b, i]) for trip counts and view offsets: a run's data, fixed by the
    # config (or a study's values.<name>) so the program is deterministic.  Such a
    # tensor is a control-flow input: the control AICPU reads it before building, unless
    # its spec says `control_flow_input: false` (values only the leaf tasks read, such as
    # scatter_update's row indices).
    values: dict[str, Values] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _values_read_control_flow(cls, data):
        if isinstance(data, dict) and data.get("values") and isinstance(data.get("tensors"), dict):
            tensors = dict(data["tensors"])
            for name in data["values"]:
                spec = tensors.get(name)
                if isinstance(spec, dict) and "control_flow_input" not in spec:
                    tensors[name] = {**spec, "control_flow_input": True}
            data = {**data, "tensors": tensors}
        return data

    @model_validator(mode="after")
    def _values_fit_their_tensors(self) -> "Kernel":
        import numpy as np
        for name, values in self.values.items():
            spec = self.tensors.get(name)
            if spec is None:
                raise ValueError(f"values names '{name}', not a tensor of this kernel (known: "
                                 f"{', '.join(sorted(self.tensors))})")
            if name in self.params:
                raise ValueError(f"values '{name}' has the name of a param")
            if spec.dtype not in ("int32", "int64"):
                raise ValueError(f"values '{name}': tensor '{name}' is {spec.dtype}; values read "
                                 f"as scalars need an int32 or int64 tensor")
            try:
                array = np.asarray(values, dtype=np.int64)
            except ValueError:
                raise ValueError(f"values '{name}' is ragged; give a full nested list") from None
            shape = [d if isinstance(d, int) else None for d in spec.shape]
            if array.ndim != len(shape) or any(d is not None and d != n
                                               for d, n in zip(shape, array.shape)):
                raise ValueError(f"values '{name}' has shape {list(array.shape)}, tensor "
                                 f"'{name}' has shape {spec.shape}")
        return self

    def scalar_env(self) -> dict:
        """Params and the value arrays element reads look up, for shape expressions."""
        import numpy as np
        return {**self.params, **{n: np.asarray(v, dtype=np.int64)
                                  for n, v in self.values.items()}}

    @model_validator(mode="after")
    def _tile_names_exist(self) -> "Kernel":
        for stmt in walk(self.body):
            for attr, want in (("set_vec_tile_shapes", list), ("set_cube_tile_shapes", CubeTile)):
                ref = getattr(stmt, attr, None)
                if isinstance(ref, str):
                    if ref not in self.tiles:
                        raise ValueError(f"{attr} names tile '{ref}', which is not in 'tiles' "
                                         f"(known: {', '.join(sorted(self.tiles)) or 'none'})")
                    if not isinstance(self.tiles[ref], want):
                        raise ValueError(f"{attr} names tile '{ref}', which is a "
                                         f"{'cube' if want is list else 'vector'} tile")
        return self

    @model_validator(mode="after")
    def _fresh_loops_exist(self) -> "Kernel":
        loops = {s.loop.name for s in walk(self.body)
                 if isinstance(s, LoopStmt) and s.loop.style == "pypto"}
        for name, spec in self.tensors.items():
            loop = spec.fresh_per
            if loop is not None and loop not in loops:
                raise ValueError(f"tensors.{name}.fresh_per names '{loop}', which is not a "
                                 f"pypto loop of this kernel (known: "
                                 f"{', '.join(sorted(loops)) or 'none'})")
        return self

    @model_validator(mode="after")
    def _ready_on_host_tensors_exist(self) -> "Kernel":
        unknown = [n for n in self.options.runtime_options.ready_on_host_tensors
                   if n not in self.tensors]
        if unknown:
            raise ValueError(f"runtime_options.ready_on_host_tensors names {', '.join(unknown)}, "
                             f"not a tensor of this kernel (known: "
                             f"{', '.join(sorted(self.tensors))})")
        return self


def walk(body):
    for stmt in body:
        yield stmt
        if isinstance(stmt, LoopStmt):
            yield from walk(stmt.body)


def load_kernel(path: Path) -> Kernel:
    return load(Kernel, path, "kernel")
