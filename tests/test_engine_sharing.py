"""HBM shared as loaders come and go, the pending slot, and each scheduling mode's order.

Hand-built programs on the chip of tests/test_engine.py (one AIC, core 0; two AIV, cores 1
and 2; two schedule threads, core c owned by thread c % 2), with round numbers chosen so
every expected time is arithmetic on exact binary fractions.
"""
from __future__ import annotations

import pytest

from simcore.machine.costs import Mte2Model
from test_engine import AIC, AIV, A, CLOCK, CORE_1, CORE_2, HEAD, HW, THREADS_READY, \
    make_program, run

# HBM sharing chip: the HBM round trip is 1 us, the chip's HBM gives 10^6 bytes per us,
# one AIV core at most 8 * 10^5 (its cap), so two AIV loaders share HBM at 5 * 10^5 each.
HBM, CAP = 1e6, 8e5                                     # bytes per us
LATENCY = HW.pipes.mte2.fixed_cycles / CLOCK            # 1 us
SHARED = HW.model_copy(update={
    "memory": HW.memory.model_copy(update={"hbm_gbps": HBM / 1e3}),
    "pipes": HW.pipes.model_copy(update={"mte2": HW.pipes.mte2.model_copy(update={
        "aiv_hbm_gbps": CAP / 1e3, "aic_hbm_gbps": CAP / 1e3})})})


def _loaders(*nbytes):
    """One AIV task per entry, reading that many bytes of its own region (all misses)."""
    return make_program([0] * len(nbytes), accesses=[
        (t, 10 + t, b, b, 0, 0) for t, b in enumerate(nbytes)])


def _mte2_us(tl):
    return (tl.task_pipe_cycles["mte2"] / CLOCK).tolist()


def test_a_lone_loader_is_held_to_its_per_core_cap_not_the_chips_hbm():
    tl = run(_loaders(2e6), hw=SHARED)
    start = THREADS_READY + A.dispatch_us
    assert _mte2_us(tl) == [LATENCY + 2e6 / CAP]         # 3.5 us, not 1 + 2e6 / HBM = 3
    assert tl.task_end[0] == start + HEAD + LATENCY + 2e6 / CAP


def test_two_loaders_share_hbm_and_the_survivor_speeds_up_when_one_finishes():
    """Both start together and join after the latency at 5e5 bytes/us each.  Task 0 (1e6
    bytes) is done 2 us later; task 1 has 1e6 bytes left and, alone, gets its cap: 1.25 us
    more.  A share frozen at the start would have kept it at 5e5 for 4 us."""
    tl = run(_loaders(1e6, 2e6), hw=SHARED)
    start = THREADS_READY + A.dispatch_us
    assert tl.task_start.tolist() == [start, start]
    first = LATENCY + 1e6 / (HBM / 2)                      # 3 us
    second = first + (2e6 - 1e6) / CAP                     # 4.25 us
    assert _mte2_us(tl) == pytest.approx([first, second], abs=1e-9)
    assert tl.task_end.tolist() == pytest.approx(
        [start + HEAD + first, start + HEAD + second], abs=1e-9)
    frozen = LATENCY + 2e6 / (HBM / 2)
    assert second < frozen


def test_a_late_loader_slows_the_one_already_draining():
    """With one schedule thread the second task is sent a dispatch later, so task 0 drains
    alone at its cap for half a microsecond, then both share HBM until task 0 is done,
    then task 1 runs at its cap."""
    one_thread = SHARED.model_copy(update={"aicpu": SHARED.aicpu.model_copy(update={
        "threads": 2})})
    tl = run(_loaders(1e6, 2e6), hw=one_thread)
    s0 = THREADS_READY + A.dispatch_us
    s1 = s0 + A.dispatch_us
    alone = (s1 - s0) * CAP                               # bytes task 0 got alone: 4e5
    t0_done = s1 + LATENCY + (1e6 - alone) / (HBM / 2)    # both share 5e5 each
    t1_got = (t0_done - (s1 + LATENCY)) * HBM / 2
    t1_done = t0_done + (2e6 - t1_got) / CAP
    assert tl.task_start.tolist() == [s0, s1]
    assert _mte2_us(tl) == pytest.approx([t0_done - s0, t1_done - s1], abs=1e-9)


def test_water_filling_gives_a_capped_core_type_its_cap_and_the_rest_to_the_other():
    hw = SHARED.model_copy(update={"pipes": SHARED.pipes.model_copy(update={
        "mte2": SHARED.pipes.mte2.model_copy(update={"aiv_hbm_gbps": 300.0,
                                                     "aic_hbm_gbps": 900.0})})})
    m = Mte2Model(hw)
    assert m.rates(1, 0) == (3e5, 9e5)                  # alone: the cap
    assert m.rates(1, 1) == (3e5, 7e5)                  # AIV capped, AIC takes the rest
    assert m.rates(0, 2) == (3e5, 5e5)                  # equal shares below the AIC cap
    assert m.rates(4, 4) == (1.25e5, 1.25e5)            # HBM-bound: equal shares


def test_sharing_does_not_touch_a_task_served_from_l2_or_without_loads():
    """Only HBM bytes share HBM: an all-L2 reader waits the L2 round trip and streams at
    its copy rate whoever else loads."""
    region = 1e6
    tl = run(make_program([0, 0, 0], edges=[(0, 1)], accesses=[
        (0, 7, region, region, 1, 0), (1, 7, region, region, 0, 0),
        (2, 8, 4e6, 4e6, 0, 0)]), hw=SHARED)
    core_rate = HW.pipes.mte2.bytes_per_cycle * CLOCK
    assert _mte2_us(tl)[:2] == [0.0, HW.pipes.mte2.l2_hit_fixed_cycles / CLOCK
                                + region / core_rate]


# -- partial lines: the core pulls the bytes it asked for, HBM carries whole lines --------
# 32 rows of a 256 B-wide column tile, one row per 512 B line: 8192 bytes asked, 16384
# fetched (whole lines, l2.py)
ROWS, ROW_BYTES, LINE = 32, 256, 512
ASKED, FETCHED = ROWS * ROW_BYTES, ROWS * LINE


def _column_tile_loaders(n):
    return make_program([0] * n, accesses=[
        (t, 20 + t, ASKED, (1 << ROWS) - 1, 0, 0) for t in range(n)])


def test_a_core_limited_loader_pays_its_rate_on_the_bytes_it_asked_for_not_the_lines():
    """With HBM to spare the core's cap is the limit, and it holds the asked bytes: the
    line padding rides on HBM's spare bandwidth."""
    wide = SHARED.model_copy(update={"memory": SHARED.memory.model_copy(update={
        "hbm_gbps": 4 * HBM / 1e3})})
    tl = run(_column_tile_loaders(2), hw=wide)
    assert tl.task_hbm_bytes.tolist() == [FETCHED, FETCHED]
    # each loader's lines want 2 * CAP = 1.6e6 bytes/us of HBM, below its 2e6 share
    assert _mte2_us(tl) == pytest.approx([LATENCY + ASKED / CAP] * 2, abs=1e-12)
    assert _mte2_us(tl)[0] < LATENCY + FETCHED / CAP        # the old pricing


def test_an_hbm_limited_loader_pays_the_hbm_share_on_every_fetched_line():
    """On 10^6 bytes/us a lone loader's lines need more than HBM gives (2 * CAP > HBM):
    it drains the fetched lines at the whole HBM, and two such loaders halve it."""
    one = run(_column_tile_loaders(1), hw=SHARED)
    assert _mte2_us(one) == pytest.approx([LATENCY + FETCHED / HBM], abs=1e-12)
    two = run(_column_tile_loaders(2), hw=SHARED)
    assert _mte2_us(two) == pytest.approx([LATENCY + FETCHED / (HBM / 2)] * 2, abs=1e-12)


def test_mte2_model_prices_asked_bytes_at_the_cap_and_fetched_bytes_at_the_share():
    m = Mte2Model(SHARED)
    assert m.rates(1, 0, over_v=2.0) == (HBM / 2, CAP)           # HBM-bound on its lines
    assert m.rates(1, 0, over_v=1.0) == (CAP, CAP)               # core-bound
    lat = LATENCY
    assert m.us(1, 0, FETCHED, 0, 1, asked_bytes=ASKED) == pytest.approx(
        lat + max(ASKED / CAP, FETCHED / HBM))
    assert m.us(1, 0, FETCHED, 0, 1) == pytest.approx(lat + FETCHED / CAP)


# -- the pending slot ---------------------------------------------------------------------
ONE_AIV = HW.model_copy(update={"cores": HW.cores.model_copy(update={"aiv": 1})})


def test_the_pending_slot_starts_the_next_task_the_instant_the_running_one_ends():
    """One AIV core (core 1, thread 1): task 1 is pre-loaded while task 0 runs, so there
    is no notice-and-dispatch gap between them."""
    tl = run(make_program([2000, 2000]), hw=ONE_AIV)
    start = THREADS_READY + A.dispatch_us
    first_end = start + HEAD + 2000 / CLOCK
    assert tl.task_core.tolist() == [CORE_1, CORE_1]
    assert tl.task_start.tolist() == [start, first_end]
    # without a pending slot it would have waited for the completion and a dispatch
    assert tl.task_start[1] < first_end + A.completion_us + A.dispatch_us


# -- each mode's order on one hand-built graph ---------------------------------------------
def _order(tl):
    return sorted(range(len(tl.task_start)), key=lambda t: (tl.task_start[t], t))


def _fan_out():
    """One AIV core.  Task 0 (short) and task 1 start first (1 pre-loaded); 0 readies 2,
    3 and 4, which must share the core after 1."""
    return make_program([1000, 2000, 1000, 1000, 1000], edges=[(0, 2), (0, 3), (0, 4)])


def test_mode_0_queues_the_readied_tasks_in_order_and_pops_the_head():
    tl = run(_fan_out(), mode=0, hw=ONE_AIV)
    assert _order(tl) == [0, 1, 2, 3, 4]


def test_mode_1_sends_the_first_into_the_pending_slot_and_pops_the_queue_tail():
    """Task 2 goes straight into the core's pending slot; 3 and 4 queue, and after the
    first batch the queue is popped from its tail: 4 before 3."""
    tl = run(_fan_out(), mode=1, hw=ONE_AIV)
    assert _order(tl) == [0, 1, 2, 4, 3]


def _head_before_successor():
    """One AIV core.  0 runs, 1 is pre-loaded, 2 waits in the queue; 3 consumes 0."""
    return make_program([1000, 1000, 1000, 1000], edges=[(0, 3)])


def test_mode_0_gives_the_freed_slot_to_the_queue_head_before_the_new_successor():
    assert _order(run(_head_before_successor(), mode=0, hw=ONE_AIV)) == [0, 1, 2, 3]


def test_mode_1_gives_the_freed_slot_to_the_new_successor_before_the_queue():
    assert _order(run(_head_before_successor(), mode=1, hw=ONE_AIV)) == [0, 1, 3, 2]


def test_modes_2_and_3_keep_their_orders_and_pay_for_fairness():
    for fair, plain in ((2, 0), (3, 1)):
        a, b = run(_fan_out(), mode=fair, hw=ONE_AIV), run(_fan_out(), mode=plain, hw=ONE_AIV)
        assert _order(a) == _order(b)
        assert a.task_start[0] == b.task_start[0] + A.fairness_us


def test_mode_3_refuses_a_pending_slot_while_another_thread_has_an_idle_core():
    """Producer 1 (long) readies 2 and 3 while the other AIV core, of the other thread,
    is idle.  Mode 1 puts 3 into the producer core's pending slot; mode 3 declines
    (fairness) and queues it, so the other thread's idle core runs it.  (Mode 3 takes the
    first cores round the threads, so its producer sits on core 1, mode 1's on core 2.)"""
    program = make_program([1000, 2000, 2000, 2000], edges=[(1, 2), (1, 3)])
    assert run(program, mode=1).task_core.tolist() == [CORE_1, CORE_2, CORE_2, CORE_2]
    assert run(program, mode=3).task_core.tolist() == [CORE_2, CORE_1, CORE_1, CORE_2]


def test_every_mode_is_deterministic_and_the_modes_differ():
    program = make_program([1000, 2000, 1000, 1000, 1000, 3000],
                           edges=[(0, 2), (0, 3), (0, 4), (1, 5)],
                           core=[AIV, AIV, AIV, AIV, AIV, AIC])
    seen = []
    for mode in range(4):
        a, b = run(program, mode=mode), run(program, mode=mode)
        assert a.task_start.tolist() == b.task_start.tolist()
        assert a.task_core.tolist() == b.task_core.tolist()
        seen.append((tuple(a.task_start.tolist()), tuple(a.task_core.tolist())))
    assert len(set(seen)) == 4


def test_fair_mode_still_gives_a_readied_successor_to_the_resolving_threads_idle_core():
    """Upstream's fairness (MULTI_CORE_FAIR_SCH, aicore_manager.h) limits what a thread
    takes from the shared queue (GetReadyCoreNum: only its idle cores while another thread
    has one) and refuses the direct send's pending slot; the ids a thread resolves still
    go to its own idle cores first (BatchPushReadyQueue), fair or not.  So a chain stays
    on its thread in mode 2 as in mode 0, although the other thread's core is idle."""
    chain = make_program([1000, 1000, 1000], edges=[(0, 1), (1, 2)])
    for mode in (0, 2):
        cores = run(chain, mode=mode).task_core.tolist()
        assert len(set(cores)) == 1, (mode, cores)


def test_a_busy_thread_reaches_the_shared_queue_after_a_free_one_whose_core_ended_later():
    """A thread takes from the shared queue only in its own loop, after releasing its
    finished cores (upstream ResolveDepForAllAiCore, aicore_manager.h): a thread still
    resolving an earlier completion cannot take the queue's head the instant its core
    ends.  Task 0 (the AIC core, thread 0) ends first and has four successor edges that
    readied nothing (each also waits for task 5), so thread 0 resolves until 0.25 us after
    its AIV core 2 ends task 2; thread 1's core 1 ends task 1 in between, and thread 1,
    free, takes the queued task 5 into core 1's freed pending slot.  Noticed at its core's
    end, thread 0 would have taken it for core 2."""
    program = make_program([2000, 2625, 2000, 1000, 1000, 1000, 0, 0, 0, 0],
                           edges=[(0, s) for s in range(6, 10)] + [(5, s) for s in range(6, 10)],
                           core=[AIC] + [AIV] * 9)
    tl = run(program)
    s = tl.dev_start[0]
    # first sends: task 0 to core 0 and task 1 to core 1 (both threads free), then task 2
    # to core 2 (thread 0, after task 0's send) and the pending slots: task 3 into core 2's
    # (thread 0 keeps its batch), task 4 into core 1's; task 5 stays queued
    assert tl.task_core.tolist()[:5] == [0, CORE_1, CORE_2, CORE_2, CORE_1]
    p_end = s + A.dispatch_us + HEAD + 2000 / CLOCK                          # s + 3.5
    t2_end = s + 2 * A.dispatch_us + HEAD + 2000 / CLOCK                     # s + 4
    t1_end = s + A.dispatch_us + HEAD + 2625 / CLOCK                         # s + 4.125
    thread_0_free = p_end + A.completion_us + 4 * A.resolve_edge_us          # s + 4.25
    assert t2_end < t1_end < thread_0_free
    assert tl.task_end[[0, 1, 2]].tolist() == pytest.approx([p_end, t1_end, t2_end])
    # core 1 goes on with task 4 at t1_end; task 5 waits in its pending slot behind it
    t4_end = t1_end + HEAD + 1000 / CLOCK
    assert tl.task_core[5] == CORE_1
    assert tl.task_start[5] == pytest.approx(t4_end)


def test_a_core_that_ended_unnoticed_offers_no_pending_slot():
    """Core 2 (thread 0) ends task 3 with nothing pending while thread 0 still resolves
    task 0's sixteen edges (none readies a task: each also waits for task 6); task 6, readied by thread 1 and queued, must wait until
    thread 0 notices core 2 idle and sends it there, not be pre-loaded into the pending
    slot of a core that runs nothing (it would never start)."""
    k = 16
    program = make_program([1500, 500, 500, 0, 5000, 1000, 1000] + [0] * k,
                           edges=[(0, s) for s in range(7, 7 + k)] + [(1, 6)]
                           + [(6, s) for s in range(7, 7 + k)],
                           core=[AIC] + [AIV] * (6 + k))
    tl = run(program)
    s = tl.dev_start[0]
    assert tl.task_core.tolist()[:6] == [0, CORE_1, CORE_2, CORE_2, CORE_1, CORE_1]
    core_2_stops = s + 2 * A.dispatch_us + HEAD + 500 / CLOCK + HEAD        # s + 3.5
    thread_0_free = s + A.dispatch_us + HEAD + 1500 / CLOCK + A.completion_us \
        + k * A.resolve_edge_us                                                 # s + 5.25
    # task 1 ends on core 1, which goes on with task 4; thread 1 pre-loads task 5, then
    # resolves task 6 and queues it
    readied = s + A.dispatch_us + HEAD + 500 / CLOCK + A.completion_us \
        + A.dispatch_us + A.ready_edge_us + A.ready_handoff_us   # task 6's only predecessor
    assert tl.task_end[3] == pytest.approx(core_2_stops)
    assert core_2_stops < readied < thread_0_free
    assert tl.task_core[6] == CORE_2
    assert tl.task_start[6] == pytest.approx(thread_0_free + A.completion_us + A.dispatch_us)
    assert (tl.task_core >= 0).all() and (tl.task_end >= tl.task_start).all()
