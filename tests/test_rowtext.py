"""rowtext renders what the per-record formatting it replaces writes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.emit import rowtext as rt

from conftest import rt_lines

ODD = 'q"uo\\te %d %s %(x)s {x}\n\ttab ünï 字 \x01'


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2 ** 63 + 1, 2 ** 63 - 1), min_size=1, max_size=50))
def test_decimal_is_str(xs):
    assert rt_lines(rt.decimal(np.asarray(xs, np.int64))) == [str(x) for x in xs]


def test_decimal_at_every_power_of_ten():
    xs = [0] + [p + d for p in (10 ** k for k in range(1, 19)) for d in (-1, 0, 1)]
    xs += [-x for x in xs]
    assert rt_lines(rt.decimal(np.asarray(xs, np.int64))) == [str(x) for x in xs]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10 ** 14 - 1), min_size=1, max_size=50))
def test_grid_decimal_is_the_float_repr(ks):
    assert rt_lines(rt.grid_decimal(np.asarray(ks))) == [float.__repr__(k / 10 ** 4) for k in ks]


def test_texts_pick_and_overlay():
    table = rt.texts(["", "a", ODD])
    layout = rt.Layout("<%(v)s>")
    assert bytes(layout.render(3, v=table)).decode() == f"<><a><{ODD}>"
    assert rt.pick(table, np.asarray([2, 2, 2])).shape[0] == 1       # one row stands for all
    assert bytes(layout.render(3, v=rt.pick(table, np.asarray([2, 0, 1])))).decode() == \
        f"<{ODD}><><a>"
    over = rt.overlay(rt.decimal(np.asarray([1, 22, 333])), np.asarray([1]), rt.texts(["xyzw"]))
    assert bytes(layout.render(3, v=over)).decode() == "<1><xyzw><333>"


def test_layout_repeats_fields_and_keeps_other_percent_signs():
    layout = rt.Layout('%(a)s-%(b)s %d %s {x} "%(a)s"\n')
    a, b = rt.decimal(np.asarray([5, 10, 7])), rt.texts(["ü", "", "%(a)s"])
    want = "".join(f'{x}-{y} %d %s {{x}} "{x}"\n' for x, y in zip([5, 10, 7], ["ü", "", "%(a)s"]))
    assert bytes(layout.render(3, a=a, b=b)).decode() == want
    text, ends = layout.render_rows(3, a=a, b=b)
    lines = want.encode().splitlines(keepends=True)
    assert ends.tolist() == np.cumsum([len(line) for line in lines]).tolist()
    assert bytes(text) == want.encode()

