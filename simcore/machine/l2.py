"""The chip's shared L2: which of a task's GM reads it serves, and what it keeps.

L2 holds data by cache line (``L2_LINE_BYTES``, 512 B on A2/A3, docs/sources.md §3).
The compiler cuts every GM tensor into regions of a few dozen lines and lists, per
leaf task, the regions its boxes touch together with a bitmap of the lines they
touch there (a column tile of a row-major matrix touches a few lines in each of
many regions).  The cache keeps, per region, the bitmap of lines it holds, and
evicts whole regions, least recently used first, once the lines it holds exceed
its capacity.  Counting lines rather than bytes makes the capacity exact while the
bookkeeping stays one dict entry per region: a lookup is an AND of two Python ints.

The rules a task's accesses follow, in the order the task lists them (reads first):

- a read hits the lines L2 holds: its bytes split between hit and miss by the share
  of its lines that are held, so a second core loading a column tile the first one
  just loaded hits, whatever regions the tile shares with other tiles;
- the lines a read misses come whole from HBM and stay: the miss counts a line's
  bytes for each (more than the box asked for when it covers lines only in part,
  e.g. a 128 B-wide column tile), and a neighbour reading the rest of such a line
  hits; a write allocates its lines the same way
  (write-allocate, docs/sources.md §3), so written data stays for its consumers
  and competes for room with the inputs;
- touching a region, hit or miss, makes it the most recently used;
- a bypassed access (set_cache_policy) is served from HBM and not kept; a bypassed
  write drops the lines it overwrites.

The engine creates one ``L2Cache`` per run and asks it once per leaf task, as the
task starts; a different L2 model needs only the same ``access`` method.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ..compiler.program import L2_LINE_BYTES


@dataclass(frozen=True)
class TaskRegions:
    """Every leaf task's L2 region accesses, one column per field, grouped by task.

    Task ``t``'s accesses are rows ``ptr[t]`` to ``ptr[t + 1]``, reads before
    writes.  Plain lists, because the engine reads them one row at a time.
    """
    ptr: list[int]
    region: list[int]         # region key (buffer and region index)
    nbytes: list[float]       # bytes the access moves inside the region
    lines: list[int]          # bitmap of the region's lines it touches (bit i: line i)
    nlines: list[int]         # how many bits ``lines`` has set
    write: list[bool]
    bypass: list[bool]
    line_bytes: int = L2_LINE_BYTES   # what one bit of ``lines`` stands for


class L2Cache:
    """Capacity-limited L2 with LRU eviction by region, filled and counted by line.

    ``access(task)`` applies a task's accesses and returns
    ``(hit_bytes, miss_bytes)``: bytes the task reads from L2 and bytes HBM delivers
    for it (whole lines, so at least the bytes it misses).  Writes count in neither;
    they only fill.
    """

    def __init__(self, capacity: float, accesses: TaskRegions):
        self.capacity = capacity
        self.capacity_lines = int(capacity // accesses.line_bytes)
        self.accesses = accesses
        self.held: OrderedDict[int, int] = OrderedDict()   # region -> line bitmap, LRU first
        self.used_lines = 0

    @property
    def used(self) -> float:
        """Bytes of the lines L2 holds."""
        return float(self.used_lines * self.accesses.line_bytes)

    def access(self, task: int) -> tuple[float, float]:
        acc = self.accesses
        regions, sizes, masks, counts, writes, bypass = acc.region, acc.nbytes, acc.lines, \
            acc.nlines, acc.write, acc.bypass
        held_by_region = self.held
        hit = miss = 0.0
        # runs once per access of every task: columns and dict methods bound to locals
        # instead of looked up per access, ``used`` kept in a local until the end
        get, move_to_end = held_by_region.get, held_by_region.move_to_end
        used, cap, line = self.used_lines, self.capacity_lines, acc.line_bytes
        for a in range(acc.ptr[task], acc.ptr[task + 1]):
            region, mask = regions[a], masks[a]
            held = get(region)
            if held is None:
                if not writes[a]:
                    # a miss brings whole lines from HBM, more than asked when the box
                    # covers a line only in part
                    miss += counts[a] * line if counts[a] * line > sizes[a] else sizes[a]
                if bypass[a]:
                    continue
                held_by_region[region] = mask
                used += counts[a]
            else:
                move_to_end(region)
                new = mask & ~held
                if not writes[a]:
                    if not new:
                        hit += sizes[a]
                        continue
                    # the access's bytes taken as spread evenly over its lines
                    fresh = new.bit_count()
                    hit += sizes[a] * (counts[a] - fresh) / counts[a]
                    missed = sizes[a] * fresh / counts[a]
                    miss += fresh * line if fresh * line > missed else missed
                    if bypass[a]:
                        continue
                elif bypass[a]:
                    kept = held & ~mask
                    used -= (held & mask).bit_count()
                    if kept:
                        held_by_region[region] = kept
                    else:
                        del held_by_region[region]
                    continue
                if not new:
                    continue
                held_by_region[region] = held | new
                used += new.bit_count()
            if used > cap:
                used = self._evict(used)
        self.used_lines = used
        return hit, miss

    def _evict(self, used: int) -> int:
        """Drop least recently used regions until the cache fits again."""
        held_by_region = self.held
        cap = self.capacity_lines
        while used > cap and held_by_region:
            _, mask = held_by_region.popitem(last=False)
            used -= mask.bit_count()
        return used
