"""The event engine on hand-built programs of two to five leaf tasks, timed by hand.

Each test builds a Program directly (no kernel file, no compiler) and a small
chip whose costs are round binary fractions, so every expected time below is
exact in floating point and is written as the arithmetic that produces it.

The chip: one AIC (core 0) and two AIV cores (1, 2); two schedule threads, a
core belongs to thread ``core % 2`` (core 1 to thread 1, core 2 to thread 0).
A leaf task with ``c`` vector cycles and no GM traffic runs ``head + c / clock``.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simcore.compiler.program import (CoreType, LeafFunction, Program, RegionAccesses,
                                      RootFunction)
from simcore.compiler.work import CubeWork, VectorWork, Work
from simcore.machine.engine import Machine
from simcore.spec.hardware import load_hardware
from simcore.spec.options import RuntimeOptions

_BASE = load_hardware("dav_2201")
HW = _BASE.model_copy(update={
    "cores": _BASE.cores.model_copy(update={"aic": 1, "aiv": 2, "clock_mhz": 1000.0}),
    "core": _BASE.core.model_copy(update={"head_overhead_us": 1.0, "first_task_delay_us": []}),
    "memory": _BASE.memory.model_copy(update={"hbm_gbps": 4000.0, "l2_gbps": 8000.0}),
    "pipes": _BASE.pipes.model_copy(update={"mte2": _BASE.pipes.mte2.model_copy(update={
        "bytes_per_cycle": 1000.0, "fixed_cycles": 1000.0, "l2_hit_fixed_cycles": 500.0,
        "burst_setup_cycles": 0.0, "aiv_copy_cycles": 0.0, "aic_copy_cycles": 0.0,
        "aiv_hbm_gbps": 1000.0, "aic_hbm_gbps": 1000.0, "aic_l2_bytes_per_cycle": None}),
        # one vector byte per cycle, 1-byte repeats, no start-up, issue or waits: a task's
        # vector bytes are its cycles
        "vector": {"default": _BASE.pipes.vector["default"].model_copy(update={
            "bytes_per_cycle": 1.0, "fixed_cycles": 0.0})},
        "vector_issue": _BASE.pipes.vector_issue.model_copy(update={
            "repeat_bytes": 1, "issue_cycles": 0.0, "dependency_cycles": 0.0})}),
    "aicpu": _BASE.aicpu.model_copy(update={
        "threads": 3, "init_us": 5.0, "handshake_us": 3.0,
        "build_dev_task_us": 1.0, "build_per_root_call_us": 0.5, "build_per_leaf_task_us": 0.25,
        "dispatch_us": 0.5, "completion_us": 0.25, "resolve_edge_us": 0.125, "ready_edge_us": 0.0625,
        "ready_handoff_us": 1.0, "fairness_us": 0.25, "dev_task_sync_us": 16.0,
        "release_per_leaf_task_us": 0.125, "exit_us": 2.0, "action_scale": 1.0})})
A = HW.aicpu
AIV, AIC = CoreType.AIV, CoreType.AIC
HEAD = HW.core.head_overhead_us
CLOCK = HW.cores.clock_mhz                     # cycles per us
THREADS_READY = A.init_us + A.handshake_us     # schedule threads can send from here on
CORE_1, CORE_2 = 1, 2                          # the AIV cores, owned by threads 1 and 0


def make_program(cycles, *, edges=(), call_of=None, dev_task_of_call=None, core=None,
                 accesses=(), hub_of=None) -> Program:
    """A Program of ``len(cycles)`` leaf tasks with that many vector cycles each.

    ``call_of[t]``: the root call of task t (default all in call 0);
    ``dev_task_of_call[c]``: the dev task of call c (default all in dev task 0);
    ``core[t]``: AIV or AIC (default AIV); ``edges``: (producer, consumer) pairs;
    ``accesses``: (task, region, bytes, line bitmap, write, bypass) GM accesses;
    ``hub_of[(producer, consumer)]``: the hub an edge goes through (default none).
    """
    n = len(cycles)
    task_call = np.asarray(call_of if call_of is not None else [0] * n, np.int64)
    n_calls = int(task_call.max()) + 1
    call_dev = np.asarray(dev_task_of_call if dev_task_of_call is not None else [0] * n_calls,
                          np.int64)
    call_pos = np.array([int(np.sum(call_dev[:c] == call_dev[c])) for c in range(n_calls)])
    task_op = np.array([int(np.sum(task_call[:t] == task_call[t])) for t in range(n)])
    acc = np.array(accesses, dtype=float).reshape(-1, 6)
    reads = acc[:, 4] == 0
    read_task = acc[reads, 0].astype(np.int64)
    zeros = np.zeros(n)
    edges = sorted(edges)
    return Program(
        kernel="hand_built", root_functions=[RootFunction(0, 0, "root")],
        leaf_functions=[LeafFunction(index=0, hash=0, name="leaf", core_type=AIV, label="leaf",
                                     root=0, order=0)],
        call_root=np.zeros(n_calls, np.int64), call_bodies=np.ones(n_calls, np.int64),
        call_dev_task=call_dev, call_in_dev_task=call_pos,
        task_call=task_call, task_leaf=np.zeros(n, np.int64), task_op=task_op,
        task_core=np.asarray(core if core is not None else [AIV] * n, np.int64),
        work=Work.from_columns(
            # one "default"-kind vector row per task: zero fixed cycles in the test chip,
            # so ``cycles`` is what the task's bytes cost at the default rate
            VectorWork.per_task({"default": (np.asarray(cycles, float),
                                             np.ones(n))}),
            CubeWork.per_task({}), n, in_flight=np.ones(n),
            mte2_bytes=np.bincount(read_task, weights=acc[reads, 2], minlength=n),
            mte2_loads=np.bincount(read_task, minlength=n).astype(float)),
        regions=RegionAccesses(
            task=acc[:, 0].astype(np.int64), region=acc[:, 1].astype(np.int64),
            bytes=acc[:, 2], lines=acc[:, 3].astype(np.uint64), write=acc[:, 4].astype(bool),
            bypass=acc[:, 5].astype(bool)),
        edge_src=np.array([s for s, _ in edges], np.int64),
        edge_dst=np.array([d for _, d in edges], np.int64), workspace_bytes=0,
        edge_hub=np.array([(hub_of or {}).get(e, -1) for e in edges], np.int64))


def run(program, mode=0, hw=HW):
    return Machine(hw, program, RuntimeOptions(device_sched_mode=mode)).run()


def test_a_chain_of_two_tasks_runs_back_to_back_on_the_resolving_threads_core():
    """Producer 0 -> consumer 1: the consumer starts only after the producer's completion
    was noticed and resolved; the resolving thread then sends it to its own idle core, the
    one just freed, without the shared queue (upstream BatchPushReadyQueue)."""
    tl = run(make_program([2000, 2000], edges=[(0, 1)]))
    # the control thread, started at init_us, builds one dev task of one call and two tasks
    built = A.init_us + A.build_dev_task_us + A.build_per_root_call_us \
        + 2 * A.build_per_leaf_task_us
    assert tl.dev_build_end.tolist() == [built]
    assert built < THREADS_READY                       # so the dev task waits for the threads
    assert tl.dev_start.tolist() == [THREADS_READY]
    p_start = THREADS_READY + A.dispatch_us            # first thing core 1's thread does
    p_end = p_start + HEAD + 2000 / CLOCK
    # one successor edge, from the consumer's only predecessor: a read, no atomic
    noticed = p_end + A.completion_us + A.ready_edge_us
    c_start = noticed + A.dispatch_us                              # no queue: a dispatch
    c_end = c_start + HEAD + 2000 / CLOCK
    assert tl.task_start.tolist() == [p_start, c_start]
    assert tl.task_end.tolist() == [p_end, c_end]
    assert tl.task_core.tolist() == [CORE_1, CORE_1]   # the lowest idle core, then the freed one
    assert tl.dev_end.tolist() == [c_end + A.completion_us]     # its completion noticed
    assert tl.kernel_us == c_end - p_start


def test_two_independent_tasks_run_side_by_side_on_two_cores():
    """Each core's own thread pays the dispatch, so both start together; with one schedule
    thread the second waits for the first dispatch."""
    tl = run(make_program([2000, 2000]))
    start = THREADS_READY + A.dispatch_us
    assert tl.task_start.tolist() == [start, start]
    assert tl.task_core.tolist() == [CORE_1, CORE_2]
    assert tl.task_end.tolist() == [start + HEAD + 2000 / CLOCK, start + HEAD + 2000 / CLOCK]
    one_thread = HW.model_copy(update={"aicpu": A.model_copy(update={"threads": 2})})
    tl = run(make_program([2000, 2000]), hw=one_thread)
    assert tl.task_start.tolist() == [start, start + A.dispatch_us]


def test_one_pass_over_a_threads_cores_notices_every_core_found_finished():
    """A schedule thread's pass reads the finish registers of all its cores of one type and
    then releases and resolves every core it found finished (upstream
    ``ResolveDepForAllAiCore``): the completion check is paid per pass, not per task.  With
    one schedule thread owning both AIV cores, two tasks that end at the same instant cost
    one check; a task that ends after the pass began waits for the next pass and pays its
    own; and cores of the other type are another pass."""
    one_thread = HW.model_copy(update={"aicpu": A.model_copy(update={"threads": 2})})
    first_sent = THREADS_READY + A.dispatch_us
    # the second send is one dispatch later: 500 more cycles make both end together
    together = first_sent + A.dispatch_us + HEAD + 2000 / CLOCK
    tl = run(make_program([2500, 2000]), hw=one_thread)
    assert tl.task_end.tolist() == [together, together]
    assert tl.dev_end.tolist() == [together + A.completion_us]
    # 100 cycles later the first pass (begun at ``together``) has read the registers already
    tl = run(make_program([2600, 2000]), hw=one_thread)
    assert tl.task_end[0] == together + 100 / CLOCK < together + A.completion_us
    assert tl.dev_end.tolist() == [together + 2 * A.completion_us]
    # an AIC and an AIV task of the same thread ending together: one pass per core type
    tl = run(make_program([2500, 2000], core=[AIC, AIV]), hw=one_thread)
    assert tl.task_end.tolist() == [together, together]
    assert tl.dev_end.tolist() == [together + 2 * A.completion_us]


def test_a_task_with_every_core_busy_waits_in_a_pending_slot():
    """Three AIV tasks, two AIV cores: the third is sent at once into a busy core's pending
    slot (the threads tie, so thread 0's core 2) and starts the instant that core's task
    ends, without a dispatch gap, even though core 1 comes free first: upstream picks pend-
    ready cores round their index, not by who finishes first."""
    tl = run(make_program([1000, 2000, 2000]))
    start = THREADS_READY + A.dispatch_us
    second_end = start + HEAD + 2000 / CLOCK
    assert tl.task_core.tolist() == [CORE_1, CORE_2, CORE_2]
    assert tl.task_start.tolist() == [start, start, second_end]
    assert tl.task_end[2] == second_end + HEAD + 2000 / CLOCK
    # the send was paid while core 2 worked
    assert tl.sched[0].first_send == [start] and tl.sched[0].sched_exec == [start + A.dispatch_us]


# the test chip with the cold start measured on silicon, spread over its three cores:
# core 0 (the AIC) waits least, core 2 (the last AIV) most
COLD = HW.model_copy(update={"core": HW.core.model_copy(update={
    "first_task_delay_us": [0.0, 1.0, 4.0]})})


def test_a_cores_first_task_of_the_launch_starts_its_cold_start_late():
    """The quantiles lie over the cores in block order: the AIC gets the quickest, the last
    AIV the slowest, the one between the median.  Only a core's first task waits; the
    consumer that follows it on the same core starts as a warm core's would."""
    assert COLD.core.cold_start_us(3).tolist() == [0.0, 1.0, 4.0]
    warm = run(make_program([2000, 2000], edges=[(0, 1)]))
    cold = run(make_program([2000, 2000], edges=[(0, 1)]), hw=COLD)
    assert cold.task_core.tolist() == warm.task_core.tolist() == [CORE_1, CORE_1]
    # core 1 is the median core: its first task starts 1 us late and ends 1 us late ...
    assert cold.task_start[0] == warm.task_start[0] + 1.0
    assert cold.task_end[0] == warm.task_end[0] + 1.0
    # ... and its second runs as long as before, 1 us later only because the first ended so
    assert cold.task_start[1] == warm.task_start[1] + 1.0
    assert cold.task_end[1] - cold.task_start[1] == warm.task_end[1] - warm.task_start[1]


def test_a_short_kernel_spread_over_many_cores_waits_for_its_slowest_core():
    """Two independent tasks on the two AIV cores: the kernel ends when the slower core's
    cold task does, so spreading work wider costs the slowest core's cold start once."""
    warm = run(make_program([2000, 2000]))
    cold = run(make_program([2000, 2000]), hw=COLD)
    assert sorted((cold.task_start - warm.task_start).tolist()) == [1.0, 4.0]
    assert cold.task_end.max() == warm.task_end.max() + 4.0
    # two dev tasks on core 1: it is warm for the second (the delay is per launch), which
    # starts later only by the first's delay
    two = make_program([2000, 2000], call_of=[0, 1], dev_task_of_call=[0, 1])
    warm, cold = run(two), run(two, hw=COLD)
    assert cold.task_core.tolist() == [CORE_1, CORE_1]
    assert (cold.task_start - warm.task_start).tolist() == [1.0, 1.0]


def test_a_cold_task_looks_up_l2_when_it_starts_not_when_it_is_sent():
    """Tasks 1 and 3 read the same region.  Task 1 is sent first, to core 2, the slowest to
    wake (4 us); task 3 goes into core 1's pending slot behind task 0, and core 1, awake
    since task 0, starts it 2 us before task 1 starts.  So task 3 looks up L2 first: it
    misses and fetches the region from HBM, and task 1 finds it in L2."""
    region = 1_000_000.0
    reads = [(1, 9, region, region, 0, 0), (3, 9, region, region, 0, 0)]
    tl = run(make_program([0, 0, 5000, 0], accesses=reads), hw=COLD)
    assert tl.task_core.tolist() == [CORE_1, CORE_2, CORE_2, CORE_1]
    assert tl.task_start[3] < tl.task_start[1]
    assert (tl.task_hbm_bytes[3], tl.task_l2_bytes[3]) == (region, 0.0)
    assert (tl.task_hbm_bytes[1], tl.task_l2_bytes[1]) == (0.0, region)


def test_cold_start_quantiles_must_rise_from_the_quickest_core():
    for bad in ([1.0, 0.5], [-0.1, 1.0], [2.0]):
        with pytest.raises(ValueError, match="quantiles|quickest"):
            type(HW.core).model_validate({"head_overhead_us": 0.5, "first_task_delay_us": bad})
    assert HW.core.cold_start_us(4).tolist() == [0.0] * 4     # none set: no cold start


def test_a_dev_task_starts_after_the_previous_one_ends_and_is_handed_over():
    """Two dev tasks of one task each: the second is built long before, but waits for the
    first to end and for the hand-over (dev_task_sync)."""
    tl = run(make_program([2000, 2000], call_of=[0, 1], dev_task_of_call=[0, 1]))
    one_dev_task = A.build_dev_task_us + A.build_per_root_call_us + A.build_per_leaf_task_us
    assert tl.dev_build_end.tolist() == [A.init_us + one_dev_task, A.init_us + 2 * one_dev_task]
    first_end = THREADS_READY + A.dispatch_us + HEAD + 2000 / CLOCK
    first_dev_end = first_end + A.completion_us
    second = first_dev_end + A.dev_task_sync_us
    assert tl.dev_end[0] == first_dev_end
    assert tl.dev_start.tolist() == [THREADS_READY, second]
    assert tl.task_start.tolist() == [THREADS_READY + A.dispatch_us, second + A.dispatch_us]
    # the schedule threads record each dev task's receive time
    assert all(th.rcv == [THREADS_READY, second] for th in tl.sched)
    # the schedule threads exit once the last dev task has ended; the control thread first
    # retires that dev task (one leaf task), then exits
    assert tl.ctrl_exit == tl.dev_end[1] + A.release_per_leaf_task_us * 1 + A.exit_us
    assert [th.exit for th in tl.sched] == [tl.dev_end[1] + A.exit_us] * 2


def _producer_consumer_and_bystander():
    """Task 0 (short) and task 1 (long) start together on cores 1 and 2; task 2 consumes
    task 1.  When task 1 ends, core 1 has long been idle."""
    return make_program([1000, 2000, 2000], edges=[(1, 2)])


def test_both_modes_give_a_lone_consumer_to_the_resolving_threads_freed_core():
    tl0 = run(_producer_consumer_and_bystander(), mode=0)
    tl1 = run(_producer_consumer_and_bystander(), mode=1)
    p_end = THREADS_READY + A.dispatch_us + HEAD + 2000 / CLOCK
    noticed = p_end + A.completion_us + A.ready_edge_us      # by thread 0, core 2's owner
    for tl in (tl0, tl1):
        assert tl.task_core.tolist() == [CORE_1, CORE_2, CORE_2]
        assert tl.task_start[2] == noticed + A.dispatch_us


def test_an_edge_pays_the_atomic_only_when_its_successor_still_waits_for_another():
    """Task 1 (short) feeds tasks 2 and 3; task 3 also waits for task 0 (long).  When task
    1 ends, its thread finds task 2's count at 1: task 2 is ready, with only a read of the
    count; task 3's count is 2, so that edge decrements it atomically (upstream
    ResolveDepDyn).  Task 2 is sent once both edges are paid."""
    tl = run(make_program([4000, 1000, 1000, 1000], edges=[(1, 2), (1, 3), (0, 3)]))
    assert tl.task_core[:2].tolist() == [CORE_1, CORE_2]
    short_end = THREADS_READY + A.dispatch_us + HEAD + 1000 / CLOCK
    assert tl.task_end[1] == short_end
    noticed = short_end + A.completion_us + A.ready_edge_us + A.resolve_edge_us
    assert A.ready_edge_us < A.resolve_edge_us
    assert tl.task_start[2] == noticed + A.dispatch_us
    assert tl.task_core[2] == CORE_2                   # the resolving thread's freed core
    assert tl.task_start[3] > tl.task_end[0]


def test_a_hub_is_resolved_by_the_thread_that_resolves_its_last_producer():
    """Producers 0 (short) and 1 (long) both feed consumers 2 and 3 through a hub (the
    device encoder's dummy call op, simcore/compiler/encode.py).  When 0 ends, its thread
    decrements the hub's count atomically; when 1 ends, its thread finds the hub's count
    at 1 and resolves the hub on the spot (ResolveDepDyn), reading both consumers' counts
    at 1: three reads and no dispatch for the hub.  Without it the four direct edges
    would leave two reads for that thread, after two atomics on the first."""
    all_to_all = [(0, 2), (0, 3), (1, 2), (1, 3)]
    tl = run(make_program([1000, 4000, 1000, 1000], edges=all_to_all,
                          hub_of={e: 0 for e in all_to_all}))
    long_end = THREADS_READY + A.dispatch_us + HEAD + 4000 / CLOCK
    assert tl.task_end[1] == long_end
    noticed = long_end + A.completion_us + 3 * A.ready_edge_us
    assert sorted(tl.task_start[2:].tolist()) == [noticed + A.dispatch_us,
                                                  noticed + A.ready_handoff_us + A.dispatch_us]
    direct = run(make_program([1000, 4000, 1000, 1000], edges=all_to_all))
    assert min(direct.task_start[2:]) == long_end + A.completion_us + 2 * A.ready_edge_us \
        + A.dispatch_us
    assert tl.task_core.size == 4                      # the hub is not a leaf task


def _with_end_hub(program: Program) -> Program:
    """``program`` with every task of call 0 resolving one end hub when it ends."""
    tails = np.flatnonzero(program.task_call == 0)
    return dataclasses.replace(program, tail_task=tails,
                               tail_hub=np.full(tails.size, program.hubs, np.int64))


def test_the_tasks_of_a_call_pay_their_end_hubs_edges_after_they_end():
    """Three independent tasks (the third waits in core 2's pending slot): each, once its
    completion is noticed, resolves its edge to the call's end hub (upstream
    AddDummyCallsAtBeginningAndEnding).  The first two decrement the hub's count
    atomically; the last finds it at 1 and only reads it.  Nothing waits for the hub, so
    no task moves; the dev task ends that read later."""
    plain = run(make_program([1000, 2000, 2000]))
    hub = run(_with_end_hub(make_program([1000, 2000, 2000])))
    assert hub.task_start.tolist() == plain.task_start.tolist()
    assert hub.task_end.tolist() == plain.task_end.tolist()
    assert hub.dev_end.tolist() == [plain.dev_end[0] + A.ready_edge_us]


def test_a_call_of_many_short_independent_tasks_is_slowed_by_its_end_hub():
    """Twelve short tasks on two cores and one schedule thread keep the thread busier than
    the cores: the atomic each task pays on its end hub's count delays every later send."""
    one_thread = HW.model_copy(update={"aicpu": A.model_copy(update={"threads": 2})})
    tasks = [200] * 12
    plain = run(make_program(tasks), hw=one_thread)
    hub = run(_with_end_hub(make_program(tasks)), hw=one_thread)
    assert hub.kernel_us > plain.kernel_us
    assert hub.dev_end[0] - plain.dev_end[0] >= 5 * A.resolve_edge_us


def test_action_scale_is_the_five_per_action_costs_scaled_together():
    """``aicpu.action_scale`` keeps the per-action costs' ratios (upstream's cost model) and
    says how fast the chip runs them: a factor of 2 is the same chip as every one of the
    five costs doubled, and it leaves the other AICPU costs (build, hand-over) alone."""
    program = make_program([1000, 4000, 1000, 1000], edges=[(0, 2), (1, 2), (1, 3)])
    scaled = HW.model_copy(update={"aicpu": A.model_copy(update={"action_scale": 2.0})})
    doubled = HW.model_copy(update={"aicpu": A.model_copy(update={
        k: 2 * getattr(A, k) for k in ("dispatch_us", "resolve_edge_us", "ready_edge_us",
                                       "completion_us", "ready_handoff_us")})})
    a, b, plain = run(program, hw=scaled), run(program, hw=doubled), run(program)
    assert a.task_start.tolist() == b.task_start.tolist() != plain.task_start.tolist()
    assert a.dev_end.tolist() == b.dev_end.tolist()
    assert a.dev_build_end.tolist() == plain.dev_build_end.tolist()


def _producer_with_two_consumers():
    """Task 0 (short) on core 1, task 1 (long) on core 2; tasks 2 and 3 both consume 1."""
    return make_program([1000, 2000, 2000, 2000], edges=[(1, 2), (1, 3)])


def test_mode_0_keeps_one_consumer_and_queues_the_other_to_another_thread():
    """Thread 0 frees core 2 and readies 2 and 3: the most recent (3) gets its own idle
    core, 2 goes to the shared queue and, after the hand-off, to core 1 of thread 1."""
    tl = run(_producer_with_two_consumers(), mode=0)
    p_end = THREADS_READY + A.dispatch_us + HEAD + 2000 / CLOCK
    noticed = p_end + A.completion_us + 2 * A.ready_edge_us
    assert tl.task_core.tolist() == [CORE_1, CORE_2, CORE_1, CORE_2]
    assert tl.task_start[3] == noticed + A.dispatch_us
    assert tl.task_start[2] == noticed + A.ready_handoff_us + A.dispatch_us


def test_mode_1_keeps_both_consumers_on_the_producers_core():
    """L2 affinity: 2 goes straight to the freed core 2, and 3 into core 2's pending slot
    (TrySendTaskDirectly's second choice), so both run where the producer's output is."""
    tl = run(_producer_with_two_consumers(), mode=1)
    p_end = THREADS_READY + A.dispatch_us + HEAD + 2000 / CLOCK
    noticed = p_end + A.completion_us + 2 * A.ready_edge_us
    c_start = noticed + A.dispatch_us
    c_end = c_start + HEAD + 2000 / CLOCK
    assert tl.task_core.tolist() == [CORE_1, CORE_2, CORE_2, CORE_2]
    assert tl.task_start[2] == c_start
    assert tl.task_start[3] == c_end                   # pre-loaded: no gap


def test_mode_2_takes_cores_round_the_threads_and_pays_for_the_balance():
    """Thread 0 owns cores 0 and 2, thread 1 owns core 1.  Mode 2 takes the first idle
    core of thread 0, then of thread 1, where mode 0 takes the lowest index; every
    dispatch costs fairness_us more."""
    tl = run(make_program([2000, 2000]), mode=2)
    assert tl.task_core.tolist() == [CORE_2, CORE_1]
    start = THREADS_READY + A.dispatch_us + A.fairness_us
    assert tl.task_start.tolist() == [start, start]


def test_a_consumer_reads_what_its_producer_wrote_from_l2():
    """The producer writes a whole region; the consumer reads it back from L2 and pays the
    L2 round trip instead of the HBM one.  A third task reads a region nobody wrote."""
    region = 1_000_000.0
    m = HW.pipes.mte2
    tl = run(make_program([0, 0, 0], edges=[(0, 1)], accesses=[
        (0, 7, region, region, 1, 0),        # task 0 writes region 7
        (1, 7, region, region, 0, 0),        # task 1 reads it
        (2, 8, region, region, 0, 0)]))      # task 2 reads region 8, never written
    assert tl.task_l2_bytes.tolist() == [0.0, region, 0.0]
    assert tl.task_hbm_bytes.tolist() == [0.0, 0.0, region]
    core_rate = m.bytes_per_cycle * HW.cores.clock_mhz          # bytes per us: one core's MTE2
    from_l2 = m.l2_hit_fixed_cycles / CLOCK + region / core_rate
    from_hbm = m.fixed_cycles / CLOCK + region / core_rate
    assert tl.task_pipe_cycles["mte2"].tolist() == [0.0, from_l2 * CLOCK, from_hbm * CLOCK]
    assert tl.task_end[1] - tl.task_start[1] == HEAD + from_l2


def test_a_task_of_many_small_copy_ins_waits_for_their_setups_one_after_another():
    """Two AIV tasks read the same 64 bytes from HBM: one in a single copy-in, the other
    in eight of 8 bytes.  Their bytes stream in far less than a setup, so the second's
    MTE2 phase is the GM round trip plus seven copy setups (the first hides in the round
    trip), and an AIC task's copies into L1 set up in their own, shorter time."""
    hw = HW.model_copy(update={"pipes": HW.pipes.model_copy(update={
        "mte2": HW.pipes.mte2.model_copy(update={"aiv_copy_cycles": 200.0,
                                                 "aic_copy_cycles": 60.0})})})
    m = hw.pipes.mte2
    one = [(0, 1, 64.0, 1.0, 0, 0)]
    eight = [(1, 2 + k, 8.0, 1.0, 0, 0) for k in range(8)]
    tl = run(make_program([0, 0], accesses=one + eight), hw=hw)
    mte2 = tl.task_pipe_cycles["mte2"]
    assert m.fixed_cycles < mte2[0] < m.fixed_cycles + 10      # the bytes' few cycles
    assert mte2[1] == pytest.approx(m.fixed_cycles + 7 * 200.0)
    assert tl.task_end[1] - tl.task_start[1] == pytest.approx(HEAD + mte2[1] / CLOCK)
    aic = run(make_program([0], core=[AIC], accesses=[(0, 2 + k, 8.0, 1.0, 0, 0)
                                                      for k in range(8)]), hw=hw)
    assert aic.task_pipe_cycles["mte2"][0] == pytest.approx(m.fixed_cycles + 7 * 60.0)


def _snapshot(tl) -> dict:
    """Every field of a Timeline as plain, copied Python values."""
    out = {}
    for f in dataclasses.fields(tl):
        v = getattr(tl, f.name)
        if isinstance(v, np.ndarray):
            v = v.tolist()
        elif isinstance(v, dict):
            v = {k: a.tolist() for k, a in v.items()}
        elif f.name == "sched":
            v = [dataclasses.asdict(th) for th in v]
        out[f.name] = v
    return out


def test_running_one_machine_twice_gives_the_same_timeline_and_leaves_the_first_alone():
    """Every run starts from idle threads, an empty L2 and unresolved edges, and hands its
    Timeline arrays and thread records over; a second run can neither see nor change them."""
    region = 8192.0
    program = make_program(
        [2000, 1000, 2000, 1000, 2000], edges=[(0, 1), (1, 2), (3, 4)],
        call_of=[0, 0, 0, 1, 1], dev_task_of_call=[0, 1],
        accesses=[(0, 5, region, region, 1, 0), (1, 5, region, region, 0, 0),
                  (2, 6, region, region, 0, 0), (3, 6, region, region, 0, 0),
                  (4, 5, region, region, 0, 0)])
    machine = Machine(HW, program, RuntimeOptions(device_sched_mode=1))
    first = machine.run()
    before = _snapshot(first)
    second = machine.run()
    assert _snapshot(second) == before
    assert _snapshot(first) == before
    assert first.task_start is not second.task_start and first.sched[0] is not second.sched[0]
    assert before["task_l2_bytes"] == [0.0, region, 0.0, region, region]   # exercised L2
