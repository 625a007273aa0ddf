"""JSON text for the big files, written piece by piece, byte for byte what
``json.dumps(..., ensure_ascii=False)`` gives for the same data.

``json.dumps`` with an ``indent`` runs Python's pure-Python encoder and needs the
whole document as Python objects; for 10^6 tasks that is minutes and gigabytes.
The writers instead render fixed per-record templates for many records at once
(rowtext.Layout), and use the C encoder (``indent=None``) only on short lists of small
objects.  The rules
followed are the standard library's (Lib/json/encoder.py): strings through
``encode_basestring``, floats through ``float.__repr__`` (``NaN``/``Infinity``
spelled out), items of a compact list joined by ``", "``, of an indented one by
``",\\n"`` with ``indent * level`` spaces before each line.
"""
from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any, Callable, Iterable

import numpy as np

INF = float("inf")

string = encode_basestring       # the ensure_ascii=False escaper json.dumps uses


def real(x: float) -> str:
    """A float as json.dumps writes it."""
    if x != x:
        return "NaN"
    if x == INF:
        return "Infinity"
    if x == -INF:
        return "-Infinity"
    return float.__repr__(x)


def real_for(*arrays) -> Callable[[float], str]:
    """``real``, or the plain (faster) ``float.__repr__`` when every value to be written
    comes from ``arrays`` and they are all finite."""
    return float.__repr__ if all(np.isfinite(a).all() for a in arrays) else real


def number(x: Any) -> str:
    """A bool, int or float as json.dumps writes it."""
    if isinstance(x, bool):
        return "true" if x else "false"
    return real(x) if isinstance(x, float) else int.__repr__(int(x))


def compact_items(items: list) -> str:
    """``json.dumps(items)`` without its brackets: the items joined by ", "."""
    return json.dumps(items, ensure_ascii=False)[1:-1]


def indented(obj: Any, indent: int, level: int) -> str:
    """``obj`` as it appears ``level`` deep inside an indented document, first line
    indented too.  Encoded strings hold no raw newline, so every newline is layout."""
    pad = " " * (indent * level)
    return pad + json.dumps(obj, indent=indent, ensure_ascii=False).replace("\n", "\n" + pad)


CHUNK = 1 << 14     # records per piece: amortises the calls; rowtext's byte matrix of a piece of
                    # the longest records (swimlane task events) stays near 9 MB


def chunks(n: int, size: int | None = None) -> Iterable[tuple[int, int]]:
    """[lo, hi) slices covering range(n), ``CHUNK`` long unless told."""
    size = size or CHUNK
    for lo in range(0, n, size):
        yield lo, min(lo + size, n)


# Times in the swimlanes are counter ticks over the counter's frequency, rounded to 4
# decimals.  When the frequency divides 10^4 each value is an exact multiple of 1e-4 us,
# and json.dumps(round(t, 4)) (float.__repr__, the shortest round-tripping string) is
# that multiple written in decimal: no more than 15 significant digits name one double.
GRID = 10_000                   # 4 decimals
GRID_MAX = 10 ** 14             # at most 15 significant digits


def grid_of(cycles: np.ndarray, freq: float) -> np.ndarray | None:
    """``cycles / freq`` in units of 1e-4 (int64), or None when the ticks do not fall on
    that grid exactly (then the caller rounds each float).  rowtext.grid_decimal writes
    the values."""
    if freq != int(freq) or freq <= 0 or GRID % int(freq):
        return None
    m = np.asarray(cycles, np.int64) * (GRID // int(freq))
    if m.size and (m.min() < 0 or m.max() >= GRID_MAX):
        return None
    return m
