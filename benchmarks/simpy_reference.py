"""A straightforward SimPy implementation of the engine's scheduling model, for speed comparison.

Same model, written the obvious way: every leaf task is a SimPy process that
waits for its predecessors, takes a core of its type and a schedule thread to be
dispatched, runs for the duration the engine priced it at, and takes a schedule
thread again to report completion and resolve its successors.  Dev tasks run one
after another.  It leaves out what SimPy makes awkward (per-thread core
ownership, FIFO/LIFO ready queues, hubs), so its timings agree only roughly; the point
is the cost per leaf task of a process-per-task simulation.
"""
from __future__ import annotations

import numpy as np
import simpy


def simulate_simpy(program, hw, durations: np.ndarray, n_threads: int) -> float:
    env = simpy.Environment()
    cores = {0: simpy.Resource(env, capacity=hw.cores.aiv),
             1: simpy.Resource(env, capacity=hw.cores.aic)}
    threads = simpy.Resource(env, capacity=n_threads)
    a = hw.aicpu.scaled_actions()
    dev = program.task_dev_task
    same = dev[program.edge_src] == dev[program.edge_dst]
    src, dst = program.edge_src[same], program.edge_dst[same]
    preds = [[] for _ in range(program.leaf_tasks)]
    succs = [[] for _ in range(program.leaf_tasks)]
    for s, d in zip(src.tolist(), dst.tolist()):
        preds[d].append(s)
        succs[s].append(d)
    waiting = [len(p) for p in preds]          # predecessors each task still waits for
    done = [None] * program.leaf_tasks
    starts = np.zeros(program.leaf_tasks)
    ends = np.zeros(program.leaf_tasks)

    def task(t):
        if preds[t]:
            yield simpy.AllOf(env, [done[p] for p in preds[t]])
        with cores[int(program.task_core[t])].request() as core:
            yield core
            with threads.request() as th:
                yield th
                yield env.timeout(a.dispatch_us)
            starts[t] = env.now
            yield env.timeout(float(durations[t]))
            ends[t] = env.now
            with threads.request() as th:
                yield th
                # an edge to a successor's last predecessor only reads its count
                last = sum(waiting[d] == 1 for d in succs[t])
                for d in succs[t]:
                    waiting[d] -= 1
                yield env.timeout(a.completion_us + a.ready_edge_us * last
                                  + a.resolve_edge_us * (len(succs[t]) - last))
        done[t].succeed()

    def launch():
        order = np.argsort(dev, kind="stable")
        bounds = np.searchsorted(dev[order], np.arange(program.dev_tasks + 1))
        for k in range(program.dev_tasks):
            members = order[bounds[k]:bounds[k + 1]].tolist()
            for t in members:
                done[t] = env.event()
            procs = [env.process(task(t)) for t in members]
            yield simpy.AllOf(env, procs)
            yield env.timeout(a.dev_task_sync_us)

    env.process(launch())
    env.run()
    return float(ends.max() - starts.min()) if program.leaf_tasks else 0.0
