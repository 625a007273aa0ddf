"""The chip's shared L2: which of a task's GM reads it serves, and what it keeps.

L2 holds data by cache line (``L2_LINE_BYTES``, 512 B on A2/A3, docs/sources.md §3).
The compiler cuts every GM tensor into regions of a few dozen lines and lists, per
leaf task, the regions its boxes touch together with a bitmap of the lines they
touch there (a column tile of a row-major matrix touches a few lines in each of
many regions).  The cache keeps, per region, the bitmap of lines it holds, and
evicts whole regions once the lines it holds exceed its capacity: the least recently
used first (``lru``), or one drawn at random among those held (``random``).  Counting
lines rather than bytes makes the capacity exact while the bookkeeping stays one slot per
region: a lookup is an AND of two 64-bit bitmaps, and the recency order a list linked
through per-region arrays (no object per access, so the same code compiles to plain C,
l2.pxd).

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
- touching a region, hit or miss, makes it the most recently used (``lru``; ``random``
  keeps no recency: a victim is drawn from a fixed-seed generator, so a run is
  reproducible);
- a bypassed access (set_cache_policy) is served from HBM and not kept; a bypassed
  write drops the lines it overwrites.

The engine creates one ``L2Cache`` per run and asks it once per leaf task, as the
task starts; a different L2 model needs only the same ``access`` method.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compiler.program import L2_LINE_BYTES

try:
    import cython
except ImportError:         # Cython is needed only to build the compiled engine
    from types import SimpleNamespace
    cython = SimpleNamespace(compiled=False)


@dataclass(frozen=True)
class TaskRegions:
    """Every leaf task's L2 region accesses, one column per field, grouped by task.

    Task ``t``'s accesses are rows ``ptr[t]`` to ``ptr[t + 1]``, reads before
    writes.  Lists or numpy arrays; a region key is any int (the engine numbers
    them densely).
    """
    ptr: list[int]
    region: list[int]         # region key (buffer and region index)
    nbytes: list[float]       # bytes the access moves inside the region
    lines: list[int]          # bitmap of the region's lines it touches (bit i: line i, < 64)
    nlines: list[int]         # how many bits ``lines`` has set
    write: list[bool]
    bypass: list[bool]
    line_bytes: int = L2_LINE_BYTES   # what one bit of ``lines`` stands for


def region_slots(keys) -> np.ndarray:
    """Region keys as small non-negative slots with the same equalities, so the cache can
    keep its regions in arrays: small keys stay as they are, the compiler's
    ``(buffer << 40) + index`` keys become ``buffer * span + index`` (linear), anything
    else is numbered in sorted order."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    limit = 4 * keys.size + 1024           # slots a cache may hold per access, at most
    if not keys.size or (keys.min() >= 0 and keys.max() < limit):
        return keys
    buf, idx = keys >> 40, keys & ((1 << 40) - 1)
    span = int(idx.max()) + 1
    if keys.min() >= 0 and (int(buf.max()) + 1) * span < limit:
        return buf * span + idx
    return np.unique(keys, return_inverse=True)[1].reshape(-1)


def _column(values, dtype):
    """A read-only column as ``access`` reads it: a Python list interpreted (fastest one
    item at a time), a typed array compiled."""
    if cython.compiled:
        return np.ascontiguousarray(values, dtype=dtype)
    return np.asarray(values, dtype=dtype).tolist()


def _bits(x: int) -> int:
    """How many lines a bitmap marks."""
    if cython.compiled:
        return __builtin_popcountll(x)
    return x.bit_count()


# the replacement policies ``L2Cache`` knows, by the name the hardware file gives
REPLACEMENT = ("lru", "random")


class L2Cache:
    """Capacity-limited L2 evicting by region, filled and counted by line.

    ``lru`` evicts the least recently touched region.  ``random`` evicts a region drawn
    uniformly among those held: where a scan's reuse distance exceeds the capacity, LRU
    evicts every line just before its reuse and hits nothing, while random eviction keeps
    a share of them and hits about as often as the capacity covers of the scan, which is
    how caches without true LRU (pseudo-random and tree-PLRU ones) behave on such scans.

    ``access(task)`` applies a task's accesses and returns
    ``(hit_bytes, miss_bytes)``: bytes the task reads from L2 and bytes HBM delivers
    for it (whole lines, so at least the bytes it misses).  Writes count in neither;
    they only fill.
    """

    def __init__(self, capacity: float, accesses: TaskRegions, replacement: str = "lru"):
        if replacement not in REPLACEMENT:
            raise ValueError(f"L2 replacement {replacement!r}: expected one of "
                             f"{', '.join(REPLACEMENT)}")
        self.random = replacement == "random"
        self.rng = 0x9E3779B97F4A7C15      # xorshift64 state: a fixed seed, reproducible
        self.capacity = capacity
        self.capacity_lines = int(capacity // accesses.line_bytes)
        self.accesses = accesses
        self.line_bytes = accesses.line_bytes
        region = region_slots(accesses.region)
        n = int(region.max()) + 1 if region.size else 0
        self.ptr = _column(accesses.ptr, np.int64)
        self.region = _column(region, np.int64)
        self.nbytes = _column(accesses.nbytes, np.float64)
        self.lines = _column(accesses.lines, np.uint64)
        self.nlines = _column(accesses.nlines, np.int64)
        self.write = _column(accesses.write, np.int8)
        self.bypass = _column(accesses.bypass, np.int8)
        # per region: whether L2 holds it and the bitmap of its lines held; the held
        # regions form a list, least recently used first, linked through ``after`` and
        # ``before`` with slot ``n`` as both its head and its tail
        # under ``random`` the held regions are instead ``order[:count]``, in no order,
        # and ``after[r]`` is region r's place there (a victim is swapped out with the last)
        if cython.compiled:
            self.present = np.zeros(n, np.int8)
            self.held = np.zeros(n, np.uint64)
            self.after = np.full(n + 1, n, np.int64)
            self.before = np.full(n + 1, n, np.int64)
            self.order = np.zeros(n if self.random else 0, np.int64)
        else:
            self.present, self.held = [False] * n, [0] * n
            self.after, self.before = [n] * (n + 1), [n] * (n + 1)
            self.order = [0] * (n if self.random else 0)
        self.end = n
        self.count = 0
        self.used_lines = 0

    @property
    def used(self) -> float:
        """Bytes of the lines L2 holds."""
        return float(self.used_lines * self.line_bytes)

    def access(self, task: int) -> tuple[float, float]:
        # the columns are read through self, not taken into locals: compiled, a typed-array
        # local costs an atomic reference count when taken and again when dropped (twenty
        # per call for these ten), more than the lookups themselves
        end = self.end
        hit = miss = 0.0
        # ``used`` kept in a local until the end: this runs once per access of every task
        used, cap, line = self.used_lines, self.capacity_lines, self.line_bytes
        for a in range(self.ptr[task], self.ptr[task + 1]):
            region, mask = self.region[a], self.lines[a]
            size, count = self.nbytes[a], self.nlines[a]
            if not self.present[region]:
                if not self.write[a]:
                    # a miss brings whole lines from HBM, more than asked when the box
                    # covers a line only in part
                    miss += count * line if count * line > size else size
                if self.bypass[a]:
                    continue
                self.present[region] = True
                self.held[region] = mask
                used += count
                if self.random:
                    self.order[self.count] = region
                    self.after[region] = self.count
                    self.count += 1
                else:
                    # the newest: linked in before the tail
                    last = self.before[end]
                    self.after[last], self.before[region] = region, last
                    self.after[region], self.before[end] = end, region
            else:
                held = self.held[region]
                if not self.random and self.after[region] != end:
                    # not the newest yet: unlink, relink last
                    prev, nxt = self.before[region], self.after[region]
                    self.after[prev], self.before[nxt] = nxt, prev
                    last = self.before[end]
                    self.after[last], self.before[region] = region, last
                    self.after[region], self.before[end] = end, region
                new = mask & ~held
                if not self.write[a]:
                    if not new:
                        hit += size
                        continue
                    # the access's bytes taken as spread evenly over its lines
                    fresh = _bits(new)
                    hit += size * (count - fresh) / count
                    missed = size * fresh / count
                    miss += fresh * line if fresh * line > missed else missed
                    if self.bypass[a]:
                        continue
                elif self.bypass[a]:
                    kept = held & ~mask
                    used -= _bits(held & mask)
                    self.held[region] = kept
                    if not kept:                # nothing left of it: unlinked
                        self._unlink(region)
                    continue
                if not new:
                    continue
                self.held[region] = held | new
                used += _bits(new)
            if used > cap:
                used = self._evict(used)
        self.used_lines = used
        return hit, miss

    def _evict(self, used: int) -> int:
        """Drop regions, the least recently used or one drawn at random each time, until
        the cache fits again."""
        end, cap = self.end, self.capacity_lines
        while used > cap:
            if self.random:
                if self.count == 0:
                    break
                victim = self.order[self._draw() % self.count]
            else:
                if self.after[end] == end:
                    break
                victim = self.after[end]
            used -= _bits(self.held[victim])
            self.held[victim] = 0
            self._unlink(victim)
        return used

    def _unlink(self, region: int) -> None:
        """Take a region out of the held ones (its lines already uncounted)."""
        self.present[region] = False
        if self.random:
            place = self.after[region]
            self.count -= 1
            last = self.order[self.count]
            self.order[place] = last
            self.after[last] = place
        else:
            prev, nxt = self.before[region], self.after[region]
            self.after[prev], self.before[nxt] = nxt, prev

    def _draw(self) -> int:
        """The next number of a xorshift64 generator (Marsaglia 2003)."""
        x = self.rng
        x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 7
        x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
        self.rng = x
        return x >> 1
