"""The modeled NPU's discrete-event loop: AICPU control and schedule threads, cores.

The control thread builds dev tasks one after another, ahead of execution; a
bigger dev task takes longer to build.  A dev task is a synchronisation point:
its leaf tasks start once it is built and the previous dev task has finished
and been handed over.  Inside a dev task the schedule threads dispatch ready
leaf tasks to idle cores of the right type (each thread owns a slice of the
cores and pays per dispatch), notice completions and resolve successor edges
(paying per edge); a successor becomes ready when that work is done and reaches
the shared ready queue ``ready_handoff_us`` later (the runtime collects ready ids
in a batch before pushing them).

``device_sched_mode``: 0 dispatches from the shared queue in FIFO order; 1 lets
the thread that readied a task send it straight to the core its producer just
left (upstream's TrySendTaskDirectly), skipping the queue, so the consumer runs
while the producer's output is still in L2; a task that finds that core taken or
of the other type takes the queue.  2 balances dispatches across the schedule
threads at an extra cost per dispatch; 3 is 1 and 2.

How the code is laid out:

- ``prepare`` reads the Program and the Hardware once per ``Machine`` into a
  ``Plan``: plain per-task lists (successors, core types, static pipe times,
  L2 region accesses), the build times of the dev tasks, the AICPU costs.  It
  is the only place that reads Program fields; no run changes a Plan.
- ``Machine.run`` creates a fresh ``Run`` (idle threads, an empty L2, every
  edge unresolved) and returns its Timeline, so running a Machine twice gives
  the same Timeline twice and no run touches an earlier one's results.
- A ``Run`` is a small event engine.  Events sit on a heap ordered by
  ``(time, sequence number)``, so ties break by arrival order and the same
  input always gives the same timeline.  There are two kinds: a task is done
  (``on_task_done``: its thread notices, resolves successor edges, frees the
  core) and a task is ready (``on_task_ready``: it joins its type's queue).
  After every event ``dispatch`` sends queued tasks to idle cores
  (``start_task`` prices the task as it starts and schedules its completion).
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..compiler.program import CoreType, Program
from ..spec.hardware import Aicpu, Hardware
from ..spec.options import RuntimeOptions
from .costs import Mte2Model, static_pipe_us
from .l2 import L2Cache, TaskRegions
from .timeline import SchedThread, Timeline

# plain ints, not enum members: the hot loop indexes lists with them
AIV, AIC = int(CoreType.AIV), int(CoreType.AIC)

_DONE, _READY = 0, 1     # event kinds
_CORE_BEGIN = 0.005      # when the cores' own records start, us after the launch
_SCHED_ALLOC = 0.01      # when a schedule thread has allocated its state


# -- what a run needs, prepared once ---------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """Everything a run reads, prepared once per Machine and never changed by a run.

    Per-task columns are plain lists: the event loop reads them one element at a
    time, which is several times faster on a list than on a numpy array.
    """
    aicpu: Aicpu
    n_aic: int
    n_aiv: int
    n_threads: int               # schedule threads
    direct_send: bool            # modes 1, 3: a readied consumer may go to its producer's core
    fair: bool                   # modes 2, 3: dispatches balanced across the threads
    dispatch_us: float           # per dispatch, fairness included
    head_us: float               # per leaf task on its core
    clock_mhz: float
    l2_bytes: float
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
    core_type: list[int]
    succ_ptr: list[int]          # successors of t: succ[succ_ptr[t]:succ_ptr[t + 1]]
    succ: list[int]
    indegree: np.ndarray         # predecessors inside the dev task; a run counts down a copy
    loads: list[float]           # MTE2 copy-ins
    bursts: list[float]
    in_flight: list[float]       # tiles in flight: > 1 overlaps the pipes
    static_sum: list[float]      # us on every pipe but MTE2, summed
    static_max: list[float]      # and the longest of them
    write_bytes: list[float]
    write_pipe: list[float]      # us of the pipe the writes leave through (FIXP or MTE3)
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
    p, a = program, hw.aicpu
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
    same = dev[p.edge_src] == dev[p.edge_dst]
    src, dst = p.edge_src[same], p.edge_dst[same]
    indegree = np.bincount(dst, minlength=n)
    order = np.argsort(dev, kind="stable")
    first_ready = order[indegree[order] == 0]
    for column in (indegree, first_ready):
        column.flags.writeable = False       # the Plan is shared by every run
    pipes = static_pipe_us(hw, p)
    stack = np.stack([pipes[k] for k in ("mte1", "cube", "vector", "fixp", "mte3")])
    w = p.work
    return Plan(
        aicpu=a, n_aic=hw.cores.aic, n_aiv=hw.cores.aiv,
        n_threads=max(1, min(hw.sched_threads, options.launch_sched_aicpu_num)),
        direct_send=options.device_sched_mode in (1, 3), fair=fair,
        dispatch_us=a.dispatch_us + (a.fairness_us if fair else 0.0),
        head_us=hw.core.head_overhead_us, clock_mhz=hw.cores.clock_mhz,
        l2_bytes=hw.memory.l2_effective_bytes, mte2=Mte2Model(hw),
        ctrl_ready=ctrl_ready, build_end=ctrl_ready + np.cumsum(build_cost),
        dev_task_tasks=tasks,
        first_ready=first_ready,
        first_ready_ptr=np.searchsorted(dev[first_ready], np.arange(p.dev_tasks + 1)).tolist(),
        core_type=p.task_core.tolist(),
        succ_ptr=np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).tolist(),
        succ=dst.tolist(), indegree=indegree,
        loads=w.mte2_loads.tolist(), bursts=w.mte2_bursts.tolist(),
        in_flight=w.in_flight.tolist(),
        static_sum=stack.sum(axis=0).tolist() if n else [],
        static_max=stack.max(axis=0).tolist() if n else [],
        # writes leave through FIXP (Cube) or MTE3 (Vector) and share HBM with the loads
        write_bytes=p.task_write_bytes.tolist(),
        write_pipe=np.maximum(pipes["fixp"], pipes["mte3"]).tolist(),
        static_pipes=pipes, accesses=_region_accesses(p))


def _region_accesses(p: Program) -> TaskRegions:
    r = p.regions
    order = np.lexsort((r.write, r.task))     # per task, reads before writes
    task = r.task[order]
    lines = r.lines[order]
    return TaskRegions(
        ptr=np.searchsorted(task, np.arange(p.leaf_tasks + 1)).tolist(),
        region=r.region[order].tolist(), nbytes=r.bytes[order].tolist(),
        lines=lines.astype(np.uint64).tolist(),
        nlines=np.bitwise_count(lines.astype(np.uint64)).astype(np.int64).tolist(),
        write=r.write[order].tolist(), bypass=r.bypass[order].tolist())


# -- idle cores -----------------------------------------------------------------------
class IdleCores:
    """Idle cores of each type, lowest index first (modes 0 and 1)."""

    def __init__(self, n_aic: int, n_aiv: int, n_threads: int):
        self.heaps: list[list[int]] = [[], []]
        self.heaps[AIV] = list(range(n_aic, n_aic + n_aiv))
        self.heaps[AIC] = list(range(n_aic))

    def take(self, core_type: int) -> int | None:
        heap = self.heaps[core_type]
        return heapq.heappop(heap) if heap else None

    def give(self, core: int, core_type: int) -> None:
        heapq.heappush(self.heaps[core_type], core)

    def take_this(self, core: int, core_type: int) -> bool:
        """Take ``core`` if it is idle and runs ``core_type``."""
        return _take_from(self.heaps[core_type], core)


class FairIdleCores:
    """Idle cores per (schedule thread, type); a take goes round the threads (modes 2, 3)."""

    def __init__(self, n_aic: int, n_aiv: int, n_threads: int):
        self.n_threads = n_threads
        self.by_thread: list[list[list[int]]] = [[[], []] for _ in range(n_threads)]
        for core in range(n_aic + n_aiv):
            self.by_thread[core % n_threads][AIC if core < n_aic else AIV].append(core)
        self.next_thread = 0

    def take(self, core_type: int) -> int | None:
        n = self.n_threads
        for k in range(n):
            th = (self.next_thread + k) % n
            heap = self.by_thread[th][core_type]
            if heap:
                self.next_thread = th + 1
                return heapq.heappop(heap)
        return None

    def give(self, core: int, core_type: int) -> None:
        heapq.heappush(self.by_thread[core % self.n_threads][core_type], core)

    def take_this(self, core: int, core_type: int) -> bool:
        return _take_from(self.by_thread[core % self.n_threads][core_type], core)


def _take_from(heap: list[int], core: int) -> bool:
    if core not in heap:
        return False
    heap.remove(core)
    heapq.heapify(heap)
    return True


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
        self.l2 = L2Cache(plan.l2_bytes, plan.accesses)
        self.indegree = plan.indegree.tolist()
        self.thread_free = [s.handshake for s in self.sched]
        self.events: list = []
        self.seq = itertools.count()
        self.running = 0                      # tasks on cores: they share HBM
        # the dev task under way: ready queues per core type, idle cores, and per schedule
        # thread its first and last send and its dispatch count (set by run_dev_task)
        self.queues: tuple[deque, deque] = (deque(), deque())
        self.idle: IdleCores | FairIdleCores | None = None
        self.first_send: list[float | None] = []
        self.last_send: list[float] = []
        self.dispatches: list[int] = []
        self.end_of_dev = 0.0
        # per-task results: arrays the Timeline receives as they are
        self.task_core = np.full(n, -1, dtype=np.int64)
        self.task_start, self.task_end = np.zeros(n), np.zeros(n)
        self.task_mte2, self.task_hbm, self.task_l2 = np.zeros(n), np.zeros(n), np.zeros(n)
        # the hot path writes them through memoryviews, one item per task: a memoryview
        # store costs about half a numpy scalar store, and unlike filling lists keeps no
        # Python float per task (about 100 MB at 10^6 tasks)
        self.core_of, self.start_of, self.end_of = memoryview(self.task_core), \
            memoryview(self.task_start), memoryview(self.task_end)
        self.mte2_of, self.hbm_of, self.l2_of = memoryview(self.task_mte2), \
            memoryview(self.task_hbm), memoryview(self.task_l2)
        # the hot handlers read these on every event: the Plan's columns and the
        # Mte2Model's methods bound once here rather than looked up through self.plan
        self.n_threads, self.direct_send = plan.n_threads, plan.direct_send
        self.core_type, self.succ_ptr, self.succ = plan.core_type, plan.succ_ptr, plan.succ
        self.dispatch_us, self.completion_us = plan.dispatch_us, a.completion_us
        self.resolve_edge_us, self.handoff_us = a.resolve_edge_us, a.ready_handoff_us
        self.mte2_us, self.write_us = plan.mte2.us, plan.mte2.write_us
        self.loads, self.bursts, self.in_flight = plan.loads, plan.bursts, plan.in_flight
        self.static_sum, self.static_max = plan.static_sum, plan.static_max
        self.write_bytes, self.write_pipe = plan.write_bytes, plan.write_pipe
        self.head_us = plan.head_us

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
        last = float(dev_end[-1]) if plan.dev_tasks else ready_at
        for thread in self.sched:
            thread.wait_all_finish = last
            thread.core_exit = last + a.exit_us / 2
            thread.exit = last + a.exit_us
        clock = plan.clock_mhz
        pipe_cycles = {k: v * clock for k, v in plan.static_pipes.items()}
        pipe_cycles["mte2"] = self.task_mte2 * clock
        pipe_cycles["scalar"] = np.zeros(plan.leaf_tasks)
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

        Retiring (freeing a dev task's task table and workspace) costs per leaf task and
        runs on the control thread once it has built everything, so it overlaps later dev
        tasks' execution; only the last dev task's retirement delays the exit.
        """
        per_task = self.plan.aicpu.release_per_leaf_task_us
        free = float(built[-1]) if built.size else self.plan.ctrl_ready
        for k, tasks in enumerate(self.plan.dev_task_tasks.tolist()):
            free = max(free, float(dev_end[k])) + per_task * float(tasks)
        return free

    # -- one dev task: the event loop ----------------------------------------------------
    def run_dev_task(self, k: int, start: float) -> float:
        """Run dev task ``k`` from ``start`` until its last completion is noticed."""
        plan = self.plan
        n_threads = plan.n_threads
        self.queues = (deque(), deque())      # ready tasks per core type, FIFO
        pool = FairIdleCores if plan.fair else IdleCores
        self.idle = pool(plan.n_aic, plan.n_aiv, n_threads)
        self.first_send = [None] * n_threads
        self.last_send = [start] * n_threads
        self.dispatches = [0] * n_threads
        self.end_of_dev = start
        free = self.thread_free
        for th in range(n_threads):
            free[th] = max(free[th], start)
            self.sched[th].rcv.append(start)
        core_type, queues = plan.core_type, self.queues
        for task in plan.first_ready[plan.first_ready_ptr[k]:plan.first_ready_ptr[k + 1]].tolist():
            queues[core_type[task]].append(task)
        self.dispatch(start)
        events, heappop = self.events, heapq.heappop
        # handlers bound to locals once: the loop runs twice per leaf task
        on_task_done, on_task_ready, dispatch = self.on_task_done, self.on_task_ready, \
            self.dispatch
        while events:
            now, _, kind, task, core = heappop(events)
            if kind == _DONE:
                on_task_done(now, task, core)
            else:
                on_task_ready(now, task)
            dispatch(now)
        for th, thread in enumerate(self.sched):
            thread.dispatches += self.dispatches[th]
            first = self.first_send[th]
            thread.first_send.append(first if first is not None else start)
            thread.sched_exec.append(self.last_send[th])
            thread.sync_stop.append(self.end_of_dev)
            thread.rsp.append(self.end_of_dev)
        return self.end_of_dev

    # -- event handlers ----------------------------------------------------------------
    def on_task_done(self, now: float, task: int, core: int) -> None:
        """The core's owner thread notices, resolves the successor edges and frees the core;
        a successor with no edge left goes to its producer's core (modes 1, 3) or, later by
        the hand-off, to the ready queue."""
        self.running -= 1
        th = core % self.n_threads
        succ_ptr = self.succ_ptr
        lo, hi = succ_ptr[task], succ_ptr[task + 1]
        free = self.thread_free
        f = free[th]
        # (now if now > f else f) is max(now, f) without a builtin call, here and in
        # start_task: both run once per task
        noticed = (now if now > f else f) + self.completion_us + self.resolve_edge_us * (hi - lo)
        free[th] = noticed
        if noticed > self.end_of_dev:
            self.end_of_dev = noticed
        core_type, idle, indegree = self.core_type, self.idle, self.indegree
        idle.give(core, core_type[task])
        for s in self.succ[lo:hi]:
            indegree[s] -= 1
            if indegree[s] != 0:
                continue
            if self.direct_send and idle.take_this(core, core_type[s]):
                self.start_task(s, core, noticed)
            else:
                heapq.heappush(self.events,
                               (noticed + self.handoff_us, next(self.seq), _READY, s, 0))

    def on_task_ready(self, now: float, task: int) -> None:
        self.queues[self.core_type[task]].append(task)

    def dispatch(self, now: float) -> None:
        """Send queued tasks to idle cores, AIC first, as the runtime walks its cores."""
        queues = self.queues
        if not (queues[AIC] or queues[AIV]):      # most events leave nothing queued
            return
        take = self.idle.take
        for core_type in (AIC, AIV):
            q = queues[core_type]
            while q:
                core = take(core_type)
                if core is None:
                    break
                self.start_task(q.popleft(), core, now)

    def start_task(self, task: int, core: int, now: float) -> None:
        """The core's owner thread sends ``task`` once free; it runs as long as it is priced
        at that moment (L2 contents, cores sharing HBM)."""
        th = core % self.n_threads
        free = self.thread_free
        f = free[th]
        at = (now if now > f else f) + self.dispatch_us
        free[th] = at
        self.dispatches[th] += 1
        if self.first_send[th] is None:
            self.first_send[th] = at
        self.last_send[th] = at
        self.running += 1
        end = at + self.task_us(task, self.running)
        self.core_of[task] = core
        self.start_of[task] = at
        self.end_of[task] = end
        heapq.heappush(self.events, (end, next(self.seq), _DONE, task, core))

    def task_us(self, t: int, loaders: int) -> float:
        """Price task ``t`` as it starts: L2 lookups in start order, HBM shared by ``loaders``."""
        hit, miss = self.l2.access(t)
        mte2 = self.mte2_us(self.loads[t], self.bursts[t], miss, hit, loaders)
        self.mte2_of[t], self.hbm_of[t], self.l2_of[t] = mte2, miss, hit
        # a write cannot leave faster than the task's share of HBM lets it
        extra = self.write_us(self.write_bytes[t], loaders) - self.write_pipe[t]
        if extra < 0.0:         # max(0.0, ...) without the builtin call
            extra = 0.0
        total = mte2 + self.static_sum[t] + extra
        n = self.in_flight[t]
        if n <= 1:
            return self.head_us + total
        return self.head_us + total / n + (n - 1) / n * max(mte2, self.static_max[t] + extra)


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
