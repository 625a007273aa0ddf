"""Shape expressions: integer arithmetic over named parameters and loop indices.

Kernel files write shapes and offsets as ``"N*W"`` or ``"i*W"``; this evaluates
them safely (no Python ``eval``): names, integers, + - * // % and parentheses,
``min``/``max``/``ceil_div``.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from typing import Mapping

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_FUNCS = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}


class ExprError(ValueError):
    pass


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.expr:
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise ExprError(f"'{text}' is not an integer expression") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Name, ast.Load,
                               ast.Call, ast.Constant, *_BINOPS))
        if not ok or (isinstance(node, ast.Constant) and type(node.value) is not int):
            raise ExprError(f"'{text}' may use only names, integers, + - * // % and "
                            f"min/max/ceil_div")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in _FUNCS):
            raise ExprError(f"'{text}' calls an unknown function; allowed: {', '.join(_FUNCS)}")
    return tree


def names(text: int | str) -> set[str]:
    if isinstance(text, int):
        return set()
    return {n.id for n in ast.walk(parse(text)) if isinstance(n, ast.Name)} - set(_FUNCS)


def evaluate(text: int | str, env: Mapping[str, int]) -> int:
    if isinstance(text, int):
        return text
    return _eval(parse(text), env, text)


def _eval(node: ast.expr, env: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"'{text}' uses '{node.id}', which is not a param or loop index "
                            f"here (known: {', '.join(sorted(env)) or 'none'})")
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, text)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env, text), _eval(node.right, env, text)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExprError(f"'{text}' divides by zero")
        return _BINOPS[type(node.op)](left, right)
    assert isinstance(node, ast.Call)
    return _FUNCS[node.func.id](*(_eval(a, env, text) for a in node.args))
