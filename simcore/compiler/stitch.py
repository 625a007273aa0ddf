"""Group root calls into dev tasks (stitch batches), as the runtime submits them.

Before appending a root call the runtime submits the current dev task if it
already holds ``stitch_function_max_num`` loop bodies (an unrolled call counts
its unroll factor; 1024 inside a ``parallel`` loop), if the call's leaf tasks
would push it past the leaf-task cap, or if it holds the hard maximum of root
calls (upstream runtime limits, mirrored by the constants below).

Counting loop bodies follows PyPTO's guide ("最大loop数量") and reproduces its glm stitch
trend; upstream's runtime code counts root calls (docs/cases.md S1 says where and when).
"""
from __future__ import annotations

import numpy as np

MAX_STITCH_LEAF_TASKS = 60000   # MAX_STITCH_LEAFFUNC_NUM upstream
MAX_STITCH_ROOT_CALLS = 1024    # MAX_STITCH_FUNC_NUM upstream


def stitch(call_leaf_tasks: np.ndarray, call_bodies: np.ndarray, stitch_max: int,
           parallel: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per root call: (dev task index, position inside the dev task)."""
    n = call_leaf_tasks.size
    parallel = np.zeros(n, bool) if parallel is None else parallel
    dev = np.zeros(n, dtype=np.int64)
    pos = np.zeros(n, dtype=np.int64)
    current, roots, bodies, leaves = 0, 0, 0, 0
    for i in range(n):
        size = int(call_leaf_tasks[i])
        limit = MAX_STITCH_ROOT_CALLS if parallel[i] else stitch_max
        if roots and (bodies >= limit or roots >= MAX_STITCH_ROOT_CALLS
                      or leaves + size > MAX_STITCH_LEAF_TASKS):
            current, roots, bodies, leaves = current + 1, 0, 0, 0
        dev[i], pos[i] = current, roots
        roots += 1
        bodies += int(call_bodies[i])
        leaves += size
    return dev, pos
