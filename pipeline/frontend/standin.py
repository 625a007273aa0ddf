"""Build the stand-in ``pypto`` module: the API surface the tracer supports.

Names upstream has but the kernel language cannot hold yet resolve to functions that stop
with the list of what is supported; enum namespaces (CastMode, PrecisionType, ...) resolve
to plain member names so module-level code imports.
"""
from __future__ import annotations

import functools
import types

from . import context, control, ops, tensor
from .symbols import SymInt

ENTRY_POINTS = (
    "jit", "frontend.jit", "options", "Tensor", "tensor", "DYNAMIC", "STATIC", "DT_FP32",
    "DT_FP16", "DT_BF16", "DT_INT8", "DT_INT32", "TileOpFormat.TILEOP_NZ", "loop(stop | start, "
    "stop, step, name=, idx_name=, unroll_list=, parallel=)", "loop_unroll", "Python for",
    "is_loop_begin", "is_loop_end", "cond", "if on loop conditions", "set_vec_tile_shapes",
    "get_vec_tile_shapes", "set_cube_tile_shapes", "get_cube_tile_shapes",
    "set_pass_options(sg_set_scope=, vec_nbuffer_setting=, cube_l1_reuse_setting=, "
    "cube_nbuffer_setting=)", "set_semantic_label", "set_matrix_size",
    "experimental.set_operation_options(combine_axis=)",
    *ops.SUPPORTED_OPS,
    "Tensor.move", "slicing", "slice assignment", "ceildiv", "min", "max")


class _Status:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"pypto.{self.name}"


DYNAMIC, STATIC = _Status("DYNAMIC"), _Status("STATIC")


class _Missing:
    """An upstream name the stand-in does not hold: calling it (or anything under it, such
    as ``pypto.runtime.x()``) stops with the list of what is supported."""

    def __init__(self, name: str):
        self.__name__ = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.__name__}.{attr}")

    def __call__(self, *args, **kwargs):
        raise self._stop()

    def _stop(self, use: str = ""):
        what = f"pypto.{self.__name__}{use} is not supported by the tracing stand-in"
        if context.active is None:
            return RuntimeError(what.replace("the tracing", "ptolab's tracing"))
        return context.rec().fail(what, supported=ENTRY_POINTS)

    # a query such as `pypto.platform.npuarch == "DAV_3510"` must not quietly be False
    def __eq__(self, other):
        raise self._compared(f" == {other!r}")

    def __ne__(self, other):
        raise self._compared(f" != {other!r}")

    def _compared(self, use: str):
        what = f"pypto.{self.__name__}{use} is not supported by the tracing stand-in"
        if self.__name__ == "platform.npuarch":
            what += (f": `ptolab import` traces a kernel for one chip, so a kernel that "
                     f"branches on the platform keeps that chip's branch: name it with "
                     f"`ptolab import --arch {'|'.join(ARCHES)}` (the study's hardware)")
        if context.active is None:
            return RuntimeError(what.replace("the tracing", "ptolab's tracing"))
        return context.rec().fail(what)

    def __bool__(self):
        raise self._stop(" as a condition")

    __hash__ = object.__hash__

    def __repr__(self):
        return f"<pypto.{self.__name__}: not in ptolab's stand-in>"


def _missing(name: str) -> _Missing:
    return _Missing(name)


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper() and not name.startswith("DT_"):
            value = tensor.Enum(name)
        else:
            prefix = self.__name__.partition(".")[2]
            value = _missing(f"{prefix}.{name}" if prefix else name)
        setattr(self, name, value)
        return value


def op_wrapper(fn):
    """Upstream's op_wrapper converts arguments and, around the call, sets the source
    location of every op inside to the call site, the outermost one winning
    (python/pypto/_op_wrapper.py, set_source_location in python/pypto/_utils.py)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        R = context.active
        if R is None or R.span is not None:
            return fn(*args, **kwargs)
        R.span = R.where()
        try:
            return fn(*args, **kwargs)
        finally:
            R.span = None
    return wrapped


def submodule(name: str) -> _Module:
    """Any other ``pypto.*`` module a kernel file imports (``pypto.pypto_impl``,
    ``pypto.runtime``): its names stop when used."""
    module = _Module(name)
    module.__path__ = []
    return module


# the chips a kernel may branch on, as upstream's pypto.platform.npuarch names them (the
# hardware files' names, upper-case)
ARCHES = ("DAV_2201", "DAV_3510")


def build(arch: str | None = None) -> dict[str, types.ModuleType]:
    """Fresh modules for ``pypto``, ``pypto.frontend`` and ``pypto.experimental``;
    ``pypto.platform.npuarch`` answers ``arch`` when one is given."""
    pypto = _Module("pypto", "ptolab's tracing stand-in for PyPTO (see pipeline/frontend)")
    if arch is not None:
        # the chip's name; any other platform query stops as an unknown name does
        pypto.platform = _Module("pypto.platform")
        pypto.platform.npuarch = arch
    frontend = _Module("pypto.frontend")
    experimental = _Module("pypto.experimental")
    pypto.__path__ = []          # a package: `import pypto.operation` finds a stand-in
    operation = submodule("pypto.operation")
    operation.op_wrapper = op_wrapper
    frontend.jit = control.jit
    frontend.dynamic = _missing("frontend.dynamic")
    experimental.set_operation_options = control.set_operation_options
    experimental.gather_in_ub = ops.gather_in_ub
    experimental.transposed_batchmatmul = ops.transposed_batchmatmul
    names = {
        "frontend": frontend, "experimental": experimental, "operation": operation,
        "jit": control.jit,
        "options": control.options, "Tensor": tensor.Tensor, "tensor": tensor.Tensor,
        "DataType": tensor.DataType, "TileOpFormat": tensor.TileOpFormat,
        "CachePolicy": tensor.CachePolicy, "DYNAMIC": DYNAMIC, "STATIC": STATIC,
        "RunMode": tensor.Enum("RunMode", NPU=0, SIM=1),
        "loop": control.loop, "loop_unroll": control.loop_unroll,
        "is_loop_begin": control.is_loop_begin, "is_loop_end": control.is_loop_end,
        "cond": control.cond, "set_vec_tile_shapes": control.set_vec_tile_shapes,
        "get_vec_tile_shapes": control.get_vec_tile_shapes,
        "set_cube_tile_shapes": control.set_cube_tile_shapes,
        "get_cube_tile_shapes": control.get_cube_tile_shapes,
        "set_pass_options": control.set_pass_options,
        "set_runtime_options": control.set_runtime_options,
        "set_debug_options": control.set_debug_options,
        "set_codegen_options": control.set_codegen_options,
        "set_host_options": control.set_host_options,
        "set_verify_options": control.set_verify_options,
        "set_semantic_label": control.set_semantic_label, "ceildiv": control.ceildiv,
        "set_matrix_size": control.set_matrix_size,
        "min": control.sym_min, "max": control.sym_max, "SymbolicScalar": control.SymbolicScalar,
        "symbolic_scalar": control.symbolic_scalar, "matmul": ops.matmul, "view": ops.view,
        "reshape": ops.reshape, "assemble": ops.assemble, "transpose": ops.transpose,
        "concat": ops.concat, "full": ops.full, "cast": ops.cast, "softmax": ops.softmax,
        "sigmoid": ops.sigmoid, "tanh": ops.tanh, "clip": ops.clip, "ceil": ops.ceil,
        "floor": ops.floor, "trunc": ops.trunc, "round": ops.round, "exp2": ops.exp2,
        "expm1": ops.expm1, "pow": ops.pow, "gather": ops.gather, "erfc": ops.erfc,
        "scatter": ops.scatter, "scatter_": ops.scatter_, "clone": ops.clone,
        "scatter_update": ops.scatter_update, "arange": ops.arange,
        "unsqueeze": ops.unsqueeze, "expand_clone": ops.expand_clone,
        "where": ops.where, "logical_not": ops.logical_not, "greater": ops.gt,
        "zeros": ops.zeros, "ones": ops.ones, "topk": ops.topk,
        "fillpad": ops.fillpad,
        **{c: getattr(ops, c) for c in ("eq", "ne", "lt", "le", "gt", "ge")},
    }
    for op in ("add", "sub", "mul", "div", "maximum", "minimum", "exp", "sqrt", "rsqrt", "abs",
               "neg", "reciprocal", "relu", "log", "sum", "amax", "amin"):
        names[op] = getattr(ops, op)
    for name in (*tensor.KERNEL_DTYPES, *tensor.OTHER_DTYPES):
        names[name] = getattr(tensor.DataType, name)
    for name in ops.UNSUPPORTED:
        names[name] = ops._unsupported(name)
    for key, value in names.items():
        setattr(pypto, key, value)
    modules = {"pypto": pypto, "pypto.frontend": frontend, "pypto.experimental": experimental,
               "pypto.operation": operation}
    if arch is not None:
        modules["pypto.platform"] = pypto.platform   # `from pypto.platform import npuarch`
    return modules
