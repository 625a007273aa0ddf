"""The stand-in's control flow and configuration: loops, conditions, tile shapes, options.

``pypto.loop`` runs its body once with a symbolic index (upstream records a loop body once
too) and becomes a loop statement; ``start``/``step`` become an index expression over a
0-based loop; ``loop_unroll`` is, as upstream builds it, one loop per unroll factor whose body
sees that factor as a plain int.
"""
from __future__ import annotations

from simcore.spec.options import validate_scope

from . import context
from .symbols import SymBool, SymInt, ceil_div, is_int

PASS_OPTIONS_IN_BODY = ("sg_set_scope",)
# merge settings a kernel body may set; the kernel config holds them kernel-wide
# the graph partitioner's bounds (loaded kernel-wide, no mechanism: simcore/spec/options.py)
# and the automatic vecNBuffer count's core bound (simcore/compiler/mergeorder.py)
PASS_OPTIONS_SCALAR = ("pg_upper_bound", "pg_lower_bound", "pg_skip_partition",
                       "mg_vec_parallel_lb")
PASS_OPTIONS_KERNEL_WIDE = ("vec_nbuffer_setting", "cube_l1_reuse_setting",
                            "cube_nbuffer_setting") + PASS_OPTIONS_SCALAR


class LoopRange:
    """What ``pypto.loop(...)`` returns; iterating it records the loop."""

    def __init__(self, start, stop, step, name, idx_name, unroll_list, parallel, factor=None):
        self.start, self.stop, self.step = start, stop, step
        self.name, self.idx_hint, self.unroll_list = name, idx_name, unroll_list
        self.parallel, self.factor = parallel, factor

    def __iter__(self):
        R = context.rec()
        where = R.where()
        if not (is_int(self.step) and self.step > 0):
            raise R.fail(f"loop step {self.step!r} must be a positive int", supported=["step >= 1"])
        span = self.stop - self.start
        trip = ceil_div(span, self.step) if self.step != 1 else span
        if is_int(trip) and trip < 0:
            trip = 0
        R.loop_count += 1
        idx = R.reserve(self.idx_hint or f"i{R.loop_count}")
        name = R.reserve(self.name or f"loop_{R.loop_count}")
        head = {"name": name, "idx": idx,
                "trip": R.check_dims([trip], f"loop '{name}' trip count")[0]}
        if self.unroll_list:
            head["unroll_list"] = [int(u) for u in self.unroll_list]
        if self.parallel:
            head["parallel"] = True
        rec, entry = R.loop_begin(head, where)
        i = SymInt(idx)
        # a symbolic start (a loop_unroll chunk after the first) is never the plain 0
        plain = is_int(self.start) and self.start == 0 and self.step == 1
        value = i if plain else self.start + self.step * i
        if not isinstance(value, SymInt):
            value = SymInt(str(value))
        value = SymInt(value.text, None, loop=(idx, head["trip"]))
        yield (value, self.factor) if self.factor is not None else value
        R.loop_end(rec, entry)


def _range(args):
    if len(args) == 1:
        return 0, args[0], 1
    if len(args) == 2:
        return args[0], args[1], 1
    if len(args) == 3:
        return args
    raise context.rec().fail(f"pypto.loop takes 1 to 3 positional arguments, got {len(args)}")


_LOOP_KWARGS = ("name", "idx_name", "unroll_list", "parallel", "submit_before_loop")


def _check_kwargs(kwargs, allowed=_LOOP_KWARGS):
    R = context.rec()
    for key in kwargs:
        if key not in allowed:
            # upstream's loop reads its keywords with kwargs.get and ignores any other
            # (python/pypto/_controller.py loop): so does the import, with a note
            R.notes.append(f"pypto.loop keyword {key}={kwargs[key]!r} at {_short(R.where())} "
                           f"is ignored, as upstream's loop ignores it (it reads "
                           f"{', '.join(allowed)})")
    if kwargs.get("submit_before_loop"):
        raise context.rec().fail("pypto.loop(submit_before_loop=True) is not supported yet")


def loop(*args, **kwargs):
    _check_kwargs(kwargs)
    start, stop, step = _range(args)
    return LoopRange(start, stop, step, kwargs.get("name"), kwargs.get("idx_name"),
                     kwargs.get("unroll_list"), kwargs.get("parallel", False))


def loop_unroll(*args, **kwargs):
    """One loop per factor (largest first, 1 always added); yields (index, factor)."""
    _check_kwargs(kwargs)
    start, stop, step = _range(args)
    factors = sorted(set(kwargs.get("unroll_list") or [1]), reverse=True)
    if 1 not in factors:
        factors.append(1)
    base = kwargs.get("name") or ""
    begin = start
    for p in factors:
        left = (stop - start) % (step * p)
        yield from LoopRange(begin, stop - left, step * p, f"{base}_LoopUnroll{p}",
                             kwargs.get("idx_name"), None, kwargs.get("parallel", False),
                             factor=p)
        begin = stop - left


def _loop_index(scalar, what):
    if not isinstance(scalar, SymInt) or scalar.loop is None:
        raise context.rec().fail(f"pypto.{what} takes a pypto.loop index, got {scalar!r}")
    return scalar.loop


def is_loop_begin(scalar) -> SymBool:
    idx, _ = _loop_index(scalar, "is_loop_begin")
    return SymBool(f"{idx} == 0")


def is_loop_end(scalar) -> SymBool:
    idx, trip = _loop_index(scalar, "is_loop_end")
    if isinstance(trip, int):
        return SymBool(f"{idx} == {trip - 1}")
    return SymBool(f"{idx} == {trip if trip.isidentifier() else f'({trip})'} - 1")


def cond(scalar, file=None, lineno=None):
    if isinstance(scalar, SymInt) and not isinstance(scalar, SymBool):
        return SymBool(f"{scalar.text} != 0", scalar.value)
    return scalar


# -- tile shapes, scope, label ------------------------------------------------------------------
def set_vec_tile_shapes(*shapes):
    R = context.rec()
    if len(shapes) == 1 and isinstance(shapes[0], (list, tuple)):
        shapes = tuple(shapes[0])
    R.set_state("set_vec_tile_shapes", tuple(R.check_dims(shapes, "vec tile shape")))


def get_vec_tile_shapes():
    R = context.rec()
    tile = R.state["set_vec_tile_shapes"]
    if tile is None:
        raise R.fail("get_vec_tile_shapes before any set_vec_tile_shapes")
    return [d if isinstance(d, int) else SymInt(d) for d in tile]


def set_cube_tile_shapes(m, k, n, enable_split_k=False, *, enable_multi_data_load=True):
    """Upstream's form at 883e7dfb: (m, k, n, enable_split_k), large-packet loads always on
    (commit 457767dab made them the default and dropped the switch).  A file of the
    guides' time may still pass ``enable_multi_data_load=False`` by name, the small
    packets the switch gave there by default."""
    R = context.rec()
    tile = {"m": R.check_dims(m, "cube tile m"), "k": R.check_dims(k, "cube tile k"),
            "n": R.check_dims(n, "cube tile n"),
            "enable_multi_data_load": bool(enable_multi_data_load)}
    if enable_split_k:
        tile["enable_split_k"] = True
    R.set_state("set_cube_tile_shapes", _Frozen(tile))


class _Frozen(dict):
    """A cube tile as recorded state: compared by value."""
    def __hash__(self):
        return hash(repr(sorted(self.items())))


def get_cube_tile_shapes():
    R = context.rec()
    tile = R.state["set_cube_tile_shapes"]
    if tile is None:
        raise R.fail("get_cube_tile_shapes before any set_cube_tile_shapes")
    return (list(tile["m"]), list(tile["k"]), list(tile["n"]), tile.get("enable_split_k", False))


def set_pass_options(**options):
    R = context.rec()
    for key, value in options.items():
        if key in PASS_OPTIONS_KERNEL_WIDE:
            _kernel_wide_pass_option(R, key, value)
            continue
        if key not in PASS_OPTIONS_IN_BODY:
            raise R.fail(f"set_pass_options({key}=...) inside a kernel body is not supported yet; "
                         f"give kernel-wide pass options to @pypto.jit(pass_options=...)",
                         supported=[f"set_pass_options({k}=...)" for k in
                                    (*PASS_OPTIONS_IN_BODY, *PASS_OPTIONS_KERNEL_WIDE)])
        try:
            scope = validate_scope(value, "sg_set_scope")
        except ValueError as exc:
            raise R.fail(str(exc)) from None
        R.set_state("sg_set_scope", -1 if scope == [-1, False, False] else
                    (scope[0] if scope[1:] == [False, False] else scope))


def set_matrix_size(size):
    """Upstream hands matmul the m, k, n an NZ input had before a reshape
    (docs/zh/api/config/pypto-set_matrix_size.md).  The kernel language's matmul reads m, k,
    n from its inputs' shapes, so the call changes nothing here; the config's header says
    so rather than dropping it silently."""
    R = context.rec()
    if not (isinstance(size, (list, tuple)) and len(size) == 3):
        raise R.fail(f"pypto.set_matrix_size takes [m, k, n], got {size!r}")
    dims = R.check_dims(list(size), "set_matrix_size")
    note = (f"set_matrix_size({dims}) at {_short(R.where())}: the modeled matmul takes m, k, "
            f"n from its input shapes")
    if note not in R.notes:
        R.notes.append(note)


def _short(where: str) -> str:
    return where.replace("\\", "/").rsplit("/", 1)[-1]


def _kernel_wide_pass_option(R, key: str, value) -> None:
    """A merge setting from the body.  Upstream scopes it to the enclosing jit or loop
    (docs/zh/api/config/pypto-set_pass_options.md); the kernel config holds one value per
    kernel, so the body may set each key once (or to the same value again), and it then
    overrides the jit's value."""
    where = _short(R.where())
    def count(v):
        return is_int(v) or (isinstance(v, (list, tuple)) and len(v) == 2 and is_int(v[0]))
    if key in PASS_OPTIONS_SCALAR:
        if not (is_int(value) or isinstance(value, bool)):
            raise R.fail(f"set_pass_options({key}={value!r}) takes a "
                         f"{'bool' if key == 'pg_skip_partition' else 'non-negative int'}")
        plain = value if isinstance(value, bool) else int(value)
    elif not isinstance(value, dict) or not all(
            isinstance(k, (int, str)) and not isinstance(k, bool) and count(v)
            for k, v in value.items()):
        raise R.fail(f"set_pass_options({key}={value!r}) takes a dict of hashOrder keys "
                     f"(int, 'func<magic>_<order>', 'DEFAULT' or a label) to merge counts")
    else:
        plain = {str(k): (int(v) if is_int(v) else list(v)) for k, v in value.items()}
    seen = getattr(R, "body_pass_options", None)
    if seen is None:
        seen = R.body_pass_options = {}
    if key in seen and seen[key][0] != plain:
        raise R.fail(f"set_pass_options({key}=...) is set to {seen[key][0]} at {seen[key][1]} "
                     f"and to {plain} here: per-loop merge settings are not modeled, the kernel "
                     f"config holds one kernel-wide value",
                     supported=["one value per key for the whole kernel"])
    if key not in seen:
        seen[key] = (plain, where)
        R.notes.append(f"set_pass_options({key}={plain}) at {where} applies to the whole "
                       f"kernel (pass_options.{key})" +
                       ("; ptolab has no mechanism for it" if key in PASS_OPTIONS_SCALAR else ""))


def _body_options(group: str):
    """``pypto.set_<group>(**options)`` in a kernel body: held kernel-wide, as the body's
    merge settings are (one value per key), overriding the jit's."""
    def setter(**options):
        R = context.rec()
        where = _short(R.where())
        seen = R.__dict__.setdefault("body_options", {}).setdefault(group, {})
        for key, value in options.items():
            if key in seen and seen[key][0] != value:
                raise R.fail(f"set_{group}({key}=...) is set to {seen[key][0]!r} at "
                             f"{seen[key][1]} and to {value!r} here: the kernel config holds "
                             f"one kernel-wide value", supported=["one value per key"])
            if key not in seen:
                seen[key] = (value, where)
                if not (group == "runtime_options" and key in RETIRED_RUNTIME_OPTIONS):
                    # (a retired one gets its own note when the options are written)
                    R.notes.append(f"set_{group}({key}={value!r}) at {where} applies to the "
                                   f"whole kernel ({group}.{key})")
    setter.__name__ = f"set_{group}"
    return setter


set_runtime_options = _body_options("runtime_options")
set_debug_options = _body_options("debug_options")
set_codegen_options = _body_options("codegen_options")
set_host_options = _body_options("host_options")
set_verify_options = _body_options("verify_options")


def set_semantic_label(label):
    R = context.rec()
    R.label = None if label in (None, "") else str(label)


def set_operation_options(**options):
    """``combine_axis`` lets codegen apply a tail-axis broadcast operand ([M, 1] with [M, N])
    in place instead of expanding it first
    (docs/zh/api/operation/pypto-experimental-set_operation_options.md); recorded as the
    kernel statement of the same name, which the ops after it follow (simcore/compiler/
    ops.py prices the expand a binary op needs without it)."""
    R = context.rec()
    for key, value in options.items():
        if key != "combine_axis":
            raise R.fail(f"pypto.experimental.set_operation_options({key}=...) is not an "
                         f"operation option ptolab knows", supported=["combine_axis"])
        if not isinstance(value, bool):
            raise R.fail(f"combine_axis={value!r} must be True or False")
        R.set_state("set_operation_options", _Frozen({"combine_axis": value}))


def ceildiv(a, b):
    return ceil_div(a, b)


def SymbolicScalar(value):     # noqa: N802 (upstream's class name)
    """pypto.SymbolicScalar(v): as symbolic_scalar, but an int becomes a symbolic constant
    (its methods, .max() and .min(), work on it as on any symbolic int)."""
    value = symbolic_scalar(value, "SymbolicScalar")
    return SymInt(str(value), value) if is_int(value) else value


def symbolic_scalar(value, _api: str = "symbolic_scalar"):
    """pypto.symbolic_scalar(v): a symbolic int, or an int made one (a constant); a bool is
    the int it is in Python (upstream's constructor takes any int)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (SymInt, int)):
        return value
    named = " (a scalar named by a string, a runtime variable, is not modeled)" \
        if isinstance(value, str) else ""
    raise context.rec().fail(f"pypto.{_api}({value!r}) takes an int or a symbolic int{named}",
                             supported=[f"pypto.{_api}(int)"])


def sym_min(a, b):
    return a.min(b) if isinstance(a, SymInt) else (b.min(a) if isinstance(b, SymInt)
                                                    else min(a, b))


def sym_max(a, b):
    return a.max(b) if isinstance(a, SymInt) else (b.max(a) if isinstance(b, SymInt)
                                                    else max(a, b))


# -- jit and options ------------------------------------------------------------------------------
OPTION_GROUPS = ("runtime_options", "pass_options", "debug_options", "codegen_options")
# set_runtime_options keywords of 08cec41e4 that upstream's HEAD no longer has (its stitch
# is stitch_function_max_num alone): ptolab follows HEAD and models none of their pools or
# caps (docs/sources.md §4), so an older kernel that sets them still imports, with a note
RETIRED_RUNTIME_OPTIONS = ("stitch_function_inner_memory", "stitch_function_outcast_memory",
                           "stitch_function_num_initial", "stitch_function_num_step",
                           "stitch_function_size", "stitch_cfgcache_size",
                           "triple_stream_sched")


class JitKernel:
    """A ``@pypto.jit`` / ``@pypto.frontend.jit`` function: options plus the Python body."""

    def __init__(self, fn, options: dict):
        self.fn, self.options = fn, dict(options)
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a kernel traced by `ptolab import`; the "
                           f"stand-in pypto does not run kernels")


def jit(fn=None, **options):
    if fn is not None and callable(fn) and not options:
        return JitKernel(fn, {})
    return lambda f: JitKernel(f, options)


class Options:
    """``pypto.options(...)``: on a kernel it adds jit options; on a test function (which
    ``ptolab import`` never calls) it leaves the function as it is."""

    def __init__(self, **options):
        self.options = options

    def __call__(self, fn):
        if isinstance(fn, JitKernel):
            for group, values in self.options.items():
                fn.options.setdefault(group, {}).update(values or {})
        return fn

    def __enter__(self):
        raise context.rec().fail("`with pypto.options(...)` inside a kernel is not supported "
                                 "yet", supported=["@pypto.jit(...) options"])

    def __exit__(self, *exc):
        return False


def options(**kwargs):
    return Options(**kwargs)
