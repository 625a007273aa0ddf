"""Group root calls into dev tasks (stitch batches), as the runtime submits them.

Before appending a root call the runtime submits the current dev task if it
already holds ``stitch_function_max_num`` root calls, if the call's leaf tasks
would push it past the leaf-task cap, or if it holds the hard maximum of root
calls (reference/upstream-cases.md §6.1).
"""
from __future__ import annotations

import numpy as np

MAX_STITCH_LEAF_TASKS = 60000   # MAX_STITCH_LEAFFUNC_NUM upstream
MAX_STITCH_ROOT_CALLS = 1024    # MAX_STITCH_FUNC_NUM upstream


def stitch(call_leaf_tasks: np.ndarray, stitch_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Per root call: (dev task index, position inside the dev task)."""
    n = call_leaf_tasks.size
    dev = np.zeros(n, dtype=np.int64)
    pos = np.zeros(n, dtype=np.int64)
    current, count, leaves = 0, 0, 0
    for i in range(n):
        size = int(call_leaf_tasks[i])
        if count and (count >= min(stitch_max, MAX_STITCH_ROOT_CALLS)
                      or leaves + size > MAX_STITCH_LEAF_TASKS):
            current, count, leaves = current + 1, 0, 0
        dev[i], pos[i] = current, count
        count += 1
        leaves += size
    return dev, pos
