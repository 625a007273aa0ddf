"""A root call's task graph as upstream's device encoder hands it to the runtime.

Before a root function runs, upstream encodes its call ops' dependency graph for the
schedule AICPUs (``framework/src/machine/utils/dynamic/dev_encode.cpp``, the same at the
guide's commit 08cec41e4 and at HEAD), and two of its steps change what the runtime
resolves:

* ``EraseRedundantColorEdges``: an edge j -> k is dropped when k is reached from another
  successor of j anyway.  The order it enforces stays, and the runtime resolves one edge
  fewer (the chain of a running state, e.g. a softmax step's row max, read by the next
  step and rewritten by the same task, needs only the edge through the reader).
* ``ReplaceSuccessorWithHub(callopList, 10)``: producers that share one successor set, P
  producers and S successors with P*S - P - S > 10, reach it through a hub: a call op
  with no kernel (``CoreType::HUB``) that the AICPU resolving its last predecessor
  resolves on the spot (``ResolveDepDyn`` in ``aicore_manager.h``), so the runtime
  resolves P + S edges instead of P*S.

* ``AddDummyCallsAtBeginningAndEnding``: a root call with three or more tasks that no
  other task of the call waits for gets an end hub that waits for all of them.  Nothing
  waits for the hub (the runtime does not count hubs among a dev task's tasks), but each
  of those tasks, when it ends, resolves its edge to the hub: an atomic decrement of the
  hub's count, a plain read for the last one.  A call of many independent tasks (a matmul
  cut into output tiles) pays one resolve per task this way.  The begin hub the same
  function puts before three or more tasks with no predecessor is resolved while the dev
  task is built (``ResolveEarlyDepends`` in ``device_task_context.cpp``, by the control
  AICPU, without atomics), so the schedule threads never see it; ptolab leaves it out.

All act on the edges inside one root call; edges between root calls are the runtime's
stitching and stay as they are.  Task indices are a topological order (every edge runs
from a lower index to a higher one), which the reduction relies on.
"""
from __future__ import annotations

import numpy as np

# ReplaceSuccessorWithHub's optimizeLimit: a hub only where it saves more edges than this
HUB_MIN_SAVED_EDGES = 10
# AddDummyCallsAtBeginningAndEnding's OPTIMIZATION_THRESHOLD: an end hub for this many
# tasks without a successor in their call, or more
END_HUB_MIN_TASKS = 3


def _csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[list[int], list[int]]:
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    return ptr.tolist(), dst.tolist()


def _redundant(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Per edge of one call (local task indices, sorted by src then dst): reached anyway.

    For every task with several successors, a search from its successors' successors,
    never past its last successor (indices only grow along edges), marks the successors
    it meets.  The cost follows the graph within those windows, not the square of the
    call's tasks.
    """
    ptr, succ = _csr(src, dst, n)
    drop = np.zeros(src.size, bool)
    for j in np.flatnonzero(np.diff(ptr) > 1).tolist():
        lo, hi = ptr[j], ptr[j + 1]
        mine = succ[lo:hi]
        limit = mine[-1]
        targets = set(mine)
        seen: set[int] = set()
        stack = [x for w in mine for x in succ[ptr[w]:ptr[w + 1]] if x <= limit]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            stack.extend(y for y in succ[ptr[x]:ptr[x + 1]] if y <= limit and y not in seen)
        if seen & targets:
            drop[lo:hi] = [k in seen for k in mine]
    return drop


def _hubs(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Per edge of one call: the local hub it goes through, or -1; and the hub count.

    Producers are grouped by their whole successor set inside the call, in task order;
    hubs are numbered by their first producer."""
    ptr, succ = _csr(src, dst, n)
    groups: dict[tuple[int, ...], list[int]] = {}
    for j in np.flatnonzero(np.diff(ptr) > 0).tolist():
        groups.setdefault(tuple(succ[ptr[j]:ptr[j + 1]]), []).append(j)
    hub = np.full(src.size, -1, np.int64)
    count = 0
    for succs, preds in groups.items():
        p, s = len(preds), len(succs)
        if p * s - p - s > HUB_MIN_SAVED_EDGES:
            for j in preds:
                hub[ptr[j]:ptr[j + 1]] = count
            count += 1
    return hub, count


def encode_call_edges(edge_src: np.ndarray, edge_dst: np.ndarray,
                      task_call: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runtime's edges: (src, dst, hub) with redundant edges inside a call dropped and
    ``hub`` the program-wide hub each edge goes through (-1: resolved directly).

    Calls with the same local graph (the iterations of one root function, mostly) are
    encoded once."""
    if edge_src.size == 0:
        return edge_src, edge_dst, np.zeros(0, np.int64)
    call_s, call_d = task_call[edge_src], task_call[edge_dst]
    inside = np.flatnonzero(call_s == call_d)
    keep = np.ones(edge_src.size, bool)
    hub = np.full(edge_src.size, -1, np.int64)
    if inside.size:
        first_task = np.searchsorted(task_call, np.arange(int(task_call[-1]) + 2))
        calls = call_s[inside]
        bounds = np.flatnonzero(np.diff(calls)) + 1
        memo: dict[bytes, tuple[np.ndarray, np.ndarray, int]] = {}
        hubs = 0
        for rows in np.split(inside, bounds):
            c = int(call_s[rows[0]])
            base = first_task[c]
            s, d = edge_src[rows] - base, edge_dst[rows] - base
            key = s.tobytes() + b"|" + d.tobytes()
            if key not in memo:
                n = int(first_task[c + 1] - base)
                drop = _redundant(s, d, n)
                local, count = _hubs(s[~drop], d[~drop], n)
                memo[key] = (drop, local, count)
            drop, local, count = memo[key]
            keep[rows[drop]] = False
            kept = rows[~drop]
            hub[kept] = np.where(local >= 0, local + hubs, -1)
            hubs += count
    return edge_src[keep], edge_dst[keep], hub[keep]


def end_hubs(edge_src: np.ndarray, edge_dst: np.ndarray, task_call: np.ndarray,
             first_hub: int) -> tuple[np.ndarray, np.ndarray]:
    """(tail_task, tail_hub): the tasks no task of their own call waits for, in calls with
    at least END_HUB_MIN_TASKS of them, and the end hub each resolves when it ends,
    numbered from ``first_hub`` in call order."""
    n = task_call.size
    inside = task_call[edge_src] == task_call[edge_dst]
    waited_for = np.zeros(n, bool)
    waited_for[edge_src[inside]] = True
    tails = np.flatnonzero(~waited_for)
    calls = int(task_call[-1]) + 1 if n else 0
    per_call = np.bincount(task_call[tails], minlength=calls)
    tails = tails[per_call[task_call[tails]] >= END_HUB_MIN_TASKS]
    with_hub = per_call >= END_HUB_MIN_TASKS
    hub_of_call = np.cumsum(with_hub) - 1 + first_hub
    return tails.astype(np.int64), hub_of_call[task_call[tails]].astype(np.int64)
