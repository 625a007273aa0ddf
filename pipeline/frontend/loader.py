"""Load a kernel file with the stand-ins in place, build placeholder arguments, trace.

The stand-in ``pypto`` (and a stand-in ``torch`` when torch is not installed) sit in
``sys.modules`` only while the file is imported and its kernel is called; afterwards the
previous entries are back.  If a real PyPTO is importable, ``ptolab import`` refuses
rather than shadow it: run it where PyPTO is not installed (a plain ptolab environment).
"""
from __future__ import annotations

import hashlib
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

from . import context, standin, tensor, torch_stub
from .control import OPTION_GROUPS, JitKernel
from .errors import Unsupported
from .recorder import Recorder
from .rewrite import traceable


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


@contextmanager
def standins(folder: Path):
    real = _real_pypto()
    if real is not None:
        raise ConfigError(f"a real PyPTO is importable here ({real}); `ptolab import` traces "
                          f"with its own stand-in pypto and will not shadow a real "
                          f"installation. Run it in an environment without PyPTO.")
    modules = standin.build()
    modules["pypto"]._ptolab_standin = True
    need_torch = "torch" not in sys.modules and importlib.util.find_spec("torch") is None
    saved = {k: sys.modules.get(k) for k in modules}
    sys.modules.update(modules)
    if need_torch:
        sys.meta_path.insert(0, torch_stub.FINDER)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
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


def _find(module, path: Path, function: str | None) -> JitKernel:
    kernels = {n: v for n, v in vars(module).items() if isinstance(v, JitKernel)}
    if function is None:
        if len(kernels) != 1:
            raise ConfigError(f"{path}: {'no' if not kernels else len(kernels)} @pypto.jit "
                              f"kernels in the file{': ' + ', '.join(kernels) if kernels else ''}; "
                              f"name one as {path}:FUNCTION.")
        return next(iter(kernels.values()))
    value = getattr(module, function, None)
    if isinstance(value, JitKernel):
        return value
    if callable(value):
        return JitKernel(value, {})
    raise ConfigError(f"{path}: no function '{function}' (jit kernels in the file: "
                      f"{', '.join(kernels) or 'none'}).")


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
    if given is not None and len(given) != len(spec):
        raise ConfigError(f"--arg {name}={given}: the annotation {ann!r} has {len(spec)} dims.")
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
            args.append(_plain(given.pop(p.name)))
        elif p.default is not inspect.Parameter.empty:
            args.append(p.default)
        else:
            raise ConfigError(f"kernel argument '{p.name}' is not a pypto.Tensor and has no "
                              f"default: give it as --arg {p.name}=VALUE (JSON).")
    if given:
        raise ConfigError(f"--arg {', '.join(given)}: not an argument of {fn.__name__} "
                          f"(arguments: {', '.join(signature.parameters)}).")
    if dims:
        raise ConfigError(f"--dim {', '.join(dims)}: not a dynamic dim of {fn.__name__}.")
    return args


def _plain(value):
    """A JSON object argument reads like the config object a kernel expects (cfg.eps), and
    "pypto.DT_BF16" is that dtype."""
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: _plain(v) for k, v in value.items()})
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


def _options(kernel: JitKernel, R: Recorder) -> dict:
    out = {}
    for group, values in kernel.options.items():
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
        out[group] = clean
    return out


def trace_file(path: Path, function: str | None = None, dims: dict | None = None,
               args: dict | None = None, shown: str | None = None) -> Traced:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such kernel file.")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    resolved = path.resolve()
    with standins(resolved.parent):
        module = _load_module(resolved, digest)
        kernel = _find(module, path, function)
        R = Recorder(kernel.__name__, resolved, shown or str(path))
        context.start(R)
        fn = traceable(kernel.fn, str(resolved))
        call_args = _arguments(R, kernel.fn, dict(args or {}), dict(dims or {}))
        context.start(R)
        try:
            result = fn(*call_args)
        except ConfigError:
            raise
        except Exception as exc:
            raise Unsupported(f"the kernel raised {type(exc).__name__}: {exc}",
                              where=_kernel_line(exc, resolved, R.shown),
                              function=R.function) from None
        if result is not None:
            raise Unsupported("the kernel returns a value; PyPTO kernels write their outputs "
                              "(out[:] = ..., pypto.assemble)", function=R.function)
        if len(R.stack) != 1:
            raise Unsupported("a pypto.loop body did not finish (break or return inside it)",
                              function=R.function)
        options = _options(kernel, R)
    doc = (inspect.getdoc(kernel.fn) or "").strip().splitlines()
    return Traced(R, kernel.__name__, path, digest, options, doc[0] if doc else "")
