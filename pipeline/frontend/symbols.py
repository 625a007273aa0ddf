"""Symbolic integers: shapes, offsets and loop indices as kernel-language expressions.

A ``SymInt`` carries the expression text the kernel config will hold (``"b*NQ + 4"``,
in the grammar of simcore.spec.expr) and, where it is known at import time, its value.
Loop indices have no value: they stay names.  Dynamic dims (params) have a value from
``--dim``; Python code that needs a real int from one (``range(x.shape[0])``) gets that
value, and the tracer notes the specialisation in the config's header.
"""
from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Callable

# Set by the tracer while a kernel runs: called with (SymInt, reason) when Python forces a
# symbolic value to a concrete one.
on_concrete: Callable[["SymInt", str], int] | None = None

class CodeSet:
    """Code objects by identity: two functions of different files can compile to code
    objects that compare equal, and one must not stand for the other."""

    def __init__(self):
        self._by_id: dict = {}

    def add(self, code) -> None:
        self._by_id[id(code)] = code          # held, so its id is not reused

    def clear(self) -> None:
        self._by_id.clear()

    def __contains__(self, code) -> bool:
        return self._by_id.get(id(code)) is code


# kernel bodies rewritten so an ``if`` on a loop index becomes a condition (rewrite.py): an
# ``if`` anywhere else that meets a symbolic value is in a function the kernel calls
REWRITTEN = CodeSet()
# functions the kernel calls whose ifs could not be rewritten in this trace (no source, a
# def inside another def, made anew on every call, or a form the tracer cannot swap in):
# their ifs take a value as plain Python's do
NOT_REWRITABLE = CodeSet()
# ptolab's own code: a frame there is not the kernel's
OWN_CODE = (str(Path(__file__).resolve().parents[1]),           # pipeline/
            str(Path(__file__).resolve().parents[2] / "simcore"))
# where Python's own and installed packages live: an if there is not the kernel's code
_INSTALLED = tuple({str(Path(sysconfig.get_paths()[key])) + os.sep
                    for key in ("stdlib", "platstdlib", "purelib", "platlib")})


class HelperIf(BaseException):
    """An ``if`` on a symbolic value inside a function the kernel calls (not the kernel's
    own body, which is rewritten before it runs).  Upstream's runtime records both branches
    of such an if wherever it stands (``pypto.cond``'s RecordIfBranch), so the tracer
    rewrites that function as it does the kernel and traces again.  A BaseException, so a
    kernel's ``except Exception`` does not swallow it; one that catches everything (a bare
    ``except:``) still leaves it in ``RAISED``, which the tracer reads after the kernel
    returns."""

    def __init__(self, code, message: str):
        super().__init__(message)
        self.code, self.message = code, message


RAISED: list[HelperIf] = []     # this trace's, in order; the tracer clears it each round


def _kernel_code(code) -> bool:
    """Is ``code`` a function of the kernel's files (not Python's, an installed package's
    or ptolab's)?  A comprehension, lambda or generator expression has a code object of
    its own, named <...>: its test is no if statement."""
    return not (code.co_name.startswith("<")
                or code.co_filename.startswith(OWN_CODE + ("<",) + _INSTALLED))


def _in_helper(code) -> bool:
    """Is ``code`` a function the kernel calls that the tracer may still rewrite?"""
    return _kernel_code(code) and code not in REWRITTEN and code not in NOT_REWRITABLE


def _branch_reason(frame) -> str:
    code = frame.f_code
    if code in REWRITTEN or not _kernel_code(code):
        return "decides a Python branch outside an if statement"
    return (f"decides the `if` in {code.co_name}() at {Path(code.co_filename).name}:"
            f"{frame.f_lineno}, a function the kernel calls that ptolab cannot rewrite to "
            f"trace both branches (a def inside another def, a function without its source, "
            f"or one reached only through a container such as a list or a tuple of "
            f"functions), so move that if into the kernel or into a plain function or "
            f"method of its module")


def _text(x) -> str:
    return x.text if isinstance(x, SymInt) else str(int(x))


def _atom(x) -> str:
    """Operand text, parenthesised unless it is a name or a non-negative number."""
    t = _text(x)
    return t if t.replace("_", "a").isalnum() else f"({t})"


def _value(x):
    return x.value if isinstance(x, SymInt) else int(x)


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class SymInt:
    __slots__ = ("text", "value", "loop")

    def __init__(self, text: str, value: int | None = None, loop=None):
        self.text, self.value, self.loop = text, value, loop

    # -- arithmetic -----------------------------------------------------------------------
    def _bin(self, other, sym: str, fn, reverse=False):
        if isinstance(other, bool) or not isinstance(other, (int, SymInt)):
            return NotImplemented
        a, b = (other, self) if reverse else (self, other)
        va, vb = _value(a), _value(b)
        value = fn(va, vb) if va is not None and vb is not None else None
        simple = _simplify(a, b, sym)
        if simple is not None:
            return simple
        return SymInt(f"{_atom(a)}{sym}{_atom(b)}", value)

    def __add__(self, o): return self._bin(o, " + ", lambda a, b: a + b)
    def __radd__(self, o): return self._bin(o, " + ", lambda a, b: a + b, True)
    def __sub__(self, o): return self._bin(o, " - ", lambda a, b: a - b)
    def __rsub__(self, o): return self._bin(o, " - ", lambda a, b: a - b, True)
    def __mul__(self, o): return self._bin(o, "*", lambda a, b: a * b)
    def __rmul__(self, o): return self._bin(o, "*", lambda a, b: a * b, True)
    def __floordiv__(self, o): return self._bin(o, " // ", lambda a, b: a // b)
    def __rfloordiv__(self, o): return self._bin(o, " // ", lambda a, b: a // b, True)
    def __mod__(self, o): return self._bin(o, " % ", lambda a, b: a % b)
    def __rmod__(self, o): return self._bin(o, " % ", lambda a, b: a % b, True)

    def as_variable(self) -> None:
        """Upstream's SymbolicScalar.as_variable (pypto_impl/__init__.pyi at 883e7dfb) marks
        the scalar as a run-time variable in place; the trace keeps a value read from a
        tensor symbolic anyway, so there is nothing to mark."""
        return None

    def __neg__(self):
        return SymInt(f"-{_atom(self)}", None if self.value is None else -self.value)

    def __pos__(self):
        return self

    def __truediv__(self, o):
        raise TypeError("a symbolic int divides with // (the kernel language has no '/')")

    __rtruediv__ = __truediv__

    def min(self, other):
        return _call("min", self, other, min)

    def max(self, other):
        return _call("max", self, other, max)

    # -- comparisons give conditions ------------------------------------------------------
    def _cmp(self, other, sym, fn):
        if isinstance(other, bool) or not isinstance(other, (int, SymInt)):
            return NotImplemented
        va, vb = _value(self), _value(other)
        value = int(fn(va, vb)) if va is not None and vb is not None else None
        return SymBool(f"{_text(self)} {sym} {_text(other)}", value)

    def __eq__(self, o): return self._cmp(o, "==", lambda a, b: a == b)
    def __ne__(self, o): return self._cmp(o, "!=", lambda a, b: a != b)
    def __lt__(self, o): return self._cmp(o, "<", lambda a, b: a < b)
    def __le__(self, o): return self._cmp(o, "<=", lambda a, b: a <= b)
    def __gt__(self, o): return self._cmp(o, ">", lambda a, b: a > b)
    def __ge__(self, o): return self._cmp(o, ">=", lambda a, b: a >= b)

    def __hash__(self):
        return hash(self.text)

    # -- Python wants a real int ------------------------------------------------------------
    def concrete(self, reason: str = "is used as a Python int") -> int:
        if on_concrete is not None:
            return on_concrete(self, reason)
        if self.value is None:
            raise TypeError(f"'{self.text}' is symbolic and has no value here")
        return self.value

    def __index__(self):
        return self.concrete("is used as a Python int (range, index, list size)")

    __int__ = __index__

    def __bool__(self):
        frame = sys._getframe(1)
        if on_concrete is not None and _in_helper(frame.f_code):
            RAISED.append(HelperIf(frame.f_code, _branch_reason(frame)))
            raise RAISED[-1]
        return bool(self.concrete(_branch_reason(frame)))

    def __repr__(self):
        return f"SymInt({self.text!r})" if self.value is None else \
            f"SymInt({self.text!r}={self.value})"

    __str__ = __repr__


class SymBool(SymInt):
    """A condition: 1 where it holds, 0 elsewhere (the kernel language's ``cond``)."""
    __slots__ = ()

    def negate(self) -> "SymBool":
        return SymBool(f"not ({self.text})", None if self.value is None else int(not self.value))

    __invert__ = negate

    def __and__(self, other):
        return _logic(self, other, "and")

    def __or__(self, other):
        return _logic(self, other, "or")


def _logic(a, b, word):
    if not isinstance(b, (SymInt, int)):
        return NotImplemented
    va, vb = _value(a), _value(b)
    value = None if va is None or vb is None else int(bool(va) and bool(vb) if word == "and"
                                                      else bool(va) or bool(vb))
    return SymBool(f"({_text(a)}) {word} ({_text(b)})", value)


def _call(name, a, b, fn):
    va, vb = _value(a), _value(b)
    if isinstance(a, int) and isinstance(b, int):
        return fn(a, b)
    return SymInt(f"{name}({_text(a)}, {_text(b)})",
                  fn(va, vb) if va is not None and vb is not None else None)


def _simplify(a, b, sym):
    """x + 0, x * 1, x * 0 and friends, so offsets read like the kernel's source."""
    if sym.strip() in ("+", "-") and is_int(b) and b == 0:
        return a
    if sym.strip() == "+" and is_int(a) and a == 0:
        return b
    if sym == "*":
        if is_int(a) and a == 1:
            return b
        if is_int(b) and b == 1:
            return a
        if (is_int(a) and a == 0) or (is_int(b) and b == 0):
            return 0
    if sym.strip() == "//" and is_int(b) and b == 1:
        return a
    return None


def as_dim(x):
    """int or expression text, what a kernel config's Dim holds."""
    if isinstance(x, SymInt):
        return x.text
    if is_int(x):
        return x
    raise TypeError(f"{x!r} is not an int or a symbolic int")


def same_dim(a, b) -> bool:
    if isinstance(a, SymInt) or isinstance(b, SymInt):
        if _text(a) == _text(b):
            return True
        va, vb = _value(a), _value(b)
        return va is not None and va == vb
    return a == b


def ceil_div(a, b):
    if is_int(a) and is_int(b):
        return -(-a // b)
    return _call("ceil_div", a, b, lambda x, y: -(-x // y))
