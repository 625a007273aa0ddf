"""The modeled NPU's discrete-event loop: AICPU control and schedule threads, cores.

The control thread builds dev tasks one after another, ahead of execution.  A
dev task is a synchronisation point: its leaf tasks start once it is built and
the previous dev task has finished and been handed over.  Inside a dev task the
schedule threads dispatch ready leaf tasks to idle cores of the right type (each
thread owns a slice of the cores and pays per dispatch), notice completions and
resolve successor edges (paying per edge); a successor becomes ready when that
work is done.  Events sit on a heap ordered by (time, sequence number), so ties
break by arrival order and the same input always gives the same timeline.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from ..compiler.program import AIC, Program
from ..spec.hardware import Hardware
from ..spec.options import RuntimeOptions
from .costs import task_durations_us, task_pipe_cycles
from .timeline import SchedThread, Timeline

_DONE, _READY = 0, 1


class _ReadyQueue:
    """Ready leaf tasks of one core type.  Mode 1/3 (L2 affinity) takes the newest."""

    def __init__(self, newest_first: bool):
        self.items: deque[int] = deque()
        self.newest_first = newest_first

    def push(self, task: int) -> None:
        self.items.append(task)

    def pop(self) -> int:
        return self.items.pop() if self.newest_first else self.items.popleft()

    def __bool__(self) -> bool:
        return bool(self.items)


class Machine:
    def __init__(self, hw: Hardware, program: Program, options: RuntimeOptions):
        self.hw, self.program, self.options = hw, program, options
        self.n_aic, self.n_aiv = hw.cores.aic, hw.cores.aiv
        n_sched = min(hw.sched_threads, options.launch_sched_aicpu_num)
        a = hw.aicpu
        self.sched = [SchedThread(index=i, begin=0.0, alloc=0.01, init=a.init_us,
                                  handshake=a.init_us + a.handshake_us) for i in range(n_sched)]
        self.thread_free = [s.handshake for s in self.sched]
        self.duration = task_durations_us(hw, program)
        n = program.leaf_tasks
        self.task_core = np.full(n, -1, dtype=np.int64)
        self.task_start = np.zeros(n)
        self.task_end = np.zeros(n)
        # successors inside the same dev task, as CSR arrays
        dev = program.task_dev_task
        same = dev[program.edge_src] == dev[program.edge_dst]
        src, dst = program.edge_src[same], program.edge_dst[same]
        self.succ_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
        self.succ = dst  # already sorted by src
        self.indegree = np.bincount(dst, minlength=n).astype(np.int64)

    # -- helpers -----------------------------------------------------------------
    def _cores_of(self, core_type: int) -> range:
        return range(0, self.n_aic) if core_type == AIC else range(self.n_aic,
                                                                    self.n_aic + self.n_aiv)

    def _owner(self, core: int) -> int:
        return core % len(self.sched)

    # -- control thread ----------------------------------------------------------------
    def build_times(self) -> np.ndarray:
        a, p = self.hw.aicpu, self.program
        calls = np.bincount(p.call_dev_task, minlength=p.dev_tasks)
        tasks = np.bincount(p.task_dev_task, minlength=p.dev_tasks)
        cost = a.build_dev_task_us + a.build_per_root_call_us * calls \
            + a.build_per_leaf_task_us * tasks
        return a.init_us + np.cumsum(cost)

    # -- one dev task ------------------------------------------------------------------
    def run_dev_task(self, k: int, tasks: np.ndarray, start: float) -> float:
        newest = self.options.device_sched_mode in (1, 3)
        queues = {t: _ReadyQueue(newest) for t in (0, 1)}
        idle = {t: list(self._cores_of(t)) for t in (0, 1)}
        for lst in idle.values():
            heapq.heapify(lst)
        core_type = self.program.task_core
        events: list[tuple[float, int, int, int, int]] = []
        seq = 0
        first_send = [None] * len(self.sched)
        last_send = [start] * len(self.sched)
        for th in range(len(self.sched)):
            self.thread_free[th] = max(self.thread_free[th], start)
            self.sched[th].rcv.append(start)

        def dispatch(now: float) -> None:
            nonlocal seq
            for t in (1, 0):   # AIC first, as the runtime walks its cores
                q, free = queues[t], idle[t]
                while q and free:
                    task, core = q.pop(), heapq.heappop(free)
                    th = self._owner(core)
                    send = max(now, self.thread_free[th]) + self.hw.aicpu.dispatch_us
                    self.thread_free[th] = send
                    self.sched[th].dispatches += 1
                    if first_send[th] is None:
                        first_send[th] = send
                    last_send[th] = send
                    end = send + self.duration[task]
                    self.task_core[task], self.task_start[task], self.task_end[task] = \
                        core, send, end
                    seq += 1
                    heapq.heappush(events, (end, seq, _DONE, int(task), core))

        for task in tasks[self.indegree[tasks] == 0]:
            queues[int(core_type[task])].push(int(task))
        dispatch(start)
        end_of_dev = start
        while events:
            now, _, kind, a, b = heapq.heappop(events)
            if kind == _DONE:
                th = self._owner(b)
                succ = self.succ[self.succ_ptr[a]:self.succ_ptr[a + 1]]
                noticed = max(now, self.thread_free[th]) + self.hw.aicpu.completion_us \
                    + self.hw.aicpu.resolve_edge_us * succ.size
                self.thread_free[th] = noticed
                end_of_dev = max(end_of_dev, noticed)
                heapq.heappush(idle[int(core_type[a])], b)
                for s in succ:
                    self.indegree[s] -= 1
                    if self.indegree[s] == 0:
                        seq += 1
                        heapq.heappush(events, (noticed, seq, _READY, int(s), 0))
                dispatch(now)
            else:
                queues[int(core_type[a])].push(a)
                dispatch(now)
        for th, thread in enumerate(self.sched):
            thread.first_send.append(first_send[th] if first_send[th] is not None else start)
            thread.sched_exec.append(last_send[th])
            thread.sync_stop.append(end_of_dev)
            thread.rsp.append(end_of_dev)
        return end_of_dev

    # -- the launch --------------------------------------------------------------------
    def run(self) -> Timeline:
        a, p = self.hw.aicpu, self.program
        built = self.build_times()
        order = np.argsort(p.task_dev_task, kind="stable")
        bounds = np.searchsorted(p.task_dev_task[order], np.arange(p.dev_tasks + 1))
        dev_start = np.zeros(p.dev_tasks)
        dev_end = np.zeros(p.dev_tasks)
        ready_at = self.sched[0].handshake if self.sched else a.init_us
        for k in range(p.dev_tasks):
            dev_start[k] = max(built[k], ready_at)
            dev_end[k] = self.run_dev_task(k, order[bounds[k]:bounds[k + 1]], dev_start[k])
            ready_at = dev_end[k] + a.dev_task_sync_us
        last = dev_end[-1] if p.dev_tasks else ready_at
        for thread in self.sched:
            thread.wait_all_finish = last
            thread.core_exit = last + a.exit_us / 2
            thread.exit = last + a.exit_us
        n_cores = self.n_aic + self.n_aiv
        core_exit = np.full(n_cores, last + a.exit_us / 2)
        return Timeline(
            aic_cores=self.n_aic, aiv_cores=self.n_aiv,
            task_core=self.task_core, task_start=self.task_start, task_end=self.task_end,
            ctrl_begin=0.0, ctrl_init=a.init_us, dev_build_end=built, dev_start=dev_start,
            dev_end=dev_end, ctrl_exit=last + a.exit_us, sched=self.sched,
            core_begin=0.005, core_init=self.sched[0].handshake if self.sched else a.init_us,
            core_exit=core_exit, task_pipe_cycles=task_pipe_cycles(self.hw, p),
            clock_mhz=self.hw.cores.clock_mhz)


def simulate(hw: Hardware, program: Program, options: RuntimeOptions) -> Timeline:
    return Machine(hw, program, options).run()
