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

Events sit on a heap ordered by (time, sequence number), so ties break by
arrival order and the same input always gives the same timeline.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from ..compiler.program import CoreType, Program
from ..spec.hardware import Hardware
from ..spec.options import RuntimeOptions
from .costs import L2Cache, Mte2Model, static_pipe_us
from .timeline import SchedThread, Timeline

_DONE, _READY = 0, 1


class Machine:
    def __init__(self, hw: Hardware, program: Program, options: RuntimeOptions):
        self.hw, self.program, self.options = hw, program, options
        self.n_aic, self.n_aiv = hw.cores.aic, hw.cores.aiv
        n_sched = max(1, min(hw.sched_threads, options.launch_sched_aicpu_num))
        a = hw.aicpu
        self.sched = [SchedThread(index=i, begin=0.0, alloc=0.01, init=a.init_us,
                                  handshake=a.init_us + a.handshake_us) for i in range(n_sched)]
        self.thread_free = [s.handshake for s in self.sched]
        self.direct_send = options.device_sched_mode in (1, 3)
        self.fair = options.device_sched_mode in (2, 3)
        self.dispatch_us = a.dispatch_us + (a.fairness_us if self.fair else 0.0)
        # the control thread builds once started and, unless the launch already holds them
        # on the host (ready_on_host_tensors), once it has fetched the values its control
        # flow reads
        waiting = set(program.control_inputs) - set(options.ready_on_host_tensors)
        self.ctrl_ready = a.init_us + (a.host_value_fetch_us if waiting else 0.0)
        self._prepare_tasks()
        self._prepare_edges()
        self._prepare_accesses()

    # -- static per-task data, as Python lists for a fast inner loop ---------------------
    def _prepare_tasks(self) -> None:
        p, hw = self.program, self.hw
        pipes = static_pipe_us(hw, p)
        stack = np.stack([pipes[k] for k in ("mte1", "cube", "vector", "fixp", "mte3")])
        self.static_pipes = pipes
        self.static_sum = stack.sum(axis=0).tolist() if p.leaf_tasks else []
        self.static_max = stack.max(axis=0).tolist() if p.leaf_tasks else []
        # writes leave through FIXP (Cube) or MTE3 (Vector) and share HBM with the loads
        self.write_bytes = p.task_write_bytes.tolist()
        self.write_pipe = np.maximum(pipes["fixp"], pipes["mte3"]).tolist()
        w = p.work
        self.loads = w.mte2_loads.tolist()
        self.bursts = w.mte2_bursts.tolist()
        self.in_flight = w.in_flight.tolist()
        self.core_type = p.task_core.tolist()
        self.head = hw.core.head_overhead_us
        self.mte2 = Mte2Model(hw)
        n = p.leaf_tasks
        self.task_core = np.full(n, -1, dtype=np.int64)
        self.task_start = np.zeros(n)
        self.task_end = np.zeros(n)
        self.task_mte2 = np.zeros(n)
        self.task_hbm = np.zeros(n)
        self.task_l2 = np.zeros(n)

    def _prepare_edges(self) -> None:
        p = self.program
        n = p.leaf_tasks
        dev = p.task_dev_task
        same = dev[p.edge_src] == dev[p.edge_dst]   # later dev tasks wait at the barrier anyway
        src, dst = p.edge_src[same], p.edge_dst[same]
        self.succ_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).tolist()
        self.succ = dst.tolist()
        self.indegree = np.bincount(dst, minlength=n).tolist()

    def _prepare_accesses(self) -> None:
        p = self.program
        r = p.regions
        order = np.lexsort((r.write, r.task))
        task = r.task[order]
        self.acc_ptr = np.searchsorted(task, np.arange(p.leaf_tasks + 1)).tolist()
        self.acc_block = r.region[order].tolist()
        self.acc_bytes = r.bytes[order].tolist()
        self.acc_full = r.region_bytes[order].tolist()
        self.acc_write = r.write[order].tolist()
        self.acc_bypass = r.bypass[order].tolist()
        self.l2 = L2Cache(self.hw.memory.l2_bytes)

    # -- one leaf task on one core ----------------------------------------------------------
    def _duration(self, t: int, loaders: int) -> float:
        """Price task ``t`` as it starts: L2 lookups in start order, HBM shared by ``loaders``.

        L2 keeps, per region, how many of its bytes have been loaded or written; a read
        hits only a region that is complete, so tiles that merely share a region with
        data read earlier still come from HBM.
        """
        hbm = l2 = 0.0
        cache = self.l2
        entries, cap = cache.entries, cache.capacity
        blocks, sizes, full, writes, bypass = self.acc_block, self.acc_bytes, self.acc_full, \
            self.acc_write, self.acc_bypass
        for a in range(self.acc_ptr[t], self.acc_ptr[t + 1]):
            block, size = blocks[a], sizes[a]
            filled = entries.get(block)
            if filled is not None:
                entries.move_to_end(block)
                if not writes[a] and filled >= full[a]:
                    l2 += size
                    continue
            if not writes[a]:
                hbm += size
            if bypass[a]:
                if filled is not None and writes[a]:
                    cache.used -= entries.pop(block)
                continue
            grown = min(full[a], (filled or 0.0) + size)
            entries[block] = grown
            cache.used += grown - (filled or 0.0)
            if cache.used > cap:
                cache.evict()
        mte2 = self.mte2.us(self.loads[t], self.bursts[t], hbm, l2, loaders)
        self.task_mte2[t], self.task_hbm[t], self.task_l2[t] = mte2, hbm, l2
        # a write cannot leave faster than the task's share of HBM lets it
        extra = max(0.0, self.mte2.write_us(self.write_bytes[t], loaders) - self.write_pipe[t])
        total = mte2 + self.static_sum[t] + extra
        n = self.in_flight[t]
        if n <= 1:
            return self.head + total
        return self.head + total / n + (n - 1) / n * max(mte2, self.static_max[t] + extra)

    # -- control thread ----------------------------------------------------------------
    def build_times(self) -> np.ndarray:
        a, p = self.hw.aicpu, self.program
        calls = np.bincount(p.call_dev_task, minlength=p.dev_tasks)
        tasks = np.bincount(p.task_dev_task, minlength=p.dev_tasks)
        cost = a.build_dev_task_us + a.build_per_root_call_us * calls \
            + a.build_per_leaf_task_us * tasks
        return self.ctrl_ready + np.cumsum(cost)

    def release_times(self, built: np.ndarray, dev_end: np.ndarray) -> float:
        """When the control thread has retired every finished dev task.

        Retiring (freeing a dev task's task table and workspace) costs per leaf task and
        runs on the control thread once it has built everything, so it overlaps later dev
        tasks' execution; only the last dev task's retirement delays the exit.
        """
        a, p = self.hw.aicpu, self.program
        tasks = np.bincount(p.task_dev_task, minlength=p.dev_tasks)
        free = float(built[-1]) if built.size else self.ctrl_ready
        for k in range(p.dev_tasks):
            free = max(free, float(dev_end[k])) + a.release_per_leaf_task_us * float(tasks[k])
        return free

    # -- one dev task ------------------------------------------------------------------
    def run_dev_task(self, tasks: np.ndarray, start: float) -> float:
        n_threads = len(self.sched)
        queues = (deque(), deque())
        fair = self.fair
        # idle cores: one heap per core type, or per (thread, type) when dispatches
        # must be balanced across the schedule threads (modes 2 and 3)
        if fair:
            idle = [[[] for _ in range(2)] for _ in range(n_threads)]
            for core in range(self.n_aic + self.n_aiv):
                idle[core % n_threads][CoreType.AIC if core < self.n_aic else 0].append(core)
        else:
            idle = [list(range(self.n_aic, self.n_aic + self.n_aiv)), list(range(self.n_aic))]
        events: list = []
        seq = 0
        running = 0
        rr = 0
        first_send = [None] * n_threads
        last_send = [start] * n_threads
        free = self.thread_free
        for th in range(n_threads):
            free[th] = max(free[th], start)
            self.sched[th].rcv.append(start)
        core_type, indegree, succ, succ_ptr = self.core_type, self.indegree, self.succ, \
            self.succ_ptr
        heappop, heappush = heapq.heappop, heapq.heappush
        duration, dispatch_us, direct_send = self._duration, self.dispatch_us, self.direct_send
        task_core, task_start, task_end = self.task_core, self.task_start, self.task_end
        dispatches = [0] * n_threads

        def pick_core(t: int) -> int | None:
            nonlocal rr
            if not fair:
                heap = idle[t]
                return heappop(heap) if heap else None
            for k in range(n_threads):
                th = (rr + k) % n_threads
                if idle[th][t]:
                    rr = th + 1
                    return heappop(idle[th][t])
            return None

        def release_core(core: int, t: int) -> None:
            heappush(idle[core % n_threads][t] if fair else idle[t], core)

        def send(task: int, core: int, now: float) -> None:
            nonlocal seq, running
            th = core % n_threads
            f = free[th]
            at = (now if now > f else f) + dispatch_us
            free[th] = at
            dispatches[th] += 1
            if first_send[th] is None:
                first_send[th] = at
            last_send[th] = at
            running += 1
            end = at + duration(task, running)
            task_core[task], task_start[task], task_end[task] = core, at, end
            seq += 1
            heappush(events, (end, seq, _DONE, task, core))

        def dispatch(now: float) -> None:
            for t in (1, 0):   # AIC first, as the runtime walks its cores
                q = queues[t]
                while q:
                    core = pick_core(t)
                    if core is None:
                        break
                    send(q.popleft(), core, now)

        def reclaim(core: int, t: int) -> int | None:
            """The core a task just left, if it is idle and runs type ``t``: mode 1 sends
            the readied consumer straight there."""
            heap = idle[core % n_threads][t] if fair else idle[t]
            if core not in heap:
                return None
            heap.remove(core)
            heapq.heapify(heap)
            return core

        for task in tasks[np.asarray(indegree, dtype=np.int64)[tasks] == 0].tolist() \
                if tasks.size else []:
            queues[core_type[task]].append(task)
        dispatch(start)
        end_of_dev = start
        a = self.hw.aicpu
        handoff = a.ready_handoff_us
        while events:
            now, _, kind, task, core = heappop(events)
            if kind == _DONE:
                running -= 1
                th = core % n_threads
                lo, hi = succ_ptr[task], succ_ptr[task + 1]
                noticed = max(now, free[th]) + a.completion_us + a.resolve_edge_us * (hi - lo)
                free[th] = noticed
                if noticed > end_of_dev:
                    end_of_dev = noticed
                release_core(core, core_type[task])
                for s in succ[lo:hi]:
                    indegree[s] -= 1
                    if indegree[s] != 0:
                        continue
                    direct = reclaim(core, core_type[s]) if direct_send else None
                    if direct is not None:
                        send(s, direct, noticed)
                    else:   # through the shared ready queue
                        seq += 1
                        heappush(events, (noticed + handoff, seq, _READY, s, 0))
            else:
                queues[core_type[task]].append(task)
            dispatch(now)
        for th, thread in enumerate(self.sched):
            thread.dispatches += dispatches[th]
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
        ready_at = self.sched[0].handshake
        for k in range(p.dev_tasks):
            dev_start[k] = max(built[k], ready_at)
            dev_end[k] = self.run_dev_task(order[bounds[k]:bounds[k + 1]], dev_start[k])
            ready_at = dev_end[k] + a.dev_task_sync_us
        last = dev_end[-1] if p.dev_tasks else ready_at
        ctrl_done = self.release_times(built, dev_end)
        for thread in self.sched:
            thread.wait_all_finish = last
            thread.core_exit = last + a.exit_us / 2
            thread.exit = last + a.exit_us
        clock = self.hw.cores.clock_mhz
        pipe_cycles = {k: v * clock for k, v in self.static_pipes.items()}
        pipe_cycles["mte2"] = self.task_mte2 * clock
        pipe_cycles["scalar"] = np.zeros(p.leaf_tasks)
        return Timeline(
            aic_cores=self.n_aic, aiv_cores=self.n_aiv,
            task_core=self.task_core, task_start=self.task_start, task_end=self.task_end,
            ctrl_begin=0.0, ctrl_init=self.ctrl_ready, dev_build_end=built,
            dev_start=dev_start,
            dev_end=dev_end, ctrl_exit=max(last, ctrl_done) + a.exit_us, sched=self.sched,
            core_begin=0.005, core_init=self.sched[0].handshake,
            core_exit=np.full(self.n_aic + self.n_aiv, last + a.exit_us / 2),
            task_pipe_cycles=pipe_cycles, clock_mhz=clock,
            task_hbm_bytes=self.task_hbm, task_l2_bytes=self.task_l2)


def simulate(hw: Hardware, program: Program, options: RuntimeOptions) -> Timeline:
    return Machine(hw, program, options).run()
