"""Shape expressions: integer arithmetic over named parameters and loop indices.

Kernel files write shapes and offsets as ``"N*W"`` or ``"i*W"`` and conditions
as ``"s2 == 0"``; this evaluates them safely (no Python ``eval``): names,
integers, + - * // %, comparisons, and/or/not, parentheses,
``min``/``max``/``ceil_div`` and element reads ``seq_lens[b]`` of tensors whose values
the kernel holds.
"""
from __future__ import annotations

import ast
import copy
import operator
from functools import lru_cache
from typing import Mapping

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
           ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_FUNCS = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}
_ALLOWED = (ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Not, ast.Name, ast.Load, ast.Call,
            ast.Constant, ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.Subscript, ast.Tuple,
            *_BINOPS, *_CMPOPS)


class ExprError(ValueError):
    pass


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.expr:
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise ExprError(f"'{text}' is not an integer expression") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED) or (isinstance(node, ast.Constant)
                                              and type(node.value) not in (int, bool)):
            raise ExprError(f"'{text}' may use only names, integers, + - * // %, comparisons, "
                            f"and/or/not and min/max/ceil_div")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in _FUNCS):
            raise ExprError(f"'{text}' calls an unknown function; allowed: {', '.join(_FUNCS)}")
        if isinstance(node, ast.Subscript) and not isinstance(node.value, ast.Name):
            raise ExprError(f"'{text}' indexes something other than a tensor name")
    # a tuple only as the index of an element read: x[b, i]
    indices = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
    if any(isinstance(n, ast.Tuple) and id(n) not in indices for n in ast.walk(tree)):
        raise ExprError(f"'{text}' is a tuple, not an integer expression")
    return tree


# Compiled form of an expression whose every node means in Python what it means here:
# names, integers, + - * // %, unary minus, not, comparisons, min/max/ceil_div calls and
# element reads (through ``_element_at``, which checks the index).  And/or (which here
# evaluate every operand and give 0 or 1) keep to the tree walk below.
_FAST_NODES = tuple(n for n in _ALLOWED if n not in (ast.BoolOp, ast.And, ast.Or))


def _element_at(values, *index) -> int:
    """``values[index]`` for the compiled form; anything else raises, and the tree walk
    then says what is wrong."""
    if values.ndim != len(index) or any(type(i) is not int or not 0 <= i < n
                                        for i, n in zip(index, values.shape)):
        raise IndexError(index)
    return int(values[index])


class _EnvReads(ast.NodeTransformer):
    """``i * W`` -> ``_env['i'] * _env['W']``; a called function keeps its name."""

    def visit_Call(self, node: ast.Call) -> ast.Call:
        node.args = [self.visit(a) for a in node.args]
        return node

    def visit_Name(self, node: ast.Name) -> ast.Subscript:
        return ast.Subscript(ast.Name("_env", ast.Load()), ast.Constant(node.id), ast.Load())

    def visit_Subscript(self, node: ast.Subscript) -> ast.Call:
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return ast.Call(ast.Name("_element_at", ast.Load()),
                        [self.visit(node.value), *(self.visit(p) for p in parts)], [])


@lru_cache(maxsize=4096)
def _compiled(text: str):
    """(a function of the environment computing ``text``, the names it reads), or None to
    walk the tree."""
    tree = parse(text)
    if not all(isinstance(n, _FAST_NODES) for n in ast.walk(tree)):
        return None
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    # a tensor read element-wise is no integer: _element_at checks it
    tensors = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
    names = tuple(sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                          and id(n) not in calls and id(n) not in tensors}))
    body = _EnvReads().visit(copy.deepcopy(tree))
    fn = ast.Expression(ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg("_env")],
                                                 kwonlyargs=[], kw_defaults=[], defaults=[]),
                                   body))
    code = compile(ast.fix_missing_locations(fn), "<shape expression>", "eval")
    return eval(code, {"__builtins__": {}, **_FUNCS, "_element_at": _element_at}), \
        names   # noqa: S307 - checked tree


def evaluate(text: int | str, env: Mapping[str, int]) -> int:
    """The integer value of ``text`` with the names of ``env``.

    Most expressions run as a compiled Python function (a shape expression is evaluated
    once per op per loop iteration, so this is the compiler's inner loop); anything that
    reads anything but plain integers or fails there (a missing name, a tensor used whole,
    a division by zero) is walked again by ``_eval``, which says what is wrong.
    """
    if isinstance(text, (int, bool)):
        return int(text)
    fast = _compiled(text)
    # only on plain integers: a tensor's values used whole (or a missing name) must reach
    # the walk, which refuses them, even where numpy would give a number
    if fast is not None:
        fn, names = fast
        for name in names:
            if type(env.get(name)) is not int:
                break
        else:
            try:
                value = fn(env)
                return value if type(value) is int else int(value)   # a comparison's bool
            except Exception:  # noqa: BLE001 - the walk below reports it
                pass
    return int(_eval(parse(text), env, text))


def _eval(node: ast.expr, env: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"'{text}' uses '{node.id}', which is not a param or loop index "
                            f"here (known: {', '.join(sorted(env)) or 'none'})")
        value = env[node.id]
        if hasattr(value, "ndim"):
            raise ExprError(f"'{text}' uses the tensor '{node.id}' whole; read one element, "
                            f"{node.id}[i]")
        return value
    if isinstance(node, ast.Subscript):
        return _element(node, env, text)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text)
        if isinstance(node.op, ast.Not):
            return int(not value)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env, text), _eval(node.right, env, text)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExprError(f"'{text}' divides by zero")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, text)
            if not _CMPOPS[type(op)](left, right):
                return 0
            left = right
        return 1
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, env, text) for v in node.values]
        return int(all(values) if isinstance(node.op, ast.And) else any(values))
    assert isinstance(node, ast.Call)
    args = [_eval(a, env, text) for a in node.args]
    try:
        return _FUNCS[node.func.id](*args)
    except ZeroDivisionError:           # ceil_div(a, 0)
        raise ExprError(f"'{text}' divides by zero") from None
    except TypeError:                   # min() of nothing, ceil_div of one argument
        raise ExprError(f"'{text}' calls {node.func.id} with {len(args)} argument(s)") from None


def _element(node: ast.Subscript, env: Mapping[str, int], text: str) -> int:
    """An element of a tensor whose values the kernel config holds (``seq_lens[b]``)."""
    name = node.value.id
    values = env.get(name)
    if not hasattr(values, "ndim"):
        raise ExprError(f"'{text}' reads an element of '{name}', which has no values here; give "
                        f"them in the kernel's 'values' ({name}: [...])")
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    index = tuple(_eval(p, env, text) for p in parts)
    if len(index) != values.ndim or any(not 0 <= i < n for i, n in zip(index, values.shape)):
        raise ExprError(f"'{text}' reads {name}{list(index)}, outside its values of shape "
                        f"{list(values.shape)}")
    return int(values[index])
