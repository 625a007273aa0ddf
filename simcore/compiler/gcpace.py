"""The garbage collector's pace while a kernel compiles.

Compiling a Python ``for`` of thousands of iterations allocates millions of small,
mostly acyclic objects (traced ops, nodes, keys) that live until the call is tiled;
CPython's default young-generation threshold (700 allocations) then runs a collection
every few ops, each walking the survivors again, about a sixth of a long compile.  A
higher threshold still collects every cycle, only in fewer, larger passes.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager

# allocations between young collections while compiling: about 30 times CPython's default
YOUNG_THRESHOLD = 20000


@contextmanager
def slower_young_collections():
    """Collect the young generation less often inside; the caller's thresholds after."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
