"""The stand-in's tensors and dtypes: placeholders that record what a kernel does to them.

A ``Tensor`` is either in GM (a kernel argument, a ``pypto.tensor`` temporary, or a view
or in-place reshape of one) or on chip (the result of an op).  Ops and their shape rules
live in ops.py; this module holds the value and the Python syntax on it (operators,
slicing, slice assignment, ``.move``).
"""
from __future__ import annotations

import ast
import sys

from simcore.spec.expr import ExprError, evaluate, parse

from . import context
from .recorder import Slot, TensorDecl
from .symbols import OWN_CODE, SymInt, is_int


class DType:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"DataType.{self.name}"


# upstream DataType members; the kernel language holds the first seven
KERNEL_DTYPES = {"DT_FP32": "fp32", "DT_FP16": "fp16", "DT_BF16": "bf16", "DT_INT8": "int8",
                 "DT_INT32": "int32", "DT_INT64": "int64", "DT_BOOL": "bool"}
OTHER_DTYPES = ("DT_INT4", "DT_INT16", "DT_FP8", "DT_HF4", "DT_HF8", "DT_FP8E4M3",
                "DT_FP8E5M2", "DT_FP8E8M0", "DT_FP4_E2M1", "DT_FP4_E2M1X2", "DT_FP4_E1M2",
                "DT_FP4_E1M2X2", "DT_UINT8", "DT_UINT16", "DT_UINT32", "DT_UINT64", "DT_DOUBLE")


class _DataTypes:
    def __init__(self):
        for name in (*KERNEL_DTYPES, *OTHER_DTYPES):
            setattr(self, name, DType(name))


DataType = _DataTypes()
BY_SCHEMA = {v: getattr(DataType, k) for k, v in KERNEL_DTYPES.items()}


def schema_dtype(dtype, of: str = "") -> str:
    of = f" of {of}" if of else ""
    if not isinstance(dtype, DType):
        raise context.rec().fail(f"{dtype!r}{of} is not a pypto dtype",
                                 supported=[f"pypto.{k}" for k in KERNEL_DTYPES])
    if dtype.name not in KERNEL_DTYPES:
        raise context.rec().fail(f"dtype {dtype.name}{of} is not in the kernel language yet",
                                 supported=[f"pypto.{k}" for k in KERNEL_DTYPES])
    return KERNEL_DTYPES[dtype.name]


class Enum:
    """An upstream enum namespace (CastMode, PrecisionType, ...): members are names only."""

    def __init__(self, name: str, **values):
        self._name = name
        for k, v in values.items():
            setattr(self, k, v)

    def __getattr__(self, member):
        if member.startswith("_"):
            raise AttributeError(member)
        value = EnumMember(self._name, member)
        setattr(self, member, value)
        return value


class EnumMember:
    def __init__(self, owner: str, name: str):
        self.owner, self.name = owner, name

    def __repr__(self):
        return f"{self.owner}.{self.name}"


TileOpFormat = Enum("TileOpFormat")
CachePolicy = Enum("CachePolicy")


class TensorAnnotation:
    """``pypto.Tensor[shape, dtype]`` / ``pypto.Tensor(shape, dtype)`` in a signature."""

    def __init__(self, shape=None, dtype=None, name="", format=None):
        self.shape, self.dtype, self.name, self.format = shape, dtype, name, format

    def __repr__(self):
        return f"pypto.Tensor({self.shape!r}, {self.dtype!r})"


def _format_name(fmt) -> str:
    if fmt is None or (isinstance(fmt, EnumMember) and fmt.name == "TILEOP_ND"):
        return "ND"
    if isinstance(fmt, EnumMember) and fmt.name == "TILEOP_NZ":
        return "NZ"
    raise context.rec().fail(f"tensor format {fmt!r} is not known",
                             supported=["pypto.TileOpFormat.TILEOP_ND", "TILEOP_NZ"])


class Tensor:
    """A traced tensor.  Outside a trace, ``pypto.Tensor(...)`` makes an annotation."""

    def __new__(cls, shape=None, dtype=None, name="", format=None, *rest, **kwargs):
        if context.active is None:
            return TensorAnnotation(shape, dtype, name, format)
        return temporary(shape, dtype, name, format)

    def __class_getitem__(cls, params):
        if not isinstance(params, tuple):
            params = (params,)
        shape = dtype = fmt = None
        name = ""
        for p in params:
            if isinstance(p, (list, tuple)) or p is Ellipsis:
                shape = p
            elif isinstance(p, DType):
                dtype = p
            elif isinstance(p, EnumMember):
                fmt = p
            elif isinstance(p, str):
                name = p
            elif isinstance(p, dict):
                shape, dtype = p.get("shape", shape), p.get("dtype", dtype)
                fmt, name = p.get("format", fmt), p.get("name", name)
        return TensorAnnotation(shape, dtype, name, fmt)

    # -- properties ---------------------------------------------------------------------
    @property
    def shape(self):
        return list(self._shape)

    @property
    def valid_shape(self):
        return list(self._valid or self._shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def dim(self):
        return len(self._shape)

    @property
    def format(self):
        return getattr(TileOpFormat, "TILEOP_" + (self.decl.format if self.decl else "ND"))

    @property
    def name(self):
        return self.slot.root().hint

    def __repr__(self):
        return f"Tensor({self.slot.root().hint}, {self._shape}, {self._dtype})"

    def __bool__(self):
        raise context.rec().fail("a tensor decides a Python branch; tensor values are data "
                                 "and are not known while tracing")

    def __iter__(self):
        raise context.rec().fail("a tensor is not iterable")

    def __len__(self):
        return int(self._shape[0])

    # -- operators -------------------------------------------------------------------------
    def __add__(self, o): return _ops().add(self, o)
    def __radd__(self, o): return _ops().add(o, self)
    def __sub__(self, o): return _ops().sub(self, o)
    def __rsub__(self, o): return _ops().sub(o, self)
    def __mul__(self, o): return _ops().mul(self, o)
    def __rmul__(self, o): return _ops().mul(o, self)
    def __truediv__(self, o): return _ops().div(self, o)
    def __rtruediv__(self, o): return _ops().div(o, self)
    def __neg__(self): return _ops().neg(self)
    def __pos__(self): return self

    def __matmul__(self, other):
        out = other.dtype if other.dtype.name != "DT_INT8" else DataType.DT_INT32
        return _ops().matmul(self, other, out)

    def __gt__(self, o): return _ops().gt(self, o)
    def __ge__(self, o): return _ops().ge(self, o)
    def __lt__(self, o): return _ops().lt(self, o)
    def __le__(self, o): return _ops().le(self, o)

    # == and != keep their Python meaning for the tracer's own bookkeeping (a tensor in a
    # list, a dict key); a kernel compares elements with pypto.eq / pypto.ne
    def _equality(self, other):
        raise context.rec().fail("tensor == and != are not elementwise comparisons here",
                                 supported=["pypto.eq(a, b)", "pypto.ne(a, b)"])

    __eq__ = __ne__ = _equality
    __hash__ = object.__hash__

    def __floordiv__(self, o):
        raise context.rec().fail("tensor // and % are not in the kernel language yet")

    __mod__ = __pow__ = __floordiv__

    # -- slicing ----------------------------------------------------------------------------
    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if keys and len(keys) == len(self._shape) and \
                all(is_int(k) or isinstance(k, SymInt) for k in keys):
            return _element(self, keys)
        offsets, shape, dropped = _region(self, key)
        if offsets is None:
            return self
        out = _ops().view(self, shape, offsets)
        if dropped:
            # x[b, :] (upstream's __getitem__): the view, then a reshape without the
            # int-indexed dims
            out = _ops().reshape(out, [d for i, d in enumerate(shape) if i not in dropped])
        return out

    def __setitem__(self, key, value):
        offsets, shape, dropped = _region(self, key)
        if offsets is None:     # x[:] = v and x[...] = v: upstream's __setitem__ moves v
            self.move(value)
            return
        if dropped:
            # x[b, :] = v: v reshaped with a dim of 1 at each int index, then assembled
            value = _ops().reshape(value, shape)
        _ops().assemble(value, offsets, self)

    def move(self, other):
        """Upstream's Move repoints this tensor at ``other`` (tensor.cpp's move assignment: no
        op of its own; an on-chip value is simply renamed), and a GM tensor's final value is
        linked to its address.  An on-chip value moved into a pypto.tensor temporary is
        renamed (the kernel op ``rename``): later ops of the root function read it on chip,
        and the function writes it into the temporary once, at its end.  Moved into a kernel
        argument, it leaves the function as this tensor: the output's assemble writes it
        out.  So does kernel input data (an input or a view
        of one), which lives elsewhere: a move through UB.  Data the kernel wrote into GM (a
        pypto.tensor temporary, a scatter_update's result) is only renamed: no copy, later
        uses of this tensor read and write it."""
        other = _ops()._tensor(other, "move", "source")
        if self.kind == "local":    # an op's result renamed: no GM behind it
            workspace = context.rec().workspace_of(self)
            if workspace is not None:
                # the value already travels between root functions through a workspace (a
                # state carried from one pypto.loop iteration to the next): the new value
                # goes there too, so that the next iteration reads it
                _ops().assemble(other, [0] * len(self._shape), workspace)
            self.__dict__.update(vars(other))
            return
        if other.kind == "local" and self.kind == "temp":
            _ops().rename(other, self)      # a running state stays on chip in its function
            return
        if other.kind == "local" or other.decl.role == "input":
            _ops().assemble(other, [0] * len(self._shape), self)
            return
        R = context.rec()
        if self.kind == "temp" and other.kind == "temp" and other.decl is not self.decl \
                and not R.written(other.decl) and not _named_by_caller(other):
            # ``t[:] = pypto.tensor(...)``: fresh memory for a kernel temporary, made in this
            # statement (bound to no name of the code moving it) and unwritten
            # (glm_attention's first loop step resets its running output so, and later
            # steps read what that step writes).  Renamed, the reset would live in one branch
            # of a symbolic if and the other branch would read the old name; the temporary's
            # own buffer stands for the fresh memory instead
            return
        if self.kind == "arg" and other.decl is not self.decl:
            other.decl.fresh_per = None     # it is the argument's memory: one buffer
            R.notes.append(f"'{self.slot.root().hint}' takes the data of "
                           f"'{other.slot.root().hint}' at {R.where()} (a move: upstream links "
                           f"it to the argument's address, no copy); the config keeps the "
                           f"data in '{other.slot.root().hint}'")
        self.__dict__.update(vars(other))

    def set_cache_policy(self, policy, value: bool) -> None:
        R = context.rec()
        if self.decl is None or self.kind == "local":
            raise R.fail("set_cache_policy on an on-chip value; it applies to GM tensors")
        if getattr(policy, "name", "") != "NONE_CACHEABLE":
            raise R.fail(f"cache policy {policy!r} is not modeled",
                         supported=["pypto.CachePolicy.NONE_CACHEABLE"])
        self.decl.cache_policy = "bypass" if value else "default"

    # method forms of the ops
    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        fn = _ops().METHODS.get(attr)
        if fn is None:
            raise context.rec().fail(f"Tensor.{attr} is not supported by the tracing stand-in",
                                     supported=["Tensor." + m for m in sorted(_ops().METHODS)]
                                     + ["shape", "dtype", "dim", "valid_shape", "format", "move",
                                        "set_cache_policy", "slicing", "slice assignment"])
        return lambda *a, **k: fn(self, *a, **k)


def _ops():
    from . import ops
    return ops


def _named_by_caller(value) -> bool:
    """Whether the kernel code running now (the first frame outside ptolab) holds ``value``
    in a local name: made by an earlier statement rather than by the current one."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(OWN_CODE):
        frame = frame.f_back
    return frame is not None and any(v is value for v in frame.f_locals.values())


def make(kind: str, shape, dtype: DType, hint: str, decl: TensorDecl | None = None,
         valid=None) -> Tensor:
    R = context.rec()
    t = object.__new__(Tensor)
    t.kind, t._shape, t._dtype, t._valid = kind, list(shape), dtype, valid
    t.decl = decl
    t.slot = decl.slot if kind in ("arg", "temp") else Slot(hint)
    t.conds = tuple(R.conds) if kind not in ("arg", "temp") else ()
    # root-function segments where the value exists; a GM window is declared on first use
    t.present = set() if kind == "view" else {R.segment}
    t.defined_by = None
    t.loops = tuple(R.pypto_loops)      # the pypto.loops it is made in, innermost last
    # element -> value, for an on-chip value whose elements the trace knows (an int
    # pypto.arange, and reshapes and views of it); None otherwise
    t.elements = None
    t.where = R.where()
    return t


def argument(name: str, shape, dtype: DType, fmt: str) -> Tensor:
    R = context.rec()
    decl = R.declare(TensorDecl(Slot(name, fixed=True), R.check_dims(shape, f"'{name}' shape"),
                                schema_dtype(dtype, f"argument '{name}'"), fmt, "input"))
    return make("arg", shape, dtype, name, decl)


def temporary(shape, dtype, name="", format=None) -> Tensor:
    """``pypto.tensor(shape, dtype, name)``: a GM temporary of the kernel."""
    R = context.rec()
    if shape is None or not isinstance(shape, (list, tuple)):
        raise R.fail(f"pypto.tensor needs a shape list, got {shape!r}")
    dims = R.check_dims(shape, "pypto.tensor shape")
    dtype = dtype or DataType.DT_FP32
    # made in a pypto.loop's body, it is allocated anew in every iteration (upstream marks
    # its slot for a new allocation each time round, RUNTIME_SlotMarkNeedAlloc)
    decl = R.declare(TensorDecl(Slot(name or "tmp", named=bool(name)), dims, schema_dtype(dtype),
                                _format_name(format), "temporary", where=R.where(),
                                fresh_per=R.pypto_loops[-1] if R.pypto_loops else None))
    return make("temp", list(shape), dtype, decl.slot.hint, decl)


def _element(t: Tensor, keys, control_flow: bool = True) -> SymInt:
    """``seq_lens[b]``: one element of an int tensor argument (or of a view or in-place
    reshape of one), as a scalar of the kernel language.  Its value comes from the data
    given at import (--arg NAME.values=...), which the config keeps under ``values``.  Read
    by the control flow (a trip count, a view offset: known per loop iteration when the
    kernel compiles, as upstream's control AICPU reads it) the tensor is a control-flow
    input; ``control_flow=False`` is a read by the leaf tasks themselves (scatter_update's
    row indices), which the control AICPU never fetches."""
    R = context.rec()
    if len(keys) != len(t._shape):
        raise R.fail(f"{t.slot.root().hint}[{', '.join(map(repr, keys))}] reads an element of "
                     f"a {len(t._shape)}-D tensor with {len(keys)} indices",
                     supported=["one index per dim: x[b, i]", "slices x[a:b, :]"])
    if t.elements is not None:
        return t.elements(list(keys))       # made on the device, but known: no data read
    t, keys = _argument_element(t, list(keys))
    name = t.slot.root().hint
    if t.kind != "arg":
        raise R.fail(f"an element read of '{name}', which is not a tensor argument (its data "
                     f"is made on the device, not known while tracing)",
                     supported=["element reads of int32/int64 tensor arguments and their views",
                                "element reads of an int pypto.arange and its reshapes and "
                                "views"])
    if t.decl.dtype not in ("int32", "int64"):
        raise R.fail(f"an element read of '{name}' ({t.decl.dtype}): scalars come from "
                     f"int32/int64 tensors", supported=["element reads of int32/int64 tensor "
                                                        "arguments"])
    if name not in R.values:
        raise R.fail(f"the kernel reads elements of '{name}' as scalars; their values are "
                     f"data the config must hold", hint=f"give them as --arg {name}.values="
                                                        f"[...] (a nested JSON list)")
    if control_flow:
        t.decl.control_flow_input = True
    else:
        t.decl.data_values = True
    texts = [k.text if isinstance(k, SymInt) else str(k) for k in keys]
    R.check_dims([k for k in keys], f"index of {name}")
    value = None
    concrete = [k.value if isinstance(k, SymInt) else k for k in keys]
    if all(c is not None for c in concrete):
        data = R.values[name]
        try:
            for c in concrete:
                if c < 0:
                    raise IndexError
                data = data[c]
            value = int(data)
        except (IndexError, TypeError):
            raise R.fail(f"{name}[{', '.join(texts)}] is outside its values") from None
    return SymInt(f"{name}[{', '.join(texts)}]", value)


def row_major(keys, shape) -> object:
    """The position of element ``keys`` in a tensor of ``shape`` read in row-major order."""
    flat = 0
    for k, d in zip(keys, shape):
        flat = flat * d + k
    return flat


def unravel(flat, shape) -> list:
    """The element at row-major position ``flat`` of a tensor of ``shape``."""
    keys = []
    for d in reversed(shape[1:]):
        keys.insert(0, flat % d)
        flat = flat // d
    keys.insert(0, flat)
    return keys


def _argument_element(t: Tensor, keys: list):
    """The tensor a chain of GM views and in-place reshapes starts from, and the keys of
    ``t``'s element ``keys`` in it (a view adds its offsets; a reshape keeps the row-major
    position)."""
    while t.kind == "view" and t.defined_by is not None:
        rec = t.defined_by
        parent = rec.inputs[0]
        if rec.fields["op"] == "view":
            keys = [k + _dim(o) for k, o in zip(keys, rec.fields["offsets"])]
        else:
            keys = unravel(row_major(keys, t._shape), parent._shape)
        t = parent
    return t, keys


def _dim(d):
    """A recorded dim (int or expression text) as a value of the tracer's arithmetic."""
    return d if isinstance(d, int) else SymInt(d)


def _region(t: Tensor, key):
    """(offsets, shape, dims indexed by an int) of a basic slice, or (None, None, ()) for
    ``[:]`` / ``[...]``; an int index is a slice of extent 1."""
    R = context.rec()
    if key is Ellipsis or (isinstance(key, slice) and key == slice(None)):
        return None, None, ()
    key = key if isinstance(key, tuple) else (key,)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(t._shape) - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (len(t._shape) - len(key))
    if len(key) != len(t._shape):
        raise R.fail(f"index {key!r} has more entries than the {len(t._shape)} dims of the tensor")
    dropped = tuple(i for i, k in enumerate(key) if not isinstance(k, slice))
    if not all(is_int(key[i]) or isinstance(key[i], SymInt) for i in dropped):
        raise R.fail(f"index {key!r}: an entry is neither a slice nor an int",
                     supported=["slices x[a:b, :]", "int indices x[b, :]", "pypto.view"])
    if len(dropped) == len(key):
        raise R.fail(f"tensor element writes (x[{', '.join(map(repr, key))}] = ...) are not "
                     f"supported", supported=["slice assignment x[a:b, :] = v",
                                              "x[b, :] = v", "pypto.assemble"])
    key = tuple(slice(k, k + 1) if i in dropped else k for i, k in enumerate(key))
    if any(is_int(k.start) and k.start < 0 for i, k in enumerate(key) if i in dropped):
        raise R.fail("negative indices are not supported")
    offsets, shape = [], []
    for k, dim in zip(key, t._shape):
        if k.step not in (None, 1):
            raise R.fail("a slice with a step is not supported", supported=["step 1"])
        start = 0 if k.start is None else k.start
        stop = dim if k.stop is None else k.stop
        if (is_int(start) and start < 0) or (is_int(stop) and stop < 0):
            raise R.fail("negative slice bounds are not supported")
        offsets.append(start)
        shape.append(_constant(stop - start))
    return offsets, shape, dropped


class _Opaque(ast.NodeTransformer):
    """Each element read (``seq[b]``) as a name of its own, so an extent can be evaluated
    for made-up values of everything it reads."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def visit_Subscript(self, node):
        text = ast.unparse(node)
        return ast.copy_location(ast.Name(self.names.setdefault(text, f"_e{len(self.names)}"),
                                          ast.Load()), node)


def _constant(extent):
    """x[b:b + 1] has extent 1 whatever b is (or seq[b]): fold an extent that does not
    vary."""
    if not isinstance(extent, SymInt):
        return extent
    try:
        tree = _Opaque().visit(parse(extent.text))
    except (ExprError, SyntaxError):
        return extent
    text = ast.unparse(tree)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    try:
        values = {evaluate(text, {n: k * 7 + 3 for n in names}) for k in range(3)}
    except ExprError:
        return extent
    return values.pop() if len(values) == 1 else extent
