"""The modeled NPU's discrete-event loop: AICPU control and schedule threads, cores.

The control thread builds dev tasks one after another, ahead of execution; a
bigger dev task takes longer to build.  A dev task is a synchronisation point:
its leaf tasks start once it is built and the previous dev task has finished
and been handed over.  Inside a dev task the schedule threads send ready leaf
tasks to cores of the right type (each thread owns a slice of the cores and
pays per send), notice completions and resolve successor edges (paying per
edge: an atomic decrement of the successor's count, or only a read of it for the
edge from its last predecessor).  A thread notices completions in passes over its
cores of one type: a pass reads their finish registers once and handles every core
it finds finished, so the completion check is paid per pass; a core that ends
after the pass began waits for the next one.  As upstream's runtime (framework/src/machine/device/dynamic/
aicore_manager.h), a core has a running slot and a pending slot: a thread may
pre-load one task into a busy core, paying the send while the core works, and
the core starts it the moment its running task ends.  Queued tasks go to idle
cores first, then to free pending slots.

``device_sched_mode`` decides where a newly ready task goes.  0: the resolving
thread first sends from the shared queue's head to the cores it just freed,
then gives the newly ready tasks, most recent first, to its own idle cores and
pushes the rest onto the queue's tail, where they arrive ``ready_handoff_us``
later (the runtime batches ready ids).  1 (L2 affinity): each newly ready task
goes straight to the thread's most recently freed idle core (its producer's,
when that came free), else into a free pending slot of one of its cores, so the
consumer runs while the producer's output is still in L2; the shared queue is
popped from its tail after the first batch.  2 is 0 and 3 is 1 with the load
balanced round the threads at an extra cost per send; 3 also refuses a pending
slot while another thread has an idle core.

A task's MTE2 phase is a latency (the GM round trip, bursts, L2 hits) and then
its HBM bytes, drained at a rate that changes while it loads: the chip's HBM is
water-filled over the loaders active at each moment, each held to its core
type's cap, and every loader is re-priced when one joins or leaves.  The cap holds
the bytes the task asked for; HBM carries the whole 512 B lines it fetched for them, so
a column tile's line padding costs HBM bandwidth but not the core's own rate.  A task's
writes leave through the same HBM: a loader's HBM bytes include them, so reads and
writes together never exceed the chip's bandwidth (a task that reads nothing from HBM
writes at its share of HBM after its pipes).  The other
pipes compose around that phase as before (serially, or overlapped when tiles
are in flight).

How the code is laid out:

- ``prepare`` reads the Program and the Hardware once per ``Machine`` into a
  ``Plan``: per-task numpy columns (successors, core types, static pipe times,
  L2 region accesses), the build times of the dev tasks, the AICPU costs.  It
  is the only place that reads Program fields; no run changes a Plan.
- ``Machine.run`` creates a fresh ``Run`` (idle threads, an empty L2, every
  edge unresolved) and returns its Timeline, so running a Machine twice gives
  the same Timeline twice and no run touches an earlier one's results.
- A ``Run`` is a small event engine.  Events sit on a heap ordered by
  ``(time, sequence number)``, so ties break by arrival order and the same
  input always gives the same timeline.  Six kinds: a task is done
  (``on_task_done``), its owner thread, busy when the core ended it, gets round
  to it (``on_notice``), a task reaches the shared queue (``on_task_ready``), a
  loader starts draining HBM bytes (``on_join``), the first loader of a
  core type has drained them (``on_drained``) and a cold core starts the first
  task it was sent (``start_work``).  Loaders of one core type get
  the same rate, so each keeps the byte count its type must reach for it to
  be done, and only the earliest of them has an event in flight; re-pricing
  bumps a version that makes the old event stale (skipped when popped), so a
  change costs O(log loaders).  After a noticed completion or a queue arrival
  ``dispatch`` sends queued tasks to idle cores and pending slots.
- This file is also the compiled engine: setup.py builds it (with l2.py and costs.py)
  by Cython in pure-Python mode, and engine.pxd beside it declares the classes, their
  typed attributes and the C types of the hot methods' locals.  The source stays plain
  Python and runs as such as the reference (simcore/machine/reference.py); the two agree
  bit for bit (tests/test_engine_compiled.py).  So the loop keeps to what types well:
  integer and float columns indexed one item at a time, no closures or generators, and
  state in flat arrays (``_column``/``_buffer`` give lists to the interpreter, typed
  arrays to compiled code; ``Heap`` and ``TaskQueue`` are the only containers whose two
  forms differ).  An attribute of ``Cores`` or ``Run`` that engine.pxd does not declare
  still works, at Python speed; a declared method whose signature changes here must
  change there too, or the build fails (and the Python engine runs, with a warning).
"""
from __future__ import annotations

from heapq import heappop, heappush
from collections import deque
from dataclasses import dataclass

import numpy as np

try:
    import cython
except ImportError:         # Cython is needed only to build the compiled engine
    from types import SimpleNamespace
    cython = SimpleNamespace(compiled=False)

from ..compiler.program import CoreType, Program
from ..spec.hardware import Aicpu, Hardware
from ..spec.options import RuntimeOptions
from .costs import Mte2Model, busiest_pipe_us, static_pipe_us
from .l2 import L2Cache, TaskRegions, region_slots
from .timeline import SchedThread, Timeline

# plain ints, not enum members: the hot loop indexes lists with them (and loops over
# range(2) for both, AIV first)
AIV, AIC = int(CoreType.AIV), int(CoreType.AIC)
assert (AIV, AIC) == (0, 1)

# event kinds: a task ends, a task reaches the ready queue, a loader starts draining HBM
# bytes, the first loader of a core type has drained them (if not re-priced since), a
# busy schedule thread gets round to a completion its core signalled earlier, a cold
# core starts the first task it was sent
_DONE, _READY, _JOIN, _DRAIN, _NOTICE, _START = 0, 1, 2, 3, 4, 5
_CORE_BEGIN = 0.005      # when the cores' own records start, us after the launch
_SCHED_ALLOC = 0.01      # when a schedule thread has allocated its state


# -- the one source, interpreted or compiled -------------------------------------------
# This file runs as plain Python (the reference) and, compiled by Cython with engine.pxd
# beside it, as the fast path; both give identical Timelines (tests/test_engine_compiled.py).
# The few places where the two differ only pick containers: the interpreter reads Python
# lists fastest, compiled code typed arrays.
def _column(values: np.ndarray, dtype) -> list | np.ndarray:
    """A read-only per-task column as the hot loop reads it."""
    if cython.compiled:
        return np.ascontiguousarray(values, dtype=dtype)
    return np.asarray(values, dtype=dtype).tolist()


def _buffer(values, dtype) -> list | np.ndarray:
    """A column the run changes: its own copy."""
    if cython.compiled:
        return np.array(values, dtype=dtype)
    return np.asarray(values, dtype=dtype).tolist()


class Heap:
    """Entries ``(key, seq, a, b, c)`` popped in ``(key, seq)`` order, ``seq`` counting the
    pushes: ties break by arrival, so the order is the same however the heap is laid out.

    Interpreted it is a ``heapq`` list of tuples; compiled, parallel typed arrays sifted
    in place, which keeps a Python tuple per entry out of the loop.
    """

    def __init__(self):
        self.n = 0
        self.seq = 0
        self.items = []
        self.cap = 0
        if cython.compiled:
            self._grow()

    def _grow(self) -> None:
        cap = 2 * self.cap if self.cap else 64
        key, order = np.empty(cap), np.empty(cap, np.int64)
        a, b, c = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
        n = self.n
        if n:
            key[:n], order[:n] = self.key[:n], self.order[:n]
            a[:n], b[:n], c[:n] = self.a[:n], self.b[:n], self.c[:n]
        self.key, self.order, self.a, self.b, self.c = key, order, a, b, c
        self.cap = cap

    def push(self, key: float, a: int, b: int, c: int) -> None:
        seq = self.seq
        self.seq = seq + 1
        if not cython.compiled:
            heappush(self.items, (key, seq, a, b, c))
            self.n += 1
            return
        if self.n == self.cap:
            self._grow()
        i = self.n
        self.n = i + 1
        self._rise(i, key, seq, a, b, c)

    def _rise(self, i: int, key: float, seq: int, a: int, b: int, c: int) -> None:
        """Put the entry in hole ``i`` or above it, moving the parents it precedes down.
        The arrays are read through self: a typed-array local costs compiled code an atomic
        reference count when taken and when dropped, more than the sift itself."""
        while i > 0:
            up = (i - 1) >> 1
            k = self.key[up]
            if k < key or (k == key and self.order[up] < seq):
                break
            self.key[i], self.order[i] = k, self.order[up]
            self.a[i], self.b[i], self.c[i] = self.a[up], self.b[up], self.c[up]
            i = up
        self.key[i], self.order[i], self.a[i], self.b[i], self.c[i] = key, seq, a, b, c

    def pop(self) -> tuple[float, int, int, int, int]:
        """The first entry (one must exist), removed."""
        if not cython.compiled:
            self.n -= 1
            return heappop(self.items)
        top = (self.key[0], self.order[0], self.a[0], self.b[0], self.c[0])
        n = self.n - 1
        self.n = n
        if n:
            # the last entry takes the root's place, as heapq does it: the hole at the root
            # sinks to a leaf along the smaller children, then the last entry rises from
            # there (it belongs near the bottom).  Which child is smaller is a coin toss
            # that the processor would mispredict as a branch, so it is computed as a
            # number: child + 1 when the right child exists and comes first.  (The right
            # child's index is at most n, and entry n, the one moving, is still in place.)
            key, seq = self.key[n], self.order[n]
            i, child = 0, 1
            while child < n:
                right = child + 1
                child += (right < n) & ((self.key[right] < self.key[child]) | (
                    (self.key[right] == self.key[child])
                    & (self.order[right] < self.order[child])))
                self.key[i], self.order[i] = self.key[child], self.order[child]
                self.a[i], self.b[i], self.c[i] = self.a[child], self.b[child], self.c[child]
                i = child
                child = 2 * i + 1
            self._rise(i, key, seq, self.a[n], self.b[n], self.c[n])   # the last entry
        return top

    def first_key(self) -> float:
        """The key of the first entry (one must exist)."""
        if not cython.compiled:
            return self.items[0][0]
        return self.key[0]


class TaskQueue:
    """Ready tasks of one core type, appended at the tail and taken from either end: what
    ``collections.deque`` does for the interpreted engine (``_task_queue``), as a typed
    array for the compiled one."""

    def __init__(self):
        self.head = self.tail = 0
        self.items = np.empty(64, np.int64)

    def __len__(self) -> int:
        return self.tail - self.head

    def append(self, task: int) -> None:
        if self.tail == len(self.items):
            items = np.asarray(self.items)
            n = self.tail - self.head
            if self.head == 0:
                items = np.concatenate([items, np.empty(len(items), np.int64)])
            else:
                items[:n] = items[self.head:self.tail].copy()
            self.items, self.head, self.tail = items, 0, n
        self.items[self.tail] = task
        self.tail += 1

    def pop(self) -> int:
        """The newest task (one must be queued)."""
        self.tail -= 1
        task = self.items[self.tail]
        if self.tail == self.head:
            self.head = self.tail = 0
        return task

    def popleft(self) -> int:
        """The oldest task (one must be queued)."""
        task = self.items[self.head]
        self.head += 1
        if self.tail == self.head:
            self.head = self.tail = 0
        return task


def _task_queue():
    return TaskQueue() if cython.compiled else deque()


# -- what a run needs, prepared once ---------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """Everything a run reads, prepared once per Machine and never changed by a run.

    Per-task columns are read-only numpy arrays; a Run reads them as Python lists when
    interpreted (one element at a time is several times faster on a list) and as typed
    views when compiled (no Python object per task).
    """
    aicpu: Aicpu
    n_aic: int
    n_aiv: int
    n_threads: int               # schedule threads
    direct_send: bool            # modes 1, 3: a readied consumer may go to its producer's core
    fair: bool                   # modes 2, 3: dispatches balanced across the threads
    dispatch_us: float           # per dispatch, fairness included
    head_us: float               # per leaf task on its core
    cold_us: np.ndarray          # per core: how much later its first task of the launch starts
    clock_mhz: float
    l2_bytes: float
    l2_replacement: str
    mte2: Mte2Model
    # the control thread
    ctrl_ready: float            # when it can start building
    build_end: np.ndarray        # per dev task: when it is built
    dev_task_tasks: np.ndarray   # per dev task: leaf tasks (for retiring it)
    # per dev task: the tasks with no predecessor inside it, in task order, are
    # first_ready[first_ready_ptr[k]:first_ready_ptr[k + 1]] (an array: a run turns one
    # dev task's slice into a list when it starts it, rather than the Plan holding a
    # Python int per task)
    first_ready: np.ndarray
    first_ready_ptr: list[int]
    # per leaf task
    core_type: np.ndarray
    # per node, a leaf task or (from leaf_tasks on) a hub the threads resolve on the spot
    succ_ptr: np.ndarray         # successors of t: succ[succ_ptr[t]:succ_ptr[t + 1]]
    succ: np.ndarray
    indegree: np.ndarray         # predecessors inside the dev task; a run counts down a copy
    loads: np.ndarray            # MTE2 copy-ins
    bursts: np.ndarray
    in_flight: np.ndarray        # tiles in flight: > 1 overlaps the pipes
    static_sum: np.ndarray       # us on every pipe but MTE2, summed
    static_max: np.ndarray       # and the longest of them
    read_bytes: np.ndarray       # GM bytes the task's reads ask for (before line rounding)
    write_bytes: np.ndarray
    write_pipe: np.ndarray       # us of the pipe the writes leave through (FIXP or MTE3)
    static_pipes: dict[str, np.ndarray]
    accesses: TaskRegions

    @property
    def dev_tasks(self) -> int:
        return len(self.first_ready_ptr) - 1

    @property
    def leaf_tasks(self) -> int:
        return len(self.core_type)


def prepare(hw: Hardware, program: Program, options: RuntimeOptions) -> Plan:
    """The one place that reads the Program: its columns become the Plan's lists."""
    p, a = program, hw.aicpu.scaled_actions()
    n = p.leaf_tasks
    fair = options.device_sched_mode in (2, 3)
    # the control thread builds once started and, unless the launch already holds them
    # on the host (ready_on_host_tensors), once it has fetched the values its control
    # flow reads
    waiting = set(p.control_inputs) - set(options.ready_on_host_tensors)
    ctrl_ready = a.init_us + (a.host_value_fetch_us if waiting else 0.0)
    dev = p.task_dev_task
    calls = np.bincount(p.call_dev_task, minlength=p.dev_tasks)
    tasks = np.bincount(dev, minlength=p.dev_tasks)
    build_cost = a.build_dev_task_us + a.build_per_root_call_us * calls \
        + a.build_per_leaf_task_us * tasks
    # successor edges inside a dev task; later dev tasks wait at the barrier anyway
    src, dst = _resolved_edges(p, dev)
    nodes = n + p.hubs
    indegree = np.bincount(dst, minlength=nodes)
    # tasks come in dev task order from the compiler; sort only if they do not
    order = np.arange(n) if n and bool((dev[1:] >= dev[:n - 1]).all()) \
        else np.argsort(dev, kind="stable")
    first_ready = order[indegree[order] == 0]
    pipes = static_pipe_us(hw, p)
    w = p.work
    i64, f64 = np.int64, np.float64
    plan = Plan(
        aicpu=a, n_aic=hw.cores.aic, n_aiv=hw.cores.aiv,
        n_threads=max(1, min(hw.sched_threads, options.launch_sched_aicpu_num)),
        direct_send=options.device_sched_mode in (1, 3), fair=fair,
        dispatch_us=a.dispatch_us + (a.fairness_us if fair else 0.0),
        head_us=hw.core.head_overhead_us, clock_mhz=hw.cores.clock_mhz,
        cold_us=hw.core.cold_start_us(hw.cores.aic + hw.cores.aiv),
        l2_bytes=hw.memory.l2_effective_bytes, l2_replacement=hw.memory.l2_replacement,
        mte2=Mte2Model(hw),
        ctrl_ready=ctrl_ready, build_end=ctrl_ready + np.cumsum(build_cost),
        dev_task_tasks=tasks,
        first_ready=first_ready,
        first_ready_ptr=np.searchsorted(dev[first_ready], np.arange(p.dev_tasks + 1)).tolist(),
        core_type=p.task_core.astype(i64),
        succ_ptr=np.concatenate([[0], np.cumsum(np.bincount(src, minlength=nodes))]).astype(i64),
        succ=dst.astype(i64), indegree=indegree.astype(i64),
        loads=w.mte2_loads.astype(f64), bursts=w.mte2_bursts.astype(f64),
        in_flight=w.in_flight.astype(f64),
        # every pipe but MTE2, which the engine prices
        static_sum=sum(pipes.values()) if n else np.zeros(0),
        static_max=busiest_pipe_us(pipes, w) if n else np.zeros(0),
        # writes leave through FIXP (Cube) or MTE3 (Vector) and share HBM with the loads
        read_bytes=np.bincount(p.regions.task[~p.regions.write],
                               weights=p.regions.bytes[~p.regions.write], minlength=n),
        write_bytes=p.task_write_bytes.astype(f64),
        write_pipe=np.maximum(pipes["fixp"], pipes["mte3"]),
        static_pipes=pipes, accesses=_region_accesses(p))
    for column in (plan.first_ready, plan.core_type, plan.succ_ptr, plan.succ, plan.indegree,
                   plan.loads, plan.bursts, plan.in_flight, plan.static_sum, plan.static_max,
                   plan.read_bytes, plan.write_bytes, plan.write_pipe, plan.cold_us):
        column.flags.writeable = False       # the Plan is shared by every run
    return plan


def _resolved_edges(p: Program, dev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges the schedule threads resolve inside each dev task, sorted by source: an
    edge through a hub becomes producer -> hub and hub -> consumer, hub ``h`` being node
    ``leaf_tasks + h``, and a task of a call with an end hub gains an edge to it
    (simcore/compiler/encode.py)."""
    same = dev[p.edge_src] == dev[p.edge_dst]
    src, dst = p.edge_src[same], p.edge_dst[same]
    if not p.hubs:
        return src, dst
    hub = p.edge_hub[same] if p.edge_hub.size else np.full(src.size, -1, np.int64)
    via, node = hub >= 0, p.leaf_tasks + hub
    width = p.leaf_tasks + p.hubs + 1
    # the direct edges and the end hubs' edges are distinct pairs already; only an edge
    # hub's producers and consumers repeat (one pair per edge it stands for)
    parts = [src[~via] * width + dst[~via], p.tail_task * width + p.leaf_tasks + p.tail_hub]
    if via.any():
        parts.append(np.unique(np.concatenate([src[via] * width + node[via],
                                               node[via] * width + dst[via]])))
    pairs = np.sort(np.concatenate(parts))
    return pairs // width, pairs % width


def _region_accesses(p: Program) -> TaskRegions:
    r = p.regions
    # per task, reads before writes, ties in the Program's order: one stable sort of
    # task * 2 + write (the order np.lexsort((write, task)) gives, in half the time)
    task = r.task.astype(np.int64)
    order = np.argsort(task * 2 + r.write, kind="stable")
    # (each column gathered by ``order`` is a new array: astype need not copy it again)
    lines = r.lines[order].astype(np.uint64, copy=False)
    region = region_slots(r.region)[order]
    # task t's rows start after the rows of the tasks before it
    ptr = np.zeros(p.leaf_tasks + 1, np.int64)
    np.cumsum(np.bincount(task, minlength=p.leaf_tasks), out=ptr[1:])
    return TaskRegions(
        ptr=ptr,
        region=region.astype(np.int64, copy=False),
        nbytes=r.bytes[order].astype(np.float64, copy=False),
        lines=lines, nlines=np.bitwise_count(lines).astype(np.int64),
        write=r.write[order].astype(np.int8), bypass=r.bypass[order].astype(np.int8))


# -- cores: idle, running, pending -----------------------------------------------------
class Cores:
    """What every core is doing, grouped as the runtime sees it (upstream
    ``framework/src/machine/device/dynamic/aicore_manager.h``): per schedule thread and
    core type, the idle cores ("run ready", the most recently freed on top) and the busy
    cores whose pending slot is free ("pend ready"); per core, the task pre-loaded into
    its pending slot, which the core starts by itself the moment its running task ends.

    Without ``fair`` a take goes to the thread that is free first (the threads poll in
    parallel, so the one not busy gets there first); with ``fair`` it goes round the
    threads (modes 2, 3).  Pend-ready cores are taken in the order their slots came free,
    as upstream walks them round from the last one it used.
    """

    def __init__(self, n_aic: int, n_aiv: int, n_threads: int, fair: bool):
        n = n_aic + n_aiv
        self.n, self.n_threads, self.fair, self.next_thread = n, n_threads, fair, 0
        # a thread's cores of one type form a group, ``th * 2 + core_type``; per group
        # ``n`` slots of flat arrays hold its idle cores (a stack, the most recently freed
        # on top) and its pend-ready queue (a ring)
        groups = 2 * n_threads
        self.idle = _buffer([0] * (groups * n), np.int64)
        self.idle_of = _buffer([0] * groups, np.int64)         # idle cores per group
        for core in reversed(range(n)):          # the lowest index on top
            g = (core % n_threads) * 2 + (AIC if core < n_aic else AIV)
            self.idle[g * n + self.idle_of[g]] = core
            self.idle_of[g] += 1
        self.n_idle = _buffer([0, 0], np.int64)
        self.n_idle[AIV], self.n_idle[AIC] = n_aiv, n_aic
        # pend-ready cores: exact counts, and queues that may hold stale entries (a core
        # that went idle or got a pending task since); ``queued`` keeps one entry per core
        self.pend_q = _buffer([0] * (groups * n), np.int64)
        self.pend_head = _buffer([0] * groups, np.int64)
        self.pend_len = _buffer([0] * groups, np.int64)
        self.n_pend = _buffer([0] * groups, np.int64)
        self.n_pend_all = _buffer([0, 0], np.int64)
        self.queued = _buffer([False] * n, np.int8)
        self.pending = _buffer([-1] * n, np.int64)
        self.busy = _buffer([False] * n, np.int8)
        # the core went on with its pending task and its thread has not noticed yet: the
        # freed slot is not offered until then
        self.unnoticed = _buffer([False] * n, np.int8)
        # it then ended that task too, still unnoticed: the first notice finds it idle
        # (upstream ReleaseCoreByRegVal sees both ends at once), the second must not
        # idle it again
        self.ended_twice = _buffer([False] * n, np.int8)
        self.idled_early = _buffer([False] * n, np.int8)

    def _round(self, counts, core_type: int) -> int:
        """The next thread round from the last one used with a non-zero count (fair)."""
        n = self.n_threads
        for k in range(n):
            th = (self.next_thread + k) % n
            if counts[th * 2 + core_type]:
                self.next_thread = th + 1
                return th
        return -1

    def take_idle(self, core_type: int, free: list[float], batch: int) -> int:
        """An idle core of ``core_type`` (one must exist); it turns busy.  ``batch``: the
        thread that took the previous core in this dispatch pass, or -1.  A thread's pass
        sends a batch, to as many of its idle cores as there are queued tasks
        (upstream ``TryBatchSendTask``), so without ``fair`` it keeps the next core."""
        if self.fair:
            th = self._round(self.idle_of, core_type)
        elif batch >= 0 and self.idle_of[batch * 2 + core_type]:
            th = batch
        else:
            # the thread free first; a tie goes to the lower core index
            n = self.n
            th, first, lowest = -1, 0.0, 0
            for t in range(self.n_threads):
                g = t * 2 + core_type
                if self.idle_of[g]:
                    f, c = free[t], self.idle[g * n + self.idle_of[g] - 1]
                    if th < 0 or f < first or (f == first and c < lowest):
                        th, first, lowest = t, f, c
        return self.take_own_idle(th, core_type)

    def take_any_pend(self, core_type: int, free: list[float], batch: int) -> int:
        """A busy core with a free pending slot (one must exist), as ``take_idle`` picks."""
        if self.fair:
            return self.take_pend(self._round(self.n_pend, core_type), core_type)
        if batch >= 0 and self.n_pend[batch * 2 + core_type]:
            return self.take_pend(batch, core_type)
        th, key = -1, 0.0
        for t in range(self.n_threads):
            if self.n_pend[t * 2 + core_type] and (th < 0 or free[t] < key):
                th, key = t, free[t]
        return self.take_pend(th, core_type)

    def take_own_idle(self, th: int, core_type: int) -> int:
        """The most recently freed idle core of thread ``th``, or -1; it turns busy."""
        g = th * 2 + core_type
        left = self.idle_of[g] - 1
        if left < 0:
            return -1
        self.idle_of[g] = left
        core = self.idle[g * self.n + left]
        self.n_idle[core_type] -= 1
        self.busy[core] = True
        self.slot_free(core, th, core_type)
        return core

    def slot_free(self, core: int, th: int, core_type: int) -> None:
        """``core`` runs a task and its pending slot is empty."""
        g = th * 2 + core_type
        self.n_pend[g] += 1
        self.n_pend_all[core_type] += 1
        if not self.queued[core]:
            self.queued[core] = True
            n = self.n
            self.pend_q[g * n + (self.pend_head[g] + self.pend_len[g]) % n] = core
            self.pend_len[g] += 1

    def take_pend(self, th: int, core_type: int) -> int:
        """A busy core of thread ``th`` with a free pending slot (one must exist)."""
        g = th * 2 + core_type
        n = self.n
        while True:
            head = self.pend_head[g]
            core = self.pend_q[g * n + head]
            self.pend_head[g] = (head + 1) % n
            self.pend_len[g] -= 1
            self.queued[core] = False
            if self.busy[core] and self.pending[core] < 0:
                self.n_pend[g] -= 1
                self.n_pend_all[core_type] -= 1
                return core

    def has_pend(self, th: int, core_type: int) -> bool:
        return self.n_pend[th * 2 + core_type] > 0

    def other_idle(self, th: int, core_type: int) -> bool:
        """Has another thread an idle core of ``core_type``? (fair modes refuse then)"""
        for t in range(self.n_threads):
            if t != th and self.idle_of[t * 2 + core_type]:
                return True
        return False

    def stop(self, core: int, th: int, core_type: int) -> None:
        """``core``'s task ended with nothing pending: it runs nothing, so it has no
        pending slot to offer, even before its thread has noticed (``go_idle``)."""
        self.busy[core] = False
        self.n_pend[th * 2 + core_type] -= 1
        self.n_pend_all[core_type] -= 1

    def go_idle(self, core: int, th: int, core_type: int) -> None:
        """The thread has noticed the stopped ``core``: it joins its idle cores."""
        self.n_idle[core_type] += 1
        g = th * 2 + core_type
        self.idle[g * self.n + self.idle_of[g]] = core
        self.idle_of[g] += 1


# -- one launch ------------------------------------------------------------------------
class Run:
    """The mutable state of one simulated launch, and the event handlers that move it.

    Created fresh by every ``Machine.run``: schedule threads idle since their
    handshake, an empty L2, every edge unresolved, no task placed.  Per-task
    results go into arrays created by this run, which its Timeline then owns;
    one Run makes one Timeline.
    """

    def __init__(self, plan: Plan):
        self.plan = plan
        a, n = plan.aicpu, plan.leaf_tasks
        self.sched = [SchedThread(index=i, begin=0.0, alloc=_SCHED_ALLOC, init=a.init_us,
                                  handshake=a.init_us + a.handshake_us)
                      for i in range(plan.n_threads)]
        self.l2 = L2Cache(plan.l2_bytes, plan.accesses, plan.l2_replacement)
        self.indegree = _buffer(plan.indegree, np.int64)
        self.thread_free = _buffer([s.handshake for s in self.sched], np.float64)
        self.events = Heap()                  # (time, seq, kind, a, b)
        self.running = 0                      # tasks on cores: L2 and writes share by it
        # the dev task under way: ready queues per core type, the cores' state, and per
        # schedule thread its first and last send and its dispatch count (run_dev_task)
        self.queues = (_task_queue(), _task_queue())
        self.lifo = False                     # pops from the queue's tail (mode 1, 3)
        self.cores: Cores | None = None
        # HBM processor sharing, per core type (CoreType index): the loaders draining HBM
        # bytes as a heap of (the per-loader byte count ``drained`` at which they are done,
        # seq, task, core), how many bytes each loader of the type has received since the
        # heap was last empty, at what rate it gets them now, and a version that makes a
        # re-priced completion event outdate the one before
        self.loaders: tuple[Heap, Heap] = (Heap(), Heap())
        self.n_loaders = _buffer([0, 0], np.int64)
        # per core type, the active loaders' fetched and asked HBM bytes: their ratio is
        # the type's overfetch (whole lines for boxes covering them in part), which HBM
        # carries but the core's own rate does not (Mte2Model.rates)
        self.fetched = _buffer([0.0, 0.0], np.float64)
        self.asked = _buffer([0.0, 0.0], np.float64)
        self.drained = _buffer([0.0, 0.0], np.float64)
        self.rate = _buffer(plan.mte2.caps, np.float64)
        self.drained_at = 0.0
        self.version = 0
        self.next_drained = -1.0              # when the event in flight fires; -1: none
        # per schedule thread in the dev task under way: first send (-1: none yet), last
        # send, sends
        self.first_send = _buffer([], np.float64)
        self.last_send = _buffer([], np.float64)
        self.dispatches = _buffer([], np.int64)
        self.end_of_dev = 0.0
        # per-task results: arrays the Timeline receives as they are
        self.task_core = np.full(n, -1, dtype=np.int64)
        self.task_start, self.task_end = np.zeros(n), np.zeros(n)
        self.task_mte2, self.task_hbm, self.task_l2 = np.zeros(n), np.zeros(n), np.zeros(n)
        self.task_asked = np.zeros(n)         # of task_hbm, the bytes the reads asked for
        # the hot path writes them through memoryviews, one item per task: a memoryview
        # store costs about half a numpy scalar store, and unlike filling lists keeps no
        # Python float per task (about 100 MB at 10^6 tasks)
        self.core_of, self.start_of, self.end_of = memoryview(self.task_core), \
            memoryview(self.task_start), memoryview(self.task_end)
        self.mte2_of, self.hbm_of, self.l2_of = memoryview(self.task_mte2), \
            memoryview(self.task_hbm), memoryview(self.task_l2)
        self.asked_of = memoryview(self.task_asked)
        # what a loader puts on HBM: its fetched lines and its writes (which leave through
        # the same HBM, so the reads' share must leave room for them)
        self.task_drain = np.zeros(n)
        self.drain_of = memoryview(self.task_drain)
        # when a loader starts draining: its drain splits into the reads' part (before the
        # pipes) and the writes' part (leaving through FIXP/MTE3, alongside the pipes)
        self.task_joined = np.zeros(n)
        self.joined_of = memoryview(self.task_joined)
        # the earliest a loader's copy-in can end: its latency plus its runs' setups and
        # its copy-ins' after the first
        self.task_stream_floor = np.zeros(n)
        self.stream_floor = memoryview(self.task_stream_floor)
        # the hot handlers read these on every event: the Plan's columns and the
        # Mte2Model's methods bound once here rather than looked up through self.plan
        self.n_threads, self.direct_send = plan.n_threads, plan.direct_send
        self.n_tasks = n
        self.core_type = _column(plan.core_type, np.int64)
        self.succ_ptr, self.succ = _column(plan.succ_ptr, np.int64), _column(plan.succ, np.int64)
        self.dispatch_us, self.completion_us = plan.dispatch_us, a.completion_us
        self.resolve_edge_us, self.handoff_us = a.resolve_edge_us, a.ready_handoff_us
        self.ready_edge_us = a.ready_edge_us
        self.mte2, self.fair = plan.mte2, plan.fair
        m = plan.mte2
        self.fixed_us, self.l2_fixed_us = m.fixed_us, m.l2_fixed_us
        self.l2_rate, self.core_rate = m.l2_rate, m.core_rate
        self.aic_core_rate = m.aic_core_rate
        # per task, its runs' setups and its copy-ins' after the first
        self.setup_us_of = _column(m.setups_us(plan.bursts, plan.loads,
                                               plan.core_type == int(CoreType.AIC)), np.float64)
        # every loader at its own cap while the caps add up to no more than HBM: the
        # rates then stay the caps whoever joins or leaves (no water-filling needed)
        self.caps, self.hbm_total = _buffer(m.caps, np.float64), m.hbm_rate
        f64 = np.float64
        self.loads, self.in_flight = _column(plan.loads, f64), _column(plan.in_flight, f64)
        self.static_sum, self.static_max = _column(plan.static_sum, f64), \
            _column(plan.static_max, f64)
        self.write_bytes, self.write_pipe = _column(plan.write_bytes, f64), \
            _column(plan.write_pipe, f64)
        self.read_bytes = _column(plan.read_bytes, f64)
        self.head_us = plan.head_us
        # a core's first task of the launch starts late (the core is cold): the delay its
        # next task waits, zero once it has begun one
        self.cold_us = _buffer(plan.cold_us, f64)

    # -- the launch: dev tasks one after another ---------------------------------------
    def timeline(self) -> Timeline:
        plan, a = self.plan, self.plan.aicpu
        built = plan.build_end.copy()
        dev_start = np.zeros(plan.dev_tasks)
        dev_end = np.zeros(plan.dev_tasks)
        ready_at = self.sched[0].handshake
        for k in range(plan.dev_tasks):
            dev_start[k] = start = max(float(built[k]), ready_at)
            dev_end[k] = end = self.run_dev_task(k, start)
            ready_at = end + a.dev_task_sync_us
        last = float(dev_end[plan.dev_tasks - 1]) if plan.dev_tasks else ready_at
        for thread in self.sched:
            thread.wait_all_finish = last
            thread.core_exit = last + a.exit_us / 2
            thread.exit = last + a.exit_us
        clock = plan.clock_mhz
        pipe_cycles = {k: v * clock for k, v in plan.static_pipes.items()}
        scalar = pipe_cycles.pop("scalar")
        pipe_cycles["mte2"] = self.task_mte2 * clock
        pipe_cycles["scalar"] = scalar
        return Timeline(
            aic_cores=plan.n_aic, aiv_cores=plan.n_aiv,
            task_core=self.task_core, task_start=self.task_start, task_end=self.task_end,
            ctrl_begin=0.0, ctrl_init=plan.ctrl_ready, dev_build_end=built,
            dev_start=dev_start, dev_end=dev_end,
            ctrl_exit=max(last, self.retired(built, dev_end)) + a.exit_us, sched=self.sched,
            core_begin=_CORE_BEGIN, core_init=self.sched[0].handshake,
            core_exit=np.full(plan.n_aic + plan.n_aiv, last + a.exit_us / 2),
            task_pipe_cycles=pipe_cycles, clock_mhz=clock,
            task_hbm_bytes=self.task_hbm, task_l2_bytes=self.task_l2)

    def retired(self, built: np.ndarray, dev_end: np.ndarray) -> float:
        """When the control thread has retired every finished dev task.

        The documented end-to-end figures show time after a dev task that grows with its
        leaf tasks; upstream's runtime has no per-leaf retiring at the guide's commit, so
        the model charges ``release_per_leaf_task_us`` to the control thread once it has
        built everything, where it overlaps later dev tasks' execution and only the last
        dev task's share delays the exit (docs/sources.md §4: what is and is not known).
        """
        per_task = self.plan.aicpu.release_per_leaf_task_us
        free = float(built[built.size - 1]) if built.size else self.plan.ctrl_ready
        for k, tasks in enumerate(self.plan.dev_task_tasks.tolist()):
            free = max(free, float(dev_end[k])) + per_task * float(tasks)
        return free

    # -- one dev task: the event loop ----------------------------------------------------
    def run_dev_task(self, k: int, start: float) -> float:
        """Run dev task ``k`` from ``start`` until its last completion is noticed."""
        plan = self.plan
        n_threads = plan.n_threads
        self.queues = (_task_queue(), _task_queue())      # ready tasks per core type
        self.cores = Cores(plan.n_aic, plan.n_aiv, n_threads, plan.fair)
        self.first_send = _buffer([-1.0] * n_threads, np.float64)
        self.last_send = _buffer([start] * n_threads, np.float64)
        # per thread and core type, when its current pass over its cores began: a core
        # that ended before then is in that pass's sweep and pays no completion of its own
        self.pass_start = _buffer([-1.0] * (2 * n_threads), np.float64)
        self.dispatches = _buffer([0] * n_threads, np.int64)
        self.end_of_dev = start
        free = self.thread_free
        for th in range(n_threads):
            free[th] = max(free[th], start)
            self.sched[th].rcv.append(start)
        core_type, queues = self.core_type, self.queues
        for task in plan.first_ready[plan.first_ready_ptr[k]:plan.first_ready_ptr[k + 1]].tolist():
            q = queues[core_type[task]]
            q.append(task)
        # the first batch leaves the queue from its head in every mode; after it, L2
        # affinity pops from the tail, the most recently readied first (upstream
        # TryBatchSendTask, framework/src/machine/device/dynamic/aicore_manager.h)
        self.lifo = False
        self.dispatch(start)
        self.lifo = plan.direct_send
        events = self.events
        aic, aiv = queues[AIC], queues[AIV]
        while events.n:
            now, _, kind, a, b = events.pop()
            if kind == _DONE:
                if not self.on_task_done(now, a, b):
                    continue
            elif kind == _NOTICE:
                self.on_notice(now, a, b)
            elif kind == _READY:
                q = queues[core_type[a]]            # on_task_ready, inlined
                q.append(a)
            elif kind == _JOIN:
                self.on_join(now, a, b)
                continue
            elif kind == _START:
                self.start_work(a, b, now)
                continue
            else:
                self.on_drained(now, a, b)
                continue
            if aic or aiv:                          # most events leave nothing queued
                self.dispatch(now)
        for th, thread in enumerate(self.sched):
            thread.dispatches += self.dispatches[th]
            first = self.first_send[th]
            thread.first_send.append(first if first >= 0.0 else start)
            thread.sched_exec.append(self.last_send[th])
            thread.sync_stop.append(self.end_of_dev)
            thread.rsp.append(self.end_of_dev)
        return self.end_of_dev

    # -- event handlers: the schedule threads --------------------------------------------
    def on_task_done(self, now: float, task: int, core: int) -> bool:
        """The core ends ``task`` and starts its pending task, if it has one, by itself.
        Its owner thread handles the completion (``on_notice``) now if it is free, else
        once it is: a thread takes from the shared queue only in its own loop, after
        releasing its finished cores (upstream ``ResolveDepForAllAiCore``), so a thread
        busy elsewhere reaches the queue after free threads whose cores ended as early.
        True if the thread handled it now."""
        self.running -= 1
        cores = self.cores
        waiting = cores.pending[core]
        th = core % self.n_threads
        if waiting >= 0:
            cores.pending[core] = -1
            cores.unnoticed[core] = True
            sent = self.start_of[waiting]
            self.begin(waiting, core, now if now > sent else sent)
        elif cores.unnoticed[core]:
            # it ended that task too before its thread noticed the first end: no slot
            # was offered, so none is withdrawn
            cores.unnoticed[core] = False
            cores.busy[core] = False
            cores.ended_twice[core] = True
        else:
            cores.stop(core, th, self.core_type[task])
        f = self.thread_free[th]
        if f > now:
            self.events.push(f, _NOTICE, task, core if waiting < 0 else ~core)
            return False
        self.on_notice(now, task, core if waiting < 0 else ~core)
        return True

    def on_notice(self, now: float, task: int, core: int) -> None:
        """The core's owner thread notices the completion and frees the core (``core`` is
        ``~core`` when the core went on with its pending task), then resolves the
        successor edges.  The completion check is paid once per pass: a core that had
        ended when the thread's current pass over that core type began is in it.

        Mode 0 first sends from the shared queue's head to freed cores, then gives the newly
        ready tasks, most recent first, to its own idle cores and pushes the rest onto the
        queue's tail.  Modes 1, 3 send each newly ready task straight to the thread's most
        recently freed idle core (its producer's, when that one came free), else into a
        free pending slot of one of its cores, and queue only what is left (upstream
        ``ResolveDepForAllAiCore``, ``PushReadyTask``, ``TrySendTaskDirectly``,
        ``BatchPushReadyQueue`` in framework/src/machine/device/dynamic/aicore_manager.h).
        """
        went_on = core < 0
        if went_on:
            core = ~core
        th = core % self.n_threads
        f = self.thread_free[th]
        cores = self.cores
        ct = self.core_type[task]
        # (now if now > f else f) is max(now, f) without a builtin call, here and in
        # send: both run once per task
        f = now if now > f else f
        g = th * 2 + ct
        if self.end_of[task] > self.pass_start[g]:     # a new pass (ResolveDepForAllAiCore)
            self.pass_start[g] = f
            f += self.completion_us
        self.thread_free[th] = f
        if went_on:
            if cores.unnoticed[core]:
                cores.unnoticed[core] = False
                cores.slot_free(core, th, ct)
            elif cores.ended_twice[core]:     # it has ended the pending task too
                cores.ended_twice[core] = False
                cores.idled_early[core] = True
                cores.go_idle(core, th, ct)
        elif cores.idled_early[core]:
            cores.idled_early[core] = False
        else:
            cores.go_idle(core, th, ct)
        direct = self.direct_send
        if not direct:
            self.dispatch(now)
        # the per-task arrays are read through self here and in every handler, not taken
        # into locals: compiled, a typed-array local costs an atomic reference count when
        # taken and again when dropped, which measured more than the work it saved
        lo, hi = self.succ_ptr[task], self.succ_ptr[task + 1]
        # the edge to a successor this task was the last to wait for only reads its count;
        # the others decrement it atomically (upstream ResolveDepDyn: ``predCounts[s] == 1
        # || __atomic_sub_fetch(...) == 0``)
        if lo == hi:                          # no successor: nothing to resolve
            if self.thread_free[th] > self.end_of_dev:
                self.end_of_dev = self.thread_free[th]
            return
        # most resolves ready nothing (an end hub's edges, a successor that still waits):
        # the list is made only for a task this thread readies
        readied = None
        edges, last, n_tasks = hi - lo, 0, self.n_tasks
        for i in range(lo, hi):
            s = self.succ[i]
            self.indegree[s] -= 1
            if self.indegree[s] == 0:
                last += 1
                if s < n_tasks:
                    if readied is None:
                        readied = []
                    readied.append(s)
                else:
                    # a hub: its edges are resolved now, by this thread (ResolveDepDyn)
                    edges += self.succ_ptr[s + 1] - self.succ_ptr[s]
                    for j in range(self.succ_ptr[s], self.succ_ptr[s + 1]):
                        h = self.succ[j]
                        self.indegree[h] -= 1
                        if self.indegree[h] == 0:
                            last += 1
                            if readied is None:
                                readied = []
                            readied.append(h)
        # (dispatch may have sent from this thread since: free[th] read again)
        noticed = self.thread_free[th] + self.resolve_edge_us * (edges - last) \
            + self.ready_edge_us * last
        self.thread_free[th] = noticed
        if noticed > self.end_of_dev:
            self.end_of_dev = noticed
        if readied is None:
            return
        ready = []
        for s in readied:
            if not (direct and self.send_directly(s, th, now)):
                ready.append(s)
        if not ready:
            return
        rest = []
        for s in reversed(ready):             # most recent first
            c = cores.take_own_idle(th, self.core_type[s])
            if c < 0:
                rest.append(s)
            else:
                self.start_task(s, c, now)
        at = noticed + self.handoff_us
        for s in reversed(rest):              # the queue's tail in resolve order
            self.events.push(at, _READY, s, 0)

    def send_directly(self, task: int, th: int, now: float) -> bool:
        """Mode 1, 3: ``task`` goes to thread ``th``'s most recently freed idle core, else
        to a pending slot of its cores; the fair modes refuse the slot while another thread
        has an idle core."""
        cores, ct = self.cores, self.core_type[task]
        c = cores.take_own_idle(th, ct)
        if c >= 0:
            self.start_task(task, c, now)
            return True
        if not cores.has_pend(th, ct) or (self.fair and cores.other_idle(th, ct)):
            return False
        self.pend_task(task, cores.take_pend(th, ct), now)
        return True

    def on_task_ready(self, now: float, task: int) -> None:
        q = self.queues[self.core_type[task]]
        q.append(task)

    def dispatch(self, now: float) -> None:
        """Send queued tasks, AIC first as the runtime walks its cores, to idle cores, then
        into free pending slots of busy ones."""
        queues, cores = self.queues, self.cores
        # most events leave nothing queued, or no core (idle or with a free pending slot)
        # for what is queued
        if not ((queues[AIC] and (cores.n_idle[AIC] or cores.n_pend_all[AIC]))
                or (queues[AIV] and (cores.n_idle[AIV] or cores.n_pend_all[AIV]))):
            return
        n, lifo = self.n_threads, self.lifo
        for i in range(2):
            core_type = AIC - i                  # AIC first, then AIV
            q = queues[core_type]
            batch = -1
            while q:
                if cores.n_idle[core_type]:
                    core = cores.take_idle(core_type, self.thread_free, batch)
                    self.start_task(q.pop() if lifo else q.popleft(), core, now)
                elif cores.n_pend_all[core_type]:
                    core = cores.take_any_pend(core_type, self.thread_free, batch)
                    self.pend_task(q.pop() if lifo else q.popleft(), core, now)
                else:
                    break
                batch = core % n

    def send(self, core: int, now: float) -> float:
        """The core's owner thread sends a task once free: when the send is done."""
        th = core % self.n_threads
        f = self.thread_free[th]
        at = (now if now > f else f) + self.dispatch_us
        self.thread_free[th] = at
        self.dispatches[th] += 1
        if self.first_send[th] < 0.0:
            self.first_send[th] = at
        self.last_send[th] = at
        return at

    def start_task(self, task: int, core: int, now: float) -> None:
        """Send ``task`` to the idle ``core``: it begins once sent (a cold core's first
        task, its delay later)."""
        self.begin(task, core, self.send(core, now))

    def pend_task(self, task: int, core: int, now: float) -> None:
        """Pre-load ``task`` into busy ``core``'s pending slot: the send is paid now, while
        the core works, and the core begins the task when its running one ends (or when
        the send is done, if that is later).  Until then start_of holds the send time."""
        self.cores.pending[core] = task
        self.core_of[task] = core
        self.start_of[task] = self.send(core, now)

    # -- the cores: an MTE2 phase sharing HBM, then the rest -----------------------------
    def begin(self, t: int, core: int, at: float) -> None:
        """Task ``t`` reaches ``core`` at ``at``.  The first task a core runs in the
        launch starts its cold delay later (a ``_START`` event): until then it neither
        looks up L2 nor counts among the running tasks, which share L2 and the writes'
        HBM."""
        self.core_of[t] = core
        delay = self.cold_us[core]
        if delay > 0.0:
            self.cold_us[core] = 0.0
            self.events.push(at + delay, _START, t, core)
            return
        self.start_work(t, core, at)

    def start_work(self, t: int, core: int, at: float) -> None:
        """Task ``t`` starts on ``core``: L2 lookups in start order; a task that reads HBM
        waits out its latency, then drains its HBM bytes as a loader sharing HBM."""
        self.start_of[t] = at
        self.running += 1
        hit, miss = self.l2.access(t)
        self.hbm_of[t], self.l2_of[t] = miss, hit
        if self.loads[t] == 0:
            self.finish(t, core, at, 0.0)
            return
        # Mte2Model.latency_us, inlined: the GM (or L2) round trip, then the L2 hits; the
        # setups of runs and copy-ins (Mte2Model.setups_us) bound the stream from below,
        # they do not add
        fixed = self.fixed_us if miss > 0 else self.l2_fixed_us
        latency = fixed
        if hit:
            l2 = self.l2_rate / self.running
            cap = self.aic_core_rate if self.core_type[t] == AIC else self.core_rate
            latency += hit / (l2 if l2 < cap else cap)
        floor = fixed + self.setup_us_of[t]
        self.stream_floor[t] = at + floor
        if miss > 0:
            asked = self.read_bytes[t] - hit
            # the reads ask for at most what HBM fetches for them (rounding aside)
            self.asked_of[t] = asked if 0.0 < asked < miss else miss
            self.drain_of[t] = miss + self.write_bytes[t]
            self.joined_of[t] = at + latency
            self.events.push(at + latency, _JOIN, t, core)
        else:
            self.finish(t, core, at, latency if latency > floor else floor)

    def _advance(self, now: float) -> None:
        """Every loader has drained at its rate from the last change until ``now``."""
        dt = now - self.drained_at
        if dt:
            if self.n_loaders[AIV]:
                self.drained[AIV] += self.rate[AIV] * dt
            if self.n_loaders[AIC]:
                self.drained[AIC] += self.rate[AIC] * dt
            self.drained_at = now

    def _rates(self) -> bool:
        """Re-price every loader for the loaders now active; False if nothing changed."""
        n_v, n_c = self.n_loaders[AIV], self.n_loaders[AIC]
        over_v = self.fetched[AIV] / self.asked[AIV] if n_v else 1.0
        over_c = self.fetched[AIC] / self.asked[AIC] if n_c else 1.0
        cap_v, cap_c = self.caps[AIV], self.caps[AIC]
        # at their caps the loaders take over * cap of HBM each: if that fits, no sharing
        if n_v * cap_v * over_v + n_c * cap_c * over_c <= self.hbm_total:
            rate_v, rate_c = cap_v, cap_c
        else:
            rate_v, rate_c = self.mte2.rates(n_v, n_c, over_v, over_c)
        if rate_v == self.rate[AIV] and rate_c == self.rate[AIC]:
            return False
        self.rate[AIV], self.rate[AIC] = rate_v, rate_c
        return True

    def _next_drained(self, now: float) -> None:
        """The next loader to finish at the current rates becomes the one completion event
        in flight; the previous one goes stale."""
        self.version += 1
        best, best_type = -1.0, -1
        loaders = self.loaders
        for ct in range(2):                   # AIV (0), then AIC (1)
            heap = loaders[ct]
            if heap.n:
                dt = (heap.first_key() - self.drained[ct]) / self.rate[ct]
                done = now + dt if dt > 0.0 else now
                if best_type < 0 or done < best:
                    best, best_type = done, ct
        self.next_drained = best
        if best_type >= 0:
            self.events.push(best, _DRAIN, self.version, best_type)

    def on_join(self, now: float, t: int, core: int) -> None:
        """Task ``t``'s latency is over: it starts draining its HBM bytes.  While every
        loader is held to its cap the rates stay as they were, and only a newcomer that
        finishes first moves the completion event."""
        self._advance(now)      # every loader has drained at its rate since the last change
        ct = self.core_type[t]
        heap = self.loaders[ct]
        asked = self.asked_of[t]
        if not heap.n:
            # exact zeros once the type has no loader, so sums never drift
            self.drained[ct] = self.fetched[ct] = self.asked[ct] = 0.0
        # a loader's rate counts the bytes it asked for; HBM is charged its fetched lines
        target = self.drained[ct] + asked
        heap.push(target, t, core, 0)
        self.n_loaders[ct] += 1
        self.fetched[ct] += self.drain_of[t]
        self.asked[ct] += asked
        if self._rates() or self.next_drained < 0.0 \
                or now + (target - self.drained[ct]) / self.rate[ct] < self.next_drained:
            self._next_drained(now)

    def on_drained(self, now: float, version: int, ct: int) -> None:
        """The first loader of type ``ct`` has all its bytes (unless re-priced since)."""
        if version != self.version:
            return
        self._advance(now)
        heap = self.loaders[ct]
        _, _, t, core, _ = heap.pop()
        self.n_loaders[ct] -= 1
        self.fetched[ct] -= self.drain_of[t]
        self.asked[ct] -= self.asked_of[t]
        self._rates()
        self._next_drained(now)
        start = self.start_of[t]
        floor = self.stream_floor[t]
        self.finish(t, core, start, (now if now > floor else floor) - start,
                    now - self.joined_of[t])

    def finish(self, t: int, core: int, start: float, mte2: float, drain: float = 0.0) -> None:
        """The MTE2 phase took ``mte2``, ``drain`` of it sharing HBM: the task ends as the
        pipes compose around it, and never before its HBM bytes have passed."""
        self.mte2_of[t] = mte2
        wb = self.write_bytes[t]
        if drain > 0.0:
            # the drain carried the writes too (one HBM for both); their part leaves
            # through the write pipe alongside the others, not before them
            written = drain * wb / self.drain_of[t]
            reads = mte2 - written
            extra = written - self.write_pipe[t]
        else:
            # a write cannot leave faster than the task's share of HBM lets it
            # (Mte2Model.write_us, inlined: the task's share of HBM while ``running`` run)
            reads = mte2
            extra = (wb / (self.hbm_total / self.running) if wb else 0.0) - self.write_pipe[t]
        if extra < 0.0:         # max(0.0, ...) without the builtin call
            extra = 0.0
        mte2 = reads
        n = self.in_flight[t]
        if n <= 1:
            end = start + self.head_us + mte2 + self.static_sum[t] + extra
        else:
            # tiles in flight overlap: one tile of every pipe, then the rest at the pace
            # of the slowest pipe; while MTE2 is that pipe the task ends the other pipes'
            # share of one tile after its loads
            busiest = self.static_max[t] + extra
            end = start + self.head_us + (mte2 + self.static_sum[t] + extra) / n \
                + (n - 1) / n * (mte2 if mte2 > busiest else busiest)
        if drain > 0.0 and end < self.joined_of[t] + drain:
            end = self.joined_of[t] + drain
        self.end_of[t] = end
        self.events.push(end, _DONE, t, core)


# -- the machine -----------------------------------------------------------------------
class Machine:
    """A compiled Program on a Hardware under RuntimeOptions.

    Holds only the Plan; every ``run()`` starts from scratch, so runs are
    independent and give identical Timelines.
    """

    def __init__(self, hw: Hardware, program: Program, options: RuntimeOptions):
        self.plan = prepare(hw, program, options)

    @property
    def sched_threads(self) -> int:
        return self.plan.n_threads

    def run(self) -> Timeline:
        return Run(self.plan).timeline()


def simulate(hw: Hardware, program: Program, options: RuntimeOptions) -> Timeline:
    return Machine(hw, program, options).run()
