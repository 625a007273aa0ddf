"""Load a kernel file with the stand-ins in place, build placeholder arguments, trace.

The stand-in ``pypto`` (and a stand-in ``torch`` when torch is not installed) sit in
``sys.modules`` only while the file is imported and its kernel is called; afterwards the
previous entries are back.  If a real PyPTO is importable, ``ptolab import`` refuses
rather than shadow it: run it where PyPTO is not installed (a plain ptolab environment).
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import gc
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import re
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from simcore.spec.errors import ConfigError

from . import context, standin, symbols, tensor, torch_stub
from .control import OPTION_GROUPS, RETIRED_RUNTIME_OPTIONS, JitKernel
from .errors import Unsupported
from .recorder import Recorder
from .rewrite import traceable
from .symbols import HelperIf


@dataclass
class Traced:
    recorder: Recorder
    function: str
    source: Path
    sha256: str
    options: dict
    description: str = ""
    settings: list = field(default_factory=list)


def _real_pypto() -> str | None:
    if "pypto" in sys.modules and not getattr(sys.modules["pypto"], "_ptolab_standin", False):
        return getattr(sys.modules["pypto"], "__file__", "pypto")
    try:
        spec = importlib.util.find_spec("pypto")
    except (ImportError, ValueError):
        return None
    return spec.origin or "pypto" if spec is not None else None


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import pypto.<anything>`` while the stand-in is in place."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("pypto.") and fullname not in sys.modules:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return standin.submodule(spec.name)

    def exec_module(self, module):
        pass


_SUBMODULES = _SubmoduleFinder()


@contextmanager
def standins(folder: Path, arch: str | None = None):
    real = _real_pypto()
    if real is not None:
        raise ConfigError(f"a real PyPTO is importable here ({real}); `ptolab import` traces "
                          f"with its own stand-in pypto and will not shadow a real "
                          f"installation. Run it in an environment without PyPTO.")
    modules = standin.build(arch)
    modules["pypto"]._ptolab_standin = True
    need_torch = "torch" not in sys.modules and importlib.util.find_spec("torch") is None
    saved = {k: sys.modules.get(k) for k in modules}
    sys.modules.update(modules)
    sys.meta_path.insert(0, _SUBMODULES)
    if need_torch:
        sys.meta_path.insert(0, torch_stub.FINDER)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        sys.meta_path.remove(_SUBMODULES)
        for name in [m for m in sys.modules if m.startswith("pypto.") and m not in saved]:
            del sys.modules[name]
        if need_torch:
            sys.meta_path.remove(torch_stub.FINDER)
            for name in [m for m in sys.modules if m.split(".")[0] in ("torch", "torch_npu")]:
                if isinstance(sys.modules[name], torch_stub._StubModule):
                    del sys.modules[name]
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
        context.stop()


def _load_module(path: Path, digest: str):
    name = f"_ptolab_kernel_{digest[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ConfigError:
        raise
    except SyntaxError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: the kernel file does not parse: {exc.msg}.")
    except Exception as exc:
        raise ConfigError(f"{path}: importing the kernel file failed: "
                          f"{type(exc).__name__}: {exc}.") from None
    return module


def _find(module, path: Path, function: str | None, args: dict) -> tuple[JitKernel, list]:
    """The kernel named ``function`` and notes on how it was found.  A kernel defined inside
    a function (a factory that returns it, or a wrapper that builds and calls it) is built
    by running that function up to its ``def`` (see _build_nested)."""
    kernels = {n: v for n, v in vars(module).items() if isinstance(v, JitKernel)}
    if function is None:
        if len(kernels) != 1:
            nested = [f"{o}.{i}" for o, i in _nested_defs(path)]
            listed = ", ".join([*kernels, *nested])
            raise ConfigError(f"{path}: {'no' if not listed else len(kernels) + len(nested)} "
                              f"@pypto.jit kernels in the file{': ' + listed if listed else ''}; "
                              f"name one as {path}:FUNCTION.")
        return next(iter(kernels.values())), []
    value = getattr(module, function, None) if "." not in function else None
    if isinstance(value, JitKernel):
        return value, []
    if value is not None and callable(value) and not _nested_defs(path, function):
        return JitKernel(value, {}), []
    return _build_nested(module, path, function, args, kernels)


def _is_jit(node: ast.FunctionDef) -> bool:
    return any(re.search(r"\bjit\b", ast.unparse(d)) for d in node.decorator_list)


def _nested_defs(path: Path, outer: str | None = None) -> list[tuple[str, str]]:
    """(enclosing function, kernel) for each jit kernel defined inside a module-level
    function of the file."""
    out = []
    for top in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(top, ast.FunctionDef) or (outer and top.name != outer):
            continue
        for node in ast.walk(top):
            if node is not top and isinstance(node, ast.FunctionDef) and _is_jit(node):
                out.append((top.name, node.name))
    return out


class ShapeArgument:
    """What a kernel-building function receives for a tensor argument given as a shape:
    it answers ``.shape``, ``.dtype``, ``.dim()``, ``.size()`` like the caller's tensor."""

    def __init__(self, shape: list, dtype=None):
        self.shape, self.dtype, self.device = tuple(shape), dtype, "cpu"
        self.ndim = len(shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, axis=None):
        return self.shape if axis is None else self.shape[axis]

    def __repr__(self):
        return f"<shape {list(self.shape)}>"


def _build_nested(module, path: Path, function: str, args: dict, kernels: dict):
    outer_name, _, inner = function.rpartition(".")
    if not inner.isidentifier():
        raise ConfigError(f"{path}: '{function}' is not a function name.")
    hits = [(o, i) for o, i in _nested_defs(path, outer_name or None)
            if i == inner or (not outer_name and o == inner)]
    if len(hits) != 1:
        nested = [f"{o}.{i}" for o, i in _nested_defs(path)]
        if len(hits) > 1:
            raise ConfigError(f"{path}: '{function}' names {len(hits)} kernels "
                              f"({', '.join(f'{o}.{i}' for o, i in hits)}); name one as "
                              f"{path}:OUTER.KERNEL.")
        raise ConfigError(f"{path}: no kernel '{function}' (jit kernels in the file: "
                          f"{', '.join([*kernels, *nested]) or 'none'}).")
    outer_name, inner = hits[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    top = next(t for t in tree.body if isinstance(t, ast.FunctionDef) and t.name == outer_name)
    kernel_node = next(n for n in ast.walk(top) if isinstance(n, ast.FunctionDef)
                       and n is not top and n.name == inner)
    # Run the enclosing function only up to the statement that defines the kernel: what
    # comes before computes the shapes and values the kernel closes over, what comes
    # after is the caller's side (torch tensors, the call, checks) and is not run.
    cut = next(i for i, stmt in enumerate(top.body)
               if any(n is kernel_node for n in ast.walk(stmt)))
    builder = ast.FunctionDef(
        name=f"_ptolab_build_{inner}", args=top.args, decorator_list=[], returns=None,
        body=[*top.body[:cut + 1], ast.Return(ast.Name(inner, ast.Load()))])
    ast.copy_location(builder, top)
    # dont_inherit: this module's `from __future__ import annotations` must not turn the
    # kernel's annotations into strings (they read the enclosing function's locals)
    code = compile(ast.fix_missing_locations(ast.Module([builder], [])), str(path.resolve()),
                   "exec", dont_inherit=True)
    space: dict = {}
    exec(code, vars(module), space)
    build = space[builder.name]
    kernel_params = {a.arg for a in (*kernel_node.args.posonlyargs, *kernel_node.args.args,
                                     *kernel_node.args.kwonlyargs)}
    given, used = {}, []
    signature = inspect.signature(build)
    for p in signature.parameters.values():
        if p.name not in args:
            if p.default is inspect.Parameter.empty and p.kind not in (
                    p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ConfigError(
                    f"{path}: kernel '{inner}' is defined inside {outer_name}"
                    f"({', '.join(signature.parameters)}), which ptolab runs up to the "
                    f"kernel's def (line {kernel_node.lineno}) to build it: give its argument "
                    f"'{p.name}' as --arg {p.name}=VALUE (a tensor as its shape, e.g. "
                    f"fp32[2, 3]).")
            continue
        value = args[p.name] if p.name in kernel_params else args.pop(p.name)
        given[p.name] = _outer_value(value, p.name in kernel_params)
        used.append(f"{p.name}={json.dumps(value) if not isinstance(value, str) else value}")
    try:
        kernel = build(**given)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{_kernel_line(exc, path.resolve(), str(path))}: building kernel "
                          f"'{inner}' inside {outer_name}() failed: {type(exc).__name__}: "
                          f"{exc}.") from None
    if not isinstance(kernel, JitKernel):
        kernel = JitKernel(kernel, {})
    note = (f"kernel {inner} is defined inside {outer_name}(); built by running "
            f"{outer_name}({', '.join(used)}) up to its def (line {kernel_node.lineno})")
    return kernel, [note]


def _outer_value(value, is_tensor: bool):
    """A kernel's tensor argument that the enclosing function also takes is the caller's
    tensor there: it gets a ShapeArgument; other values are plain."""
    if isinstance(value, dict) and "shape" in value and set(value) <= {"shape", "dtype"}:
        return ShapeArgument(value["shape"], tensor.BY_SCHEMA.get(value.get("dtype")))
    if is_tensor and isinstance(value, list) and all(isinstance(v, int) for v in value):
        return ShapeArgument(value)
    return _plain(value)


def parse_values(pairs: list[str], what: str) -> dict:
    """NAME=VALUE pairs; VALUE is JSON, ``dtype[dims]`` or a bare word."""
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{what} '{pair}' must be NAME=VALUE.")
        text = text.strip()
        match = re.fullmatch(r"([a-z0-9]+)\s*(\[.*\])", text)
        if match:
            out[name.strip()] = {"dtype": match.group(1), "shape": json.loads(match.group(2))}
            continue
        try:
            out[name.strip()] = json.loads(text)
        except json.JSONDecodeError:
            out[name.strip()] = text
    return out


def _placeholder(R: Recorder, name: str, ann, given, dims: dict):
    shape, dtype = ann.shape, ann.dtype
    if isinstance(given, dict):
        if given.get("values") is not None:
            R.values[name] = _values(name, given["values"])
            if given.get("shape") is None:
                given = {**given, "shape": _values_shape(given["values"])}
        if given.get("dtype"):
            dtype = tensor.BY_SCHEMA.get(given["dtype"])
            if dtype is None:
                raise ConfigError(f"--arg {name}: dtype '{given['dtype']}' is not one of "
                                  f"{', '.join(tensor.BY_SCHEMA)}.")
        given = given.get("shape")
    if given is not None and not (isinstance(given, list) and all(
            isinstance(d, int) for d in given)):
        raise ConfigError(f"--arg {name}={given!r}: a tensor argument takes a shape such as "
                          f"[64, 64] or fp16[64, 64].")
    # no shape, [] or [...] all mean: the caller's tensor decides
    spec = list(shape) if isinstance(shape, (list, tuple)) and shape else [Ellipsis]
    if Ellipsis in spec:
        if given is None:
            raise ConfigError(f"tensor argument '{name}' is annotated {ann!r}: its shape comes "
                              f"from the caller; give it as --arg {name}=[d0, d1, ...].")
        i = spec.index(Ellipsis)
        tail = len(spec) - i - 1
        spec = spec[:i] + [standin.STATIC] * (len(given) - i - tail) + spec[i + 1:]
    # an annotation of STATIC/DYNAMIC markers is a lower bound on the rank, as upstream
    # checks it (frontend/parser/entry.py and parser.py at 883e7dfb: a tensor with fewer
    # dims is refused); the caller's extra trailing dims are static.  One of ints alone
    # fixes the rank.
    marked = any(d is standin.STATIC or d is standin.DYNAMIC for d in spec)
    if given is not None and len(given) > len(spec) and marked:
        spec = spec + [standin.STATIC] * (len(given) - len(spec))
    if given is not None and len(given) != len(spec):
        raise ConfigError(f"--arg {name}={given}: the annotation {ann!r} has {len(spec)} dims"
                          + (" (at least)." if marked else "."))
    out = []
    for axis, d in enumerate(spec):
        value = given[axis] if given is not None else None
        if d is standin.DYNAMIC:
            pname = f"{name}_{axis}"
            value = dims.pop(pname, value)
            if value is None:
                raise ConfigError(f"tensor argument '{name}' has a dynamic dim {axis}: give "
                                  f"--dim {pname}=N (or its whole shape as --arg {name}=[...]).")
            out.append(R.add_param(pname, int(value)))
        elif d is standin.STATIC:
            if value is None:
                raise ConfigError(f"tensor argument '{name}' dim {axis} is STATIC: give its "
                                  f"shape as --arg {name}=[...].")
            out.append(int(value))
        else:
            if value is not None and int(value) != d:
                raise ConfigError(f"--arg {name}={given}: dim {axis} is {value}, where the "
                                  f"annotation {ann!r} fixes it at {d}.")
            out.append(d)
    return tensor.argument(name, out, dtype or tensor.DataType.DT_FP32,
                           tensor._format_name(ann.format))


def _values(name: str, values):
    """Element data: a nested list of ints, full (every row as long as the others)."""
    def check(v):
        if isinstance(v, list):
            return [check(x) for x in v]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"--arg {name}.values: {v!r} is not an int; the values of a "
                              f"tensor read as scalars are ints.")
        return v
    if not isinstance(values, list):
        raise ConfigError(f"--arg {name}.values={values!r}: give a JSON list such as [128, 256].")
    out = check(values)
    _values_shape(out, name)
    return out


def _values_shape(values, name: str = "") -> list[int]:
    shape, level = [], values
    while isinstance(level, list):
        shape.append(len(level))
        level = level[0] if level else None
    def full(v, depth):
        if depth == len(shape):
            return not isinstance(v, list)
        return isinstance(v, list) and len(v) == shape[depth] and all(full(x, depth + 1)
                                                                      for x in v)
    if not full(values, 0):
        raise ConfigError(f"--arg {name}.values is ragged; give a full nested list.")
    return shape


def _arguments(R: Recorder, fn, given: dict, dims: dict) -> list:
    args = []
    for key in [k for k in given if k.endswith(".values")]:
        name = key[:-len(".values")]
        entry = given.get(name)
        entry = dict(entry) if isinstance(entry, dict) else (
            {} if entry is None else {"shape": entry})
        entry["values"] = given.pop(key)
        given[name] = entry
    signature = inspect.signature(fn)
    for p in signature.parameters.values():
        ann = p.annotation
        if isinstance(ann, str):
            context.stop()      # a string annotation is a signature, not kernel code
            try:
                ann = eval(ann, fn.__globals__)
            except Exception:
                ann = inspect.Parameter.empty
            context.start(R)
        if isinstance(ann, tensor.TensorAnnotation):
            args.append(_placeholder(R, p.name, ann, given.pop(p.name, None), dims))
        elif p.name in given:
            args.append(_config_object(p.name, ann, given.pop(p.name)))
        elif p.default is not inspect.Parameter.empty:
            args.append(p.default)
        else:
            raise ConfigError(f"kernel argument '{p.name}' is not a pypto.Tensor and has no "
                              f"default: give it as --arg {p.name}=VALUE (JSON)"
                              f"{_fields_wanted(ann)}.")
    if given:
        raise ConfigError(f"--arg {', '.join(given)}: not an argument of {fn.__name__} "
                          f"(arguments: {', '.join(signature.parameters)}).")
    if dims:
        raise ConfigError(f"--dim {', '.join(dims)}: not a dynamic dim of {fn.__name__}.")
    return args


def _is_config_class(ann) -> bool:
    return isinstance(ann, type) and dataclasses.is_dataclass(ann)


def _fields_wanted(ann) -> str:
    """For a dataclass-annotated argument: the fields a JSON object must give."""
    if not _is_config_class(ann):
        return ""
    need = [f.name for f in dataclasses.fields(ann) if f.init
            and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    return (f", an object of {ann.__name__}'s fields" +
            (f" (without defaults: {', '.join(need)})" if need else ""))


def _config_object(name: str, ann, value):
    """A JSON object for an argument annotated with a dataclass builds that dataclass, so
    the fields it leaves out take the class's defaults; other values read as ``_plain``."""
    if not (_is_config_class(ann) and isinstance(value, dict)):
        return _plain(value)
    known = {f.name for f in dataclasses.fields(ann) if f.init}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"--arg {name}: {', '.join(unknown)} not a field of "
                          f"{ann.__name__} (fields: {', '.join(sorted(known))}).")
    try:
        return ann(**{k: _plain(v) for k, v in value.items()})
    except TypeError as exc:
        raise ConfigError(f"--arg {name}: {ann.__name__}({', '.join(value)}) fails: {exc}; "
                          f"give it as --arg {name}=VALUE (JSON){_fields_wanted(ann)}.") from None


def _plain(value):
    """A JSON object argument reads like the config object a kernel expects (cfg.eps), and
    "pypto.DT_BF16" is that dtype; an object whose keys are no Python names ({"-1": 16},
    a merge setting by hashOrder key) stays a dict, its integer keys ints."""
    if isinstance(value, dict):
        if all(k.isidentifier() for k in value):
            return types.SimpleNamespace(**{k: _plain(v) for k, v in value.items()})
        return {int(k) if re.fullmatch(r"-?\d+", k) else k: _plain(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"(pypto\.)?DT_[A-Z0-9_]+", value):
        return getattr(tensor.DataType, value.rpartition(".")[2], value)
    return value


def _kernel_line(exc: Exception, source: Path, shown: str) -> str:
    """file:line of the innermost kernel-file frame of an exception."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(source):
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"{shown}:{line}" if line else shown


HOST_ONLY_GROUPS = ("host_options", "verify_options")
# jit keywords that pick how the host compiles the kernel (upstream
# python/pypto/frontend/parser/entry.py jit): they change no device work the model prices
HOST_COMPILE_FLAGS = ("new_ir", "create_new_logical_tensor")


def _options(kernel: JitKernel, R: Recorder) -> dict:
    out = {}
    groups = {}
    for group, values in kernel.options.items():
        if group in HOST_COMPILE_FLAGS:
            R.notes.append(f"jit {group}={values!r} acts on the host compile only and is not "
                           f"modeled")
        elif values is None or isinstance(values, dict):
            groups[group] = dict(values or {})
        else:
            raise Unsupported(f"jit option '{group}={values!r}' is neither an option group "
                              f"(a dict) nor a host compile flag", function=R.function,
                              supported=OPTION_GROUPS + HOST_ONLY_GROUPS + HOST_COMPILE_FLAGS)
    # options the body set (control.set_<group>) override the jit's
    for group, values in getattr(R, "body_options", {}).items():
        groups.setdefault(group, {}).update({k: v for k, (v, _) in values.items()})
    for group, values in groups.items():
        if group in HOST_ONLY_GROUPS:
            # they steer compiling and checking on the host, not the device run the model prices
            R.notes.append(f"jit {group}={values!r} act on the host only and are not modeled")
            continue
        if group not in OPTION_GROUPS:
            raise Unsupported(f"jit option group '{group}' is not modeled", function=R.function,
                              supported=OPTION_GROUPS + HOST_ONLY_GROUPS)
        clean = {}
        for key, value in (values or {}).items():
            if hasattr(value, "name") and hasattr(value, "owner"):
                raise Unsupported(f"{group}.{key} = {value!r} is not a value ptolab can hold",
                                  function=R.function)
            clean[key] = {str(k): v for k, v in value.items()} if isinstance(value, dict) \
                else value
        if group == "runtime_options" and "run_mode" in clean:
            clean["run_mode"] = int(clean["run_mode"])
        retired = {k: clean.pop(k) for k in RETIRED_RUNTIME_OPTIONS
                   if group == "runtime_options" and k in clean}
        if retired:
            R.notes.append(f"runtime_options {retired!r}: options of the runtime at 08cec41e4 "
                           f"that upstream's HEAD dropped (its stitch is "
                           f"stitch_function_max_num alone); not modeled, left out")
        out[group] = clean
    # merge settings the body set (control.set_pass_options) override the jit's
    for key, (value, _) in getattr(R, "body_pass_options", {}).items():
        out.setdefault("pass_options", {})[key] = value
    return out


def _swap(old, new, undo: list) -> bool:
    """Put ``new`` wherever ``old`` is held: a module's or a class's attribute, a closure's
    cell, a staticmethod, classmethod or functools.partial (a new wrapper of ``new`` put
    where the old wrapper is held).  Each swap goes onto ``undo`` so the trace can put
    ``old`` back."""
    # no comprehension or lambda here names ``old``: that would hold it in a cell of this
    # function, which the swap would then change under its own feet
    swapped, target = False, id(old)
    for holder in gc.get_referrers(old):
        wrapper = _rewrapped(holder, old, new)
        if wrapper is not None:
            swapped = _swap(holder, wrapper, undo) or swapped
        elif isinstance(holder, types.CellType):
            undo.append((holder, None, old))
            holder.cell_contents, swapped = new, True
        elif isinstance(holder, dict):
            # a class's attributes change through setattr, which keeps its method cache
            # right; writing into the class's own dict leaves a freed function cached
            owner = next((t for t in gc.get_referrers(holder)
                          if isinstance(t, type) and t.__dict__ == holder), None)
            for key in [k for k, v in holder.items() if id(v) == target]:
                undo.append((owner if owner is not None else holder, key, old))
                if owner is not None:
                    setattr(owner, key, new)
                else:
                    holder[key] = new
                swapped = True
    return swapped


def _rewrapped(holder, old, new):
    """The wrapper ``holder`` made anew around ``new``, if it wraps ``old`` in a way the
    wrapper itself cannot be changed (their function attribute is read-only)."""
    if isinstance(holder, (staticmethod, classmethod)) and holder.__func__ is old:
        return type(holder)(new)
    if isinstance(holder, functools.partial) and holder.func is old:
        return functools.partial(new, *holder.args, **holder.keywords)
    return None


def _undo(undo: list) -> None:
    for holder, key, old in reversed(undo):
        if key is None:
            holder.cell_contents = old
        elif isinstance(holder, type):
            setattr(holder, key, old)
        else:
            holder[key] = old


def _rewrite_helper(code, undo: list) -> None:
    """Every function object of ``code`` the kernel can reach again replaced by its rewrite
    (rewrite.traceable), so the next trace records both branches of its ifs on symbolic
    values.  A def inside another def is made anew from the outer function's code on each
    call, and a list or tuple of functions holds its function where no swap
    reaches: their ifs then take a value as plain Python's do (symbols.NOT_REWRITABLE)."""
    functions = [f for f in gc.get_referrers(code)
                 if isinstance(f, types.FunctionType) and f.__code__ is code]
    swapped = False
    for old in functions:
        new = traceable(old, code.co_filename)
        if new is not old:
            new.__qualname__, new.__doc__ = old.__qualname__, old.__doc__
            swapped = _swap(old, new, undo) or swapped
    if not swapped or "<locals>" in code.co_qualname:
        symbols.NOT_REWRITABLE.add(code)


# a kernel traced again this many times (once per helper rewritten) stops
MAX_RETRACES = 64


def trace_file(path: Path, function: str | None = None, dims: dict | None = None,
               args: dict | None = None, shown: str | None = None,
               arch: str | None = None) -> Traced:
    """Trace ``function`` of the kernel file at ``path``.  ``arch``: what
    ``pypto.platform.npuarch`` answers (a chip name such as "DAV_2201"); None refuses the
    query, since a traced config keeps one chip's branch."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such kernel file.")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    resolved = path.resolve()
    with standins(resolved.parent, arch):
        module = _load_module(resolved, digest)
        args = dict(args or {})
        kernel, found = _find(module, path, function, args)
        fn = traceable(kernel.fn, str(resolved))
        symbols.NOT_REWRITABLE.clear()
        rewritten, undo = symbols.CodeSet(), []
        try:
            for _ in range(MAX_RETRACES):
                R = Recorder(kernel.__name__, resolved, shown or str(path))
                R.notes += found
                context.start(R)
                # a copy each round: _arguments consumes what it uses, and a kernel traced
                # again (after a helper's rewrite) needs every argument again
                call_args = _arguments(R, kernel.fn, dict(args), dict(dims or {}))
                symbols.RAISED.clear()
                try:
                    result = fn(*call_args)
                    if not symbols.RAISED:
                        break
                    helper = symbols.RAISED[0]       # caught by the kernel's own except:
                except HelperIf as caught:           # then trace the kernel again
                    helper = caught
                except Exception as exc:
                    if not symbols.RAISED:
                        if isinstance(exc, ConfigError):
                            raise
                        raise Unsupported(f"the kernel raised {type(exc).__name__}: {exc}",
                                          where=_kernel_line(exc, resolved, R.shown),
                                          function=R.function) from None
                    # what it raised came of catching the signal (a None where the
                    # helper's result should be): trace again with the helper rewritten
                    helper = symbols.RAISED[0]
                if helper.code in rewritten:         # reached through a reference kept
                    symbols.NOT_REWRITABLE.add(helper.code)   # elsewhere: as Python
                else:
                    rewritten.add(helper.code)
                    _rewrite_helper(helper.code, undo)
            else:
                raise Unsupported(f"the kernel was traced {MAX_RETRACES} times, once for each "
                                  f"function it calls with an if on a loop index, and still "
                                  f"meets new ones", function=R.function)
        finally:
            _undo(undo)                              # the files' functions as they were
            symbols.RAISED.clear()                   # nor keep their tracebacks alive
        if result is not None:
            raise Unsupported("the kernel returns a value; PyPTO kernels write their outputs "
                              "(out[:] = ..., pypto.assemble)", function=R.function)
        if len(R.stack) != 1:
            raise Unsupported("a pypto.loop body did not finish (break or return inside it)",
                              function=R.function)
        options = _options(kernel, R)
    doc = (inspect.getdoc(kernel.fn) or "").strip().splitlines()
    return Traced(R, kernel.__name__, path, digest, options, doc[0] if doc else "")
