"""The chip's shared L2: which of a task's GM reads it serves, and what it keeps.

L2 is tracked by tensor region (the compiler cuts every GM tensor into regions
and lists, per leaf task, the regions it reads and writes).  The cache keeps,
per region, how many of its bytes have been loaded or written so far, and
forgets least recently used regions once that total passes its capacity.

The rules a task's accesses follow, in the order the task lists them:

- a read hits only a region that is complete (its filled bytes reached the
  region's size), so tiles that merely share a region with data read earlier
  still come from HBM;
- a read that misses loads its bytes into the region, a write fills the region
  the same way, so written data stays for its consumers until evicted;
- touching a region, hit or miss, makes it the most recently used;
- a bypassed access (set_cache_policy) is served from HBM and not kept; a
  bypassed write drops what L2 held of its region.

The engine creates one ``L2Cache`` per run and asks it once per leaf task, as
the task starts; a different L2 model needs only the same ``access`` method.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskRegions:
    """Every leaf task's L2 region accesses, one column per field, grouped by task.

    Task ``t``'s accesses are rows ``ptr[t]`` to ``ptr[t + 1]``, reads before
    writes.  Plain lists, because the engine reads them one row at a time.
    """
    ptr: list[int]
    region: list[int]         # (buffer << 40) + region index
    nbytes: list[float]       # bytes the access moves
    region_bytes: list[float] # size of its region (smaller at a tensor's end)
    write: list[bool]
    bypass: list[bool]


class L2Cache:
    """Capacity-limited L2 with LRU eviction, tracked by region.

    ``access(task)`` applies a task's accesses and returns
    ``(hit_bytes, miss_bytes)``: bytes the task reads from L2 and from HBM.
    Writes count in neither; they only fill.
    """

    def __init__(self, capacity: float, accesses: TaskRegions):
        self.capacity = capacity
        self.accesses = accesses
        self.filled: OrderedDict[int, float] = OrderedDict()   # region -> bytes held, LRU first
        self.used = 0.0

    def access(self, task: int) -> tuple[float, float]:
        acc = self.accesses
        regions, sizes, full, writes, bypass = acc.region, acc.nbytes, acc.region_bytes, \
            acc.write, acc.bypass
        filled_by_region = self.filled
        hit = miss = 0.0
        # runs once per access of every task: columns and dict methods bound to locals
        # instead of looked up per access, ``used`` kept in a local until the end
        get, move_to_end = filled_by_region.get, filled_by_region.move_to_end
        used = self.used
        for a in range(acc.ptr[task], acc.ptr[task + 1]):
            region, size, write = regions[a], sizes[a], writes[a]
            filled = get(region)
            if filled is not None:
                move_to_end(region)
                if not write and filled >= full[a]:
                    hit += size
                    continue
            if not write:
                miss += size
            if bypass[a]:
                if filled is not None and write:
                    used -= filled_by_region.pop(region)
                continue
            before = filled or 0.0
            grown = before + size
            if grown > full[a]:      # min() without the builtin call
                grown = full[a]
            filled_by_region[region] = grown
            used += grown - before
            if used > self.capacity:
                used = self._evict(used)
        self.used = used
        return hit, miss

    def _evict(self, used: float) -> float:
        """Drop least recently used regions until the cache fits again."""
        filled_by_region = self.filled
        while used > self.capacity and filled_by_region:
            _, size = filled_by_region.popitem(last=False)
            used -= size
        return used
