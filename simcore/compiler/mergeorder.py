"""Breadth merge without waiting on itself: which tasks may share a merged task, and
the order the merged tasks run in.

Breadth merge (merge.py) puts isomorphic leaf tasks of a root call together, N at a time
in task order.  Isomorphic tasks can depend on each other: a chain that alternates a
matmul and a small vector op (upstream's power-series inverse, ``A^(k+1) = (A^k @ A) +
0``) has a vector task per step, all of one leaf function.  Merged, the first step's task
would also hold the later steps, which wait for the matmuls that wait for it: a cycle.
Upstream's NBufferMerge checks the merged subgraph graph for one and stops the compile
(``ColorTopo``: "has cycle in graph; Please check and adjust the merge method",
framework/src/passes/tile_graph_pass/graph_partition/n_buffer_merge.cpp at 08cec41e4).
Its default grouping merges subgraphs that read the same producer (``SortColorWithInput``),
which keeps a chain's steps apart; its multi-input/output mode (``{-2: 1}``, and at HEAD
883e7dfb any DEFAULT or function key) merges in topological order, as ptolab does, and a
chain then stops the compile.

Here a task joins a merged task only if it waits on none of its members, directly or
through other tasks; otherwise it starts another.  The merged tasks then run in an order
that respects every dependency (a member may wait on a task that comes after the first
member in task order), and merged tasks that still wait on each other (a member of each
waiting on a member of the other) run unmerged.
"""
from __future__ import annotations

import heapq

import numpy as np

from .deps import region_edges
from .merge import merged_index


class Ancestry:
    """Which tasks of one call each task waits on, directly or not, before merging."""

    def __init__(self, acc, n_tasks: int):
        """``src``/``dst``: the edges data flows along (what a task reads from or feeds);
        ``mask`` also counts a read's wait for the write after it, which a merge must
        not turn round either."""
        if acc.size:
            src, dst, anti = region_edges(acc.task, acc.buffer, acc.lo, acc.hi,
                                          acc.write.astype(bool), acc.tag, n_tasks,
                                          acc.buffers, kinds=True)
        else:
            src = dst = np.zeros(0, np.int64)
            anti = np.zeros(0, bool)
        self.all_src, self.all_dst = src, dst
        self.src, self.dst = src[~anti], dst[~anti]
        self.n_tasks = n_tasks
        self._mask: list[int] | None = None

    @property
    def mask(self) -> list[int]:
        """Per task, a bit for every task it waits on (Python ints), built when first asked:
        the automatic merge needs only the edges when it ends up merging nothing."""
        if self._mask is None:
            preds: list[list[int]] = [[] for _ in range(self.n_tasks)]
            for s, d in zip(self.all_src.tolist(), self.all_dst.tolist()):
                preds[d].append(s)
            # edges run forward in task order
            mask = [0] * self.n_tasks
            for d in range(self.n_tasks):
                m = 0
                for s in preds[d]:
                    m |= mask[s] | (1 << s)
                mask[d] = m
            self._mask = mask
        return self._mask


def split_dependent(sub: np.ndarray, idx: np.ndarray, ancestry: Ancestry) -> np.ndarray:
    """``sub`` (a merged-task number per task ``idx``, in task order) with every task that
    waits on a member of its merged task moved to the first one of the same number's
    tasks it does not wait on, or to a new one."""
    out = sub.copy()
    fresh = int(sub.max()) + 1 if sub.size else 0
    parts: dict[int, list[list[int]]] = {}      # number: [[members' mask, new number]]
    for k, (task, number) in enumerate(zip(idx.tolist(), sub.tolist())):
        waits = ancestry.mask[task]
        for part in parts.setdefault(number, []):
            if not waits & part[0]:
                part[0] |= 1 << task
                out[k] = part[1]
                break
        else:
            new = number if not parts[number] else fresh
            fresh += new == fresh
            parts[number].append([1 << task, new])
            out[k] = new
    return out


def merged_order(group: np.ndarray, ancestry: Ancestry | None):
    """(group, new task index per task): every merged task after those it waits on,
    otherwise in order of first appearance.  Merged tasks left waiting on each other in a
    cycle (a member of each waits on a member of the other) are taken apart, as many times
    as it takes: where upstream stops the compile, ptolab runs those tasks unmerged."""
    group = group.copy()
    while True:
        order, stuck = _topological(group, ancestry)
        if order is not None:
            return group, order
        # the call's own tasks form no cycle, so one is always through a merged task
        assert stuck.size, "a cycle through no merged task"
        group[stuck] = int(group.max()) + 1 + np.arange(stuck.size)


def _topological(group: np.ndarray, ancestry: Ancestry | None):
    """(new task index per task, None), or (None, the tasks of merged groups on a cycle)."""
    ranked = merged_index(group)        # each task's group, numbered by first appearance
    if ancestry is None or ancestry.all_src.size == 0:
        return ranked, None
    # a read's wait for the write after it orders merged tasks as data does
    gs, gd = ranked[ancestry.all_src], ranked[ancestry.all_dst]
    keep = gs != gd
    gs, gd = gs[keep], gd[keep]
    if np.all(gs < gd):
        return ranked, None
    n = int(ranked.max()) + 1
    pairs = set(zip(gs.tolist(), gd.tolist()))
    forward = _kahn(n, pairs)
    if forward[1].size == 0:
        return forward[0][ranked], None
    # on a cycle: stuck both ways (reaches a cycle and is reached from one)
    backward = _kahn(n, {(d, s) for s, d in pairs})
    on_cycle = np.intersect1d(forward[1], backward[1])
    merged = on_cycle[np.bincount(ranked, minlength=n)[on_cycle] > 1]
    return None, np.flatnonzero(np.isin(ranked, merged))


def _kahn(n: int, pairs):
    """(place per node in a topological order, ties by node number; the nodes never
    placed)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    indegree = np.zeros(n, np.int64)
    for s, d in pairs:
        succ[s].append(d)
        indegree[d] += 1
    ready = [g for g in range(n) if indegree[g] == 0]
    heapq.heapify(ready)
    place = np.full(n, -1, np.int64)
    placed = 0
    while ready:
        g = heapq.heappop(ready)
        place[g] = placed
        placed += 1
        for d in succ[g]:
            indegree[d] -= 1
            if indegree[d] == 0:
                heapq.heappush(ready, d)
    return place, np.flatnonzero(place < 0)


def auto_vec_merge_count(tasks: int, parallel_lb: int) -> int:
    """Tasks a merged task takes where upstream computes the count (``GetIsoColorMergeNum``
    in n_buffer_merge.cpp at 08cec41e4): a group of isomorphic tasks no larger than
    ``mg_vec_parallel_lb`` stays unmerged; a larger one merges as many as keeps it on at
    least that many cores."""
    if parallel_lb <= 0 or tasks <= parallel_lb:
        return 1
    n = -(-tasks // parallel_lb)
    while n > 1 and -(-tasks // n) < parallel_lb:
        n -= 1
    return n


def sibling_groups(idx: np.ndarray, ancestry: Ancestry) -> list[list[int]]:
    """The tasks ``idx`` (one leaf function's, in task order) as upstream's automatic
    vecNBuffer groups them before merging (``SortColorWithInput`` and
    ``BuildColorDependencySummary`` in n_buffer_merge.cpp at 883e7dfb): by the first task
    (lowest number) each reads from within the call, or by the first one it feeds,
    whichever gives fewer groups; a task with no producer (or no consumer) is a group of
    its own.  Groups come in the order of their key, the ones of no producer first (the
    last such task first, as upstream numbers them down from -1), then by producer.  (At
    08cec41e4 every producer keys a group and a task joins the first that names it: the
    same groups, but the count that picks producers or consumers can differ.)
    Positions into ``idx``, not task numbers."""
    tasks = idx.tolist()
    members = set(tasks)
    first_producer: dict[int, int] = {}
    first_consumer: dict[int, int] = {}
    for s, d in zip(ancestry.src.tolist(), ancestry.dst.tolist()):
        if d in members:
            first_producer[d] = min(s, first_producer.get(d, s))
        if s in members:
            first_consumer[s] = min(d, first_consumer.get(s, d))

    def keyed(first: dict[int, int]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        alone = -1
        for pos, task in enumerate(tasks):
            if task in first:
                groups.setdefault(first[task], []).append(pos)
            else:
                groups[alone] = [pos]
                alone -= 1
        return groups

    by_in, by_out = keyed(first_producer), keyed(first_consumer)
    chosen = by_in if len(by_in) <= len(by_out) else by_out
    return [chosen[key] for key in sorted(chosen)]


def sibling_merge(groups: list[list[int]], size: int, count: int) -> np.ndarray:
    """A merged-task number per position: each group's members ``count`` at a time, in
    the group's order (upstream's ``MergePingPong``)."""
    sub = np.zeros(size, np.int64)
    number = -1
    for members in groups:
        for k, pos in enumerate(members):
            if k % count == 0:
                number += 1
            sub[pos] = number
    return sub
