"""The swimlane writers' shortcuts write what the plain per-float, per-task code writes:
timestamps from counter ticks on the 1e-4 us grid, the Dependence Solving windows found by
bisection, execution hints on whole columns."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.emit import jsontext as jt
from pipeline.emit import rowtext as rt
from pipeline.emit import swimlane as sw
from pipeline.formats import swimlane as fmt
from pipeline.formats.task_id import formal_name

from conftest import draw_task_view, rt_lines


def _grid_texts(m):
    return rt_lines(rt.grid_decimal(m))


def test_grid_texts_are_the_rounded_floats():
    rng = np.random.default_rng(7)
    ticks = np.concatenate([np.arange(0, 5000), rng.integers(0, 5 * 10 ** 9, 20000)])
    for freq in (50, 1000, 1):
        m = jt.grid_of(ticks, freq)
        stamps = (ticks / freq).tolist()
        assert _grid_texts(m) == [float.__repr__(round(x, 4)) for x in stamps]
        # differences of two stamps
        later = ticks + rng.integers(0, 900, ticks.size)
        d = jt.grid_of(later, freq) - m
        want = [float.__repr__(round(b - a, 4)) for a, b in zip(stamps, (later / freq).tolist())]
        assert _grid_texts(d) == want
        # a stamp less one grid step (a flow's lead)
        lead = round(fmt.DEP_LEAD_US * jt.GRID)
        assert _grid_texts(m[m >= lead] - lead) == [
            float.__repr__(round(x - fmt.DEP_LEAD_US, 4))
            for x, k in zip(stamps, m.tolist()) if k >= lead]
    # ticks that are not on the grid, or too large for 15 digits, take the float path
    assert jt.grid_of(ticks, 3) is None and jt.grid_of(ticks, 1.5) is None
    assert jt.grid_of(np.asarray([10 ** 13]), 50) is None
    assert jt.grid_of(np.asarray([-1]), 50) is None


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_counter_texts_on_the_grid_match_the_event_loop(data):
    v, order, start, length = draw_task_view(data, 60, 2000, 300)
    freq = data.draw(st.sampled_from([50, 1000]))
    start_c, end_c = start + 10 ** 6, start + length + 10 ** 6
    want = jt.compact_items(sw.ready_counters(v, order, start_c, end_c, freq))
    assert b", ".join(p for p in sw._counter_texts(v, order, start_c, end_c, freq)
                     if p).decode() == want


def _hints_by_loop(v, order, ts, te):
    runs = {}
    for t, leaf, start, end in zip(order.tolist(), v.leaf[order].tolist(), ts[order].tolist(),
                                   te[order].tolist()):
        dur = end - start
        r = runs.setdefault(leaf, [0, 0.0, dur, t, dur, t])
        r[0], r[1] = r[0] + 1, r[1] + dur
        if dur > r[2]:
            r[2], r[3] = dur, t
        if dur < r[4]:
            r[4], r[5] = dur, t
    seq, tid = v.seq.tolist(), v.task_id.tolist()
    return {leaf: fmt.execution_hint(total / n, longest, formal_name(seq[hi], tid[hi]),
                                     shortest, formal_name(seq[lo], tid[lo]))
            for leaf, (n, total, longest, hi, shortest, lo) in runs.items()}


def test_execution_hints_pick_the_first_longest_and_shortest_in_order():
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(1, 200))
        v = sw.TaskView(seq=rng.integers(0, 5, n), task_id=rng.integers(0, 1000, n),
                        call=np.zeros(n, np.int64), root=np.zeros(n, np.int64),
                        op=np.arange(n), leaf=rng.integers(0, 7, n),
                        core_type=np.zeros(n, np.int64), edge_src=np.zeros(0, np.int64),
                        edge_dst=np.zeros(0, np.int64), root_hash=[1], leaf_hash=[2] * 7,
                        labels=["x"] * 7)
        c0 = rng.integers(0, 1000, n)
        c1 = c0 + rng.integers(0, 6, n)      # few distinct durations: many ties
        ts, te = (c0 + 10 ** 6) / 50, (c1 + 10 ** 6) / 50
        order = rng.permutation(n)
        got, want = sw._execution_hints(v, order, ts, te), _hints_by_loop(v, order, ts, te)
        assert got == want and list(got) == list(want)


@pytest.mark.parametrize("name", ["multi_stitch_add", "softmax"])
def test_events_from_ticks_match_the_float_path(monkeypatch, name):
    """The merged swimlane's task, flow and counter events: the grid path and the
    per-float path agree (softmax has dependencies, hence flows)."""
    from pipeline.runner import resolve_kernel
    from simcore.compiler import compile_kernel
    from simcore.machine import simulate
    from simcore.spec.hardware import load_hardware
    kernel = resolve_kernel(f"configs/kernels/{name}.yaml", {})
    hw = load_hardware("dav_2201")
    program = compile_kernel(kernel, hw)
    tl = simulate(hw, program, kernel.options.runtime_options)
    freq = hw.aicpu.profile_freq_mhz
    assert jt.grid_of(sw.to_cycles(tl.task_start, freq), freq) is not None
    fast = b"".join(sw.merged_swimlane_texts(program, tl, freq))
    monkeypatch.setattr(jt, "grid_of", lambda cycles, freq: None)
    assert b"".join(sw.merged_swimlane_texts(program, tl, freq)) == fast
    assert name != "softmax" or b'"ph": "s"' in fast


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4)), max_size=60), st.booleans())
def test_core_order_is_the_lexsort(pairs, big_cores):
    from pipeline.emit.tasks import core_order
    core = np.asarray([c * (1 << 20 if big_cores else 1) for c, _ in pairs], np.int64)
    key = np.asarray([k / 2 for _, k in pairs], float)
    assert core_order(core, key).tolist() == np.lexsort((key, core)).tolist()
