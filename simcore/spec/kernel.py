"""The kernel language: tensors, ops, loops and tile shapes, as config data.

A kernel file mirrors a PyPTO ``@jit`` function: global tensors with shapes over
named params, a body of statements (ops with PyPTO's names, ``pypto.loop`` or
Python ``for`` loops, ``set_vec_tile_shapes``), and default jit options.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from .base import Strict
from .expr import ExprError, parse
from .loader import load
from .options import JitOptions

Dim = Union[int, str]

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int32": 4}
UNARY_OPS = ("exp", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "cast")
BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum")
ELEMENTWISE_OPS = UNARY_OPS + BINARY_OPS
OP_NAMES = ELEMENTWISE_OPS + ("view", "assemble")


def _check_dims(dims: list[Dim] | None) -> list[Dim] | None:
    for dim in dims or []:
        if isinstance(dim, str):
            try:
                parse(dim)
            except ExprError as exc:
                raise ValueError(str(exc)) from None
        elif dim < 0:
            raise ValueError(f"dimension {dim} is negative")
    return dims


class TensorSpec(Strict):
    shape: list[Dim] = Field(min_length=1)
    dtype: Literal["fp32", "fp16", "bf16", "int8", "int32"] = "fp32"
    format: Literal["ND", "NZ"] = "ND"
    role: Literal["input", "output", "temporary"] = "temporary"

    _dims = field_validator("shape")(classmethod(lambda cls, v: _check_dims(v)))


class OpStmt(Strict):
    """One PyPTO op call: ``out = pypto.<op>(*inputs, ...)``."""
    op: Literal[OP_NAMES]
    inputs: list[str] = Field(min_length=1)
    out: str
    scalar: float | None = None          # scalar form: pypto.add(x, 1.0)
    dtype: Literal["fp32", "fp16", "bf16", "int8", "int32"] | None = None  # cast target
    shape: list[Dim] | None = None       # view
    offsets: list[Dim] | None = None     # view, assemble
    label: str | None = None             # pypto.set_semantic_label

    _dims = field_validator("shape", "offsets")(classmethod(lambda cls, v: _check_dims(v)))

    @model_validator(mode="after")
    def _arity(self) -> "OpStmt":
        want = {"view": 1, "assemble": 1}.get(self.op)
        if self.op in UNARY_OPS or (self.op in BINARY_OPS and self.scalar is not None):
            want = 1
        elif self.op in BINARY_OPS:
            want = 2
        if len(self.inputs) != want:
            raise ValueError(f"op '{self.op}' takes {want} input(s), got {len(self.inputs)}")
        if self.op == "view" and (self.shape is None or self.offsets is None):
            raise ValueError("op 'view' needs 'shape' and 'offsets'")
        if self.op == "assemble" and self.offsets is None:
            raise ValueError("op 'assemble' needs 'offsets'")
        if self.op == "cast" and self.dtype is None:
            raise ValueError("op 'cast' needs 'dtype'")
        return self


class LoopHead(Strict):
    name: str
    idx: str
    trip: Dim
    # "pypto": pypto.loop, one root call per iteration; "for": Python for, unrolled
    # inside the enclosing root function.
    style: Literal["pypto", "for"] = "pypto"

    _dims = field_validator("trip")(classmethod(lambda cls, v: _check_dims([v])[0]))


class LoopStmt(Strict):
    loop: LoopHead
    body: list["Statement"] = Field(min_length=1)


class TileStmt(Strict):
    """``pypto.set_vec_tile_shapes(...)``: a tile name from ``tiles`` or literal dims."""
    set_vec_tile_shapes: str | list[Dim]


def _statement_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in ("loop", "set_vec_tile_shapes", "op"):
            if key in value:
                return f"{key} statement"
        return None
    return type(value).__name__


Statement = Annotated[
    Union[Annotated[OpStmt, Tag("op statement")], Annotated[LoopStmt, Tag("loop statement")],
          Annotated[TileStmt, Tag("set_vec_tile_shapes statement")]],
    Discriminator(_statement_kind, custom_error_type="statement",
                  custom_error_message="a statement needs one of the keys 'op', 'loop' or "
                                       "'set_vec_tile_shapes'"),
]
LoopStmt.model_rebuild()


class Kernel(Strict):
    name: str
    description: str = ""
    params: dict[str, int] = Field(default_factory=dict)
    tensors: dict[str, TensorSpec] = Field(min_length=1)
    tiles: dict[str, list[Dim]] = Field(default_factory=dict)
    body: list[Statement] = Field(min_length=1)
    options: JitOptions = Field(default_factory=JitOptions)

    @model_validator(mode="after")
    def _tile_names_exist(self) -> "Kernel":
        for stmt in _walk(self.body):
            ref = getattr(stmt, "set_vec_tile_shapes", None)
            if isinstance(ref, str) and ref not in self.tiles:
                raise ValueError(f"set_vec_tile_shapes names tile '{ref}', which is not in "
                                 f"'tiles' (known: {', '.join(sorted(self.tiles)) or 'none'})")
        return self


def _walk(body):
    for stmt in body:
        yield stmt
        if isinstance(stmt, LoopStmt):
            yield from _walk(stmt.body)


def load_kernel_data(path: Path) -> dict[str, Any]:
    from .loader import read_mapping
    return read_mapping(path)


def load_kernel(path: Path) -> Kernel:
    return load(Kernel, path, "kernel")
