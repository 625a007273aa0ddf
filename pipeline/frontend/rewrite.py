"""Recompile a kernel function so that symbolic ``if``s trace both branches.

Upstream's ``frontend.jit`` parses the kernel's source, so ``if pypto.is_loop_begin(i):``
records both branches.  Plain Python runs one; so the kernel's own source is parsed again
(same file and line numbers, so errors point at it) with these changes:

* ``if T: A else: B`` runs as before when ``T`` is a Python value; when it is a condition
  of the kernel language, A runs under ``T`` and B under ``not T``, each from the state
  before the if, and variables both bound join into one value;
* ``x = expr`` names the traced value after ``x``;
* ``for x in pypto.loop(...)`` names the loop index after ``x``;
* ``not`` / ``and`` / ``or`` on conditions build conditions.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from itertools import count

from . import context, symbols
from .control import LoopRange
from .symbols import SymBool, SymInt
from .tensor import Tensor

RT = "__pto__"
MISSING = object()


class _Unbound:
    """A variable bound only in the other branch of a symbolic if."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr):
        raise context.rec().fail(f"'{self.name}' is bound in only one branch of a symbolic if "
                                 f"and used after it", hint="bind it in both branches")

    def __repr__(self):
        return f"<{self.name}: bound in one branch only>"


class _Clash(_Unbound):
    """A variable the two branches of a symbolic if bind to values that cannot be one (a
    kernel tensor and an op result, two shapes): an error only where it is used after."""

    def __init__(self, name: str, why: str):
        super().__init__(name)
        self.why = why

    def __getattr__(self, attr):
        raise context.rec().fail(f"'{self.name}' {self.why}, and it is used after the if",
                                 hint="bind it to one kind of value and shape in both branches")

    def __repr__(self):
        return f"<'{self.name}' {self.why}>"


class Runtime:
    """The helpers the rewritten function calls."""

    @staticmethod
    def named(value, name):
        if isinstance(value, Tensor) and not value.slot.fixed and not value.slot.named:
            value.slot.hint, value.slot.named = name, True
        return value

    @staticmethod
    def iter(it, name):
        if isinstance(it, LoopRange) and it.idx_hint is None:
            it.idx_hint = name
        return it

    @staticmethod
    def symbolic(test):
        return isinstance(test, SymInt)

    @staticmethod
    def not_(x):
        if isinstance(x, SymBool):
            return x.negate()
        if isinstance(x, SymInt):
            return SymBool(f"{x.text} == 0")
        return not x

    @staticmethod
    def boolop(word, *thunks):
        """Python's and/or, except that once a condition is symbolic every operand counts."""
        symbolic = None
        for thunk in thunks:
            v = thunk()
            if isinstance(v, SymInt):
                symbolic = v if symbolic is None else (
                    symbolic & v if word == "and" else symbolic | v)
            elif symbolic is None and (not v if word == "and" else v):
                return v                 # short-circuits as Python does
        return symbolic if symbolic is not None else v

    @staticmethod
    def begin(test, scope: dict, names):
        R = context.rec()
        cond = test.text if isinstance(test, SymBool) else f"{test.text} != 0"
        pre = {n: scope[n] for n in names if n in scope}
        return {"cond": cond, "pre": pre, "pre_vars": _tensor_states(pre),
                "state": R.branch_begin(cond)}

    @staticmethod
    def switch(ctx, scope: dict, names):
        ctx["a"] = {n: scope[n] for n in names if n in scope}
        ctx["a_vars"] = _tensor_states(ctx["a"])
        # x[:] = v renames the tensor object itself (Tensor.move): the other branch starts
        # from the value it held before the if
        for tensor, state in ctx["pre_vars"].values():
            _set_state(tensor, state)
        ctx["after_a"] = context.rec().branch_switch(ctx["cond"], ctx["state"])
        return ctx

    @staticmethod
    def before(ctx, name):
        return ctx["pre"].get(name, _Unbound(name))

    @staticmethod
    def end(ctx, scope: dict, names):
        ctx["b"] = {n: scope[n] for n in names if n in scope}
        ctx["b_vars"] = _tensor_states(ctx["b"])
        context.rec().branch_end(ctx["after_a"])
        return ctx

    @staticmethod
    def phi(ctx, name):
        R = context.rec()
        pre = ctx["pre"].get(name, MISSING)
        a, b = ctx["a"].get(name, MISSING), ctx["b"].get(name, MISSING)
        if isinstance(b, _Unbound):
            b = MISSING
        if a is b and isinstance(a, Tensor) and id(a) in ctx["pre_vars"]:
            renamed = Runtime._renamed(ctx, a)
            if renamed is not None:
                _set_state(a, vars(renamed))
            return a
        if a is b:
            return a if a is not MISSING else _Unbound(name)
        if a is MISSING:
            return b
        if b is MISSING:
            return a
        if isinstance(a, Tensor) and isinstance(b, Tensor):
            if a is pre or b is pre:
                return b if a is pre else a    # one branch rebinds: its value keeps its cond
            if a.kind in ("arg", "temp") or b.kind in ("arg", "temp"):
                return _Clash(name, "names a kernel tensor in one branch of a symbolic if and "
                                    "another value in the other")
            if a.shape != b.shape and repr(a.shape) != repr(b.shape):
                return _Clash(name, f"has shape {a.shape} in one branch of a symbolic if and "
                                    f"{b.shape} in the other")
            return R.tie(a, b)
        if isinstance(a, (int, SymInt)) and isinstance(b, (int, SymInt)) and \
                not isinstance(a, bool):
            if repr(a) == repr(b):
                return a
            c = SymBool(ctx["cond"])
            return c * a + (1 - c) * b
        try:
            if a == b:
                return a
        except Exception:
            pass
        return _Unbound(name)

    @staticmethod
    def _renamed(ctx, tensor):
        """The value a tensor renamed in place (x[:] = v) holds after the if: the one branch's
        rename (under its condition), or both tied into one name; None if neither renamed."""
        pre = ctx["pre_vars"][id(tensor)][1]
        a = ctx.get("a_vars", {}).get(id(tensor), (None, pre))[1]
        b = ctx.get("b_vars", {}).get(id(tensor), (None, pre))[1]
        if a == b:
            return None
        ta, tb = (object.__new__(Tensor) for _ in range(2))
        ta.__dict__.update(a)
        tb.__dict__.update(b)
        if a == pre or b == pre:
            return tb if a == pre else ta
        if repr(ta.shape) != repr(tb.shape):
            raise context.rec().fail(f"a tensor renamed in both branches of a symbolic if has "
                                     f"shape {ta.shape} in one and {tb.shape} in the other")
        return context.rec().tie(ta, tb)

    @staticmethod
    def min(*args, **kwargs):
        return _extreme(builtins.min, "min", args, kwargs)

    @staticmethod
    def max(*args, **kwargs):
        return _extreme(builtins.max, "max", args, kwargs)

    @staticmethod
    def exits(line):
        raise context.rec().fail(f"return, break or continue inside a symbolic if (line {line}) "
                                 f"is not supported")


def _extreme(builtin, name, args, kwargs):
    """Python's min/max of loop-dependent ints stay expressions (min(i*64 + 64, n))."""
    values = args[0] if len(args) == 1 and not isinstance(args[0], SymInt) else args
    values = list(values)
    if kwargs or not any(isinstance(v, SymInt) for v in values):
        return builtin(*args, **kwargs)
    out = values[0]
    for v in values[1:]:
        out = getattr(out, name)(v) if isinstance(out, SymInt) else getattr(v, name)(out)
    return out


def _stored_names(stmts) -> list[str]:
    """Names a branch binds, and names whose tensor it renames in place (x[:] = v)."""
    names = []
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name):
                node = node.value
            elif not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
                continue
            if not node.id.startswith("__pto") and node.id not in names:
                names.append(node.id)
    return names


def _set_state(tensor: Tensor, state: dict) -> None:
    """Make ``tensor`` the value whose attributes are ``state`` (a rename, undone or done)."""
    tensor.__dict__.clear()
    tensor.__dict__.update(state)


def _tensor_states(bound: dict) -> dict:
    """id -> (tensor, a copy of its attributes) of the tensors among ``bound``."""
    return {id(v): (v, dict(vars(v))) for v in bound.values() if isinstance(v, Tensor)}


def _exits(stmts) -> bool:
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Return, ast.Break, ast.Continue)):
                return True
    return False


def _call(attr, *args):
    return ast.Call(func=ast.Attribute(value=ast.Name(RT, ast.Load()), attr=attr, ctx=ast.Load()),
                    args=list(args), keywords=[])


def _locals():
    return ast.Call(func=ast.Name("locals", ast.Load()), args=[], keywords=[])


def _on_line(stmt, node):
    """``stmt`` placed on ``node``'s first line only: the recorder reads the if's line from
    the frame, and Python reports a call spanning several lines at the last line of its
    callee's name."""
    for part in ast.walk(stmt):
        if "lineno" in part._attributes:
            part.lineno = part.end_lineno = node.lineno
            part.col_offset = part.end_col_offset = node.col_offset
    return stmt


class _Transformer(ast.NodeTransformer):
    def __init__(self):
        self.ids = count()

    def visit_FunctionDef(self, node):
        if getattr(self, "_top_done", False):
            return node          # nested helpers run as plain Python
        self._top_done = True
        node.decorator_list = []
        node.returns = None
        for arg in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
            arg.annotation = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            node.value = _call("named", node.value, ast.Constant(node.targets[0].id))
        return node

    def visit_For(self, node):
        self.generic_visit(node)
        target = node.target
        if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[0], ast.Name):
            target = target.elts[0]
        if isinstance(target, ast.Name):
            node.iter = _call("iter", node.iter, ast.Constant(target.id))
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            node.func = ast.Attribute(value=ast.Name(RT, ast.Load()), attr=node.func.id,
                                      ctx=ast.Load())
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("not_", node.operand), node)
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        word = "and" if isinstance(node.op, ast.And) else "or"
        thunks = [ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                kw_defaults=[], defaults=[]), body=v)
                  for v in node.values]
        return ast.copy_location(_call("boolop", ast.Constant(word), *thunks), node)

    def visit_If(self, node):
        self.generic_visit(node)
        n = next(self.ids)
        test, ctx = f"__pto_test{n}", f"__pto_ctx{n}"
        names = _stored_names(node.body + node.orelse)
        names_node = ast.Tuple([ast.Constant(x) for x in names], ast.Load())
        if _exits(node.body + node.orelse):
            symbolic = [ast.Expr(_call("exits", ast.Constant(node.lineno)))]
        else:
            symbolic = [
                _on_line(ast.Assign([ast.Name(ctx, ast.Store())],
                                    _call("begin", ast.Name(test, ast.Load()), _locals(),
                                          names_node)), node),
                *node.body,
                ast.Expr(_call("switch", ast.Name(ctx, ast.Load()), _locals(), names_node)),
                *[ast.Assign([ast.Name(x, ast.Store())],
                             _call("before", ast.Name(ctx, ast.Load()), ast.Constant(x)))
                  for x in names],
                *(node.orelse or [ast.Pass()]),
                ast.Expr(_call("end", ast.Name(ctx, ast.Load()), _locals(), names_node)),
                *[ast.Assign([ast.Name(x, ast.Store())],
                             _call("phi", ast.Name(ctx, ast.Load()), ast.Constant(x)))
                  for x in names],
            ]
        plain = ast.If(test=ast.Name(test, ast.Load()), body=node.body, orelse=node.orelse)
        out = [ast.Assign([ast.Name(test, ast.Store())], node.test),
               ast.If(test=_call("symbolic", ast.Name(test, ast.Load())), body=symbolic,
                      orelse=[plain])]
        for stmt in out:
            ast.copy_location(stmt, node)
        return out


def traceable(fn, filename: str):
    """``fn`` recompiled from its source with the changes above, or ``fn`` if it has none."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return fn
    tree = ast.parse(source)
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    func = tree.body[0]
    func = _Transformer().visit(func)
    free = list(fn.__code__.co_freevars)
    maker = ast.FunctionDef(
        name="__pto_make__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(RT)] + [ast.arg(f) for f in free],
                           kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[func, ast.Return(ast.Name(func.name, ast.Load()))], decorator_list=[],
        returns=None)
    module = ast.Module(body=[maker], type_ignores=[])
    ast.fix_missing_locations(module)
    for node in ast.walk(maker):
        if not hasattr(node, "lineno") or node.lineno is None:
            node.lineno = func.lineno
    namespace: dict = {}
    exec(compile(module, filename, "exec"), fn.__globals__, namespace)
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    new = namespace["__pto_make__"](Runtime, *cells)
    symbols.REWRITTEN.add(new.__code__)
    new.__defaults__, new.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return new
