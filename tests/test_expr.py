"""Shape expressions run two ways (simcore/spec/expr.py): as a compiled function of the
environment, the compiler's inner loop, and as the tree walk that explains every error.
Whatever the expression and the environment, both give the same integer or both refuse."""
from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from simcore.spec import expr  # noqa: E402
from simcore.spec.expr import ExprError, evaluate, parse  # noqa: E402

NAMES = ("i", "W", "N", "t", "missing")

# a param or loop index, a tensor's values (used whole, or read by element), or nothing
ENV_VALUE = st.one_of(st.integers(-5, 40), st.booleans(),
                      st.lists(st.integers(0, 9), min_size=1, max_size=3).map(np.array))


def _exprs():
    # element reads run compiled too: an index past either end (numpy would wrap -1) or
    # itself read from the tensor must give what the walk gives
    leaf = st.one_of(st.integers(-3, 20).map(str), st.sampled_from(NAMES),
                     st.sampled_from(["t[0]", "t[i]", "t[i - 1]", "t[t[0]]", "t[i < 2]"]))
    binary = ["+", "-", "*", "//", "%", "<", "<=", "==", "!=", ">", " and ", " or "]

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(binary), inner).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
            inner.map(lambda e: f"(-{e})"), inner.map(lambda e: f"(not {e})"),
            st.tuples(st.sampled_from(["min", "max", "ceil_div"]), inner, inner).map(
                lambda t: f"{t[0]}({t[1]}, {t[2]})"))
    return st.recursive(leaf, extend, max_leaves=6)


def _walk(text, env):
    return int(expr._eval(parse(text), env, text))


def _outcome(fn, text, env):
    try:
        return ("value", fn(text, env))
    except ExprError:
        return ("refused",)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(_exprs(), st.dictionaries(st.sampled_from(NAMES[:-1]), ENV_VALUE))
def test_the_compiled_path_and_the_walk_agree(text, env):
    got = _outcome(evaluate, text, env)
    assert got == _outcome(_walk, text, env)
    if got[0] == "value":
        assert type(got[1]) is int


def test_a_tensor_used_whole_is_refused_even_where_numpy_gives_a_number():
    env = {"t": np.array([5]), "i": 2}
    for text in ("not t", "min(t, 3)", "max(t, 3)", "t * 0"):
        with pytest.raises(ExprError, match="whole"):
            evaluate(text, env)
    assert evaluate("t[0] + i", env) == 7
    assert evaluate("i < 3", env) == 1 and type(evaluate("i < 3", env)) is int


@pytest.mark.parametrize("text, words", [
    ("ceil_div(4, 0)", "divides by zero"), ("4 // (2 - 2)", "divides by zero"),
    ("min()", "argument"), ("ceil_div(4)", "argument")])
def test_a_call_that_cannot_be_made_is_refused_not_raised(text, words):
    """These raised ZeroDivisionError and TypeError, which the CLI would show as a
    traceback (found by the property test above)."""
    with pytest.raises(ExprError, match=words):
        evaluate(text, {})
