"""Swimlane files of a ``runtime_debug_mode=1`` run: ``tilefwk_L1_prof_data.json``,
``merged_swimlane.json``, ``bubble_analysis.log`` and the ``AICORE Prof Summary``
block (formats: pipeline/formats/swimlane.py)."""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Iterator

import numpy as np

from simcore.compiler import Program
from simcore.machine import Timeline

from ..formats import program as pj
from ..formats import swimlane as fmt
from ..formats.cores import kind_of_block
from ..formats.task_id import formal_name, func_id, op_idx, task_key
from . import jsontext as jt
from . import rowtext as rt
from .atomic import open_bytes, write_text
from .tasks import TaskView, core_order, core_runs, dev_task_successors
from .topo import call_ops, root_operands

BASE_CYCLES = 1_000_000   # device counters are absolute; start the run at a fixed, nonzero tick


def to_cycles(t_us: np.ndarray | float, freq: float):
    return np.rint(np.asarray(t_us) * freq).astype(np.int64) + BASE_CYCLES


@dataclass(frozen=True)
class Stamps:
    """A run's task times as the swimlane files stamp them: the counter ticks
    (``start_c``, ``end_c``), the us those ticks stand for (``ts``, ``te``) and the same
    us as integers on jsontext's 1e-4 grid (``ms``, ``me``; None when the ticks are off
    it, and ``me`` None whenever ``ms`` is)."""
    start_c: np.ndarray
    end_c: np.ndarray
    ts: np.ndarray
    te: np.ndarray
    ms: np.ndarray | None
    me: np.ndarray | None

    @classmethod
    def of(cls, timeline: Timeline, freq: float, shift: int = 0) -> "Stamps":
        """``shift``: ticks added to every stamp, to place the run as a later launch
        (``launch_shift``)."""
        start_c = to_cycles(timeline.task_start, freq) + shift
        end_c = to_cycles(timeline.task_end, freq) + shift
        ms = jt.grid_of(start_c, freq)
        me = jt.grid_of(end_c, freq) if ms is not None else None
        return cls(start_c, end_c, start_c / freq, end_c / freq, ms, me)


def l1_prof_data(program: Program, timeline: Timeline, freq: float,
                 shift: int = 0) -> list[dict]:
    v, st = TaskView.of(program), Stamps.of(timeline, freq, shift)
    order = np.lexsort((timeline.task_start, timeline.task_core))
    cols = zip(timeline.task_core[order].tolist(), v.seq[order].tolist(), v.leaf[order].tolist(),
               v.task_id[order].tolist(), st.start_c[order].tolist(), st.end_c[order].tolist())
    cores: list[dict] = []
    for block, seq, leaf, tid, start, end in cols:
        if not cores or cores[-1]["blockIdx"] != block:
            cores.append(fmt.l1_core(block, kind_of_block(block, timeline.aic_cores)))
        cores[-1]["tasks"].append(fmt.l1_task(seq, leaf, tid, start, end))
    return cores


def _successor_lists(v: TaskView) -> tuple[list[int], list[int]]:
    """Successors inside each task's dev task (those dyn_topo lists), as CSR lists."""
    same = v.seq[v.edge_src] == v.seq[v.edge_dst]
    src, dst = v.edge_src[same], v.edge_dst[same]
    order = np.argsort(src, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=v.size))])
    return ptr.tolist(), dst[order].tolist()


def ready_counters(v: TaskView, order: np.ndarray, start_c: np.ndarray, end_c: np.ndarray,
                   freq: float) -> list[dict]:
    return list(iter_ready_counters(v, order, start_c, end_c, freq))


def iter_ready_counters(v: TaskView, order: np.ndarray, start_c: np.ndarray,
                        end_c: np.ndarray, freq: float) -> Iterator[dict]:
    """ReadyCount_AIC/AIV/Total and Dependence Solving, as the merger counts them.

    Walking the task start and end stamps in time order (at one stamp, tasks in
    ``order``, a task's start before its end): when the first event of a time point
    belongs to a new dev task, that dev task's tasks without predecessors become
    ready; a start takes a task out; an end makes each successor whose last
    predecessor it was ready.  A counter changes only where its count changes.
    Dependence Solving is the successor edges resolved per us over windows longer
    than ``DEP_WINDOW_US``, stamped at the window's start.
    """
    ptr, succ = _successor_lists(v)
    indeg = np.bincount(np.asarray(succ, dtype=np.int64), minlength=v.size)
    aic = v.is_aic.tolist()
    initial: dict[int, list[int]] = {}
    for t in np.flatnonzero(indeg == 0).tolist():
        initial.setdefault(int(v.seq[t]), [0, 0])[0 if aic[t] else 1] += 1
    pos = np.arange(order.size)
    times = np.concatenate([start_c[order], end_c[order]])
    task = np.concatenate([order, order])
    is_end = np.concatenate([np.zeros(order.size, bool), np.ones(order.size, bool)])
    walk = np.lexsort((is_end, np.concatenate([pos, pos]), times))
    times, task, is_end = times[walk].tolist(), task[walk].tolist(), is_end[walk].tolist()
    seq, left = v.seq.tolist(), indeg.tolist()
    ready, cur_seq = [0, 0], None
    dep_time, dep_count = times[0] / freq if times else 0.0, 0
    i = 0
    while i < len(times):
        now, diff = times[i], [0, 0]
        if seq[task[i]] != cur_seq:
            cur_seq = seq[task[i]]
            diff = list(initial.get(cur_seq, [0, 0]))
        while i < len(times) and times[i] == now:
            t = task[i]
            if not is_end[i]:
                diff[0 if aic[t] else 1] -= 1
            else:
                dep_count += ptr[t + 1] - ptr[t]
                for s in succ[ptr[t]:ptr[t + 1]]:
                    left[s] -= 1
                    if left[s] == 0:
                        diff[0 if aic[s] else 1] += 1
            i += 1
        now_us = now / freq
        for k, name in ((0, fmt.READY_COUNTERS[0]), (1, fmt.READY_COUNTERS[1])):
            if diff[k]:
                ready[k] += diff[k]
                yield fmt.counter_event(name, now_us, ready[k])
        if diff[0] + diff[1]:
            yield fmt.counter_event(fmt.READY_COUNTERS[2], now_us, ready[0] + ready[1])
        if now_us - dep_time > fmt.DEP_WINDOW_US:
            yield fmt.counter_event(fmt.DEP_SOLVING, dep_time, dep_count / (now_us - dep_time))
            dep_time, dep_count = now_us, 0


def _counter_texts(v: TaskView, order: np.ndarray, start_c: np.ndarray, end_c: np.ndarray,
                   freq: float) -> Iterator[memoryview]:
    """``iter_ready_counters``' events as compact JSON, the walk done on whole columns
    (``_ready_walk``), a slice of events at a time."""
    if order.size == 0:
        return
    ticks, diff, resolved = _ready_walk(v, order, start_c, end_c)
    now = (ticks / freq).tolist()
    dep_groups, dep_open, dep_rate = _dep_windows(now, resolved)
    ready = np.cumsum(diff, axis=1)
    # the events in time point order, at one point AIC, AIV, Total, Dependence Solving: a
    # counter has an event where it changes, Dependence Solving where a window closes
    present = np.zeros((ticks.size, 4), bool)
    present[:, :2] = diff.T != 0
    present[:, 2] = diff[0] + diff[1] != 0
    present[dep_groups, 3] = True
    point, which = np.divmod(np.flatnonzero(present), 4)
    counts = np.vstack([ready, ready[0] + ready[1], np.zeros_like(ready[0])])
    count = counts[which, point]        # AIC, AIV, Total (Dependence Solving has a rate)
    rate = np.zeros(ticks.size)
    rate[dep_groups] = dep_rate
    rate = np.where(which == 3, rate[point], 0.0)
    opened = np.arange(ticks.size)
    opened[dep_groups] = dep_open
    point = np.where(which == 3, opened[point], point)     # a window is stamped at its opening
    stamp = ticks[point] / freq         # now[point]
    yield from _counter_pieces(which, count, rate, stamp, jt.grid_of(ticks[point], freq))


def _ready_walk(v: TaskView, order: np.ndarray, start_c: np.ndarray,
                end_c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ReadyCount walk of ``iter_ready_counters`` on whole columns: per time point its
    ticks, the change of the AIC and AIV ready counts (2 x points) and the successor edges
    resolved.

    Same walk: stamps in (time, position in ``order``, start before end) order, grouped
    by time point.  Per group, a counter's change is: the new dev task's initially ready
    tasks (when the group's first stamp opens a dev task), minus the tasks starting,
    plus the tasks whose last predecessor (in walk order) ends in the group.
    """
    n = order.size
    same = v.seq[v.edge_src] == v.seq[v.edge_dst]
    src, dst = v.edge_src[same], v.edge_dst[same]
    indeg = np.bincount(dst, minlength=v.size)
    nsucc = np.bincount(src, minlength=v.size)
    kind = (~v.is_aic).astype(np.int64)           # 0: AIC, 1: AIV
    seq = v.seq.astype(np.int64)
    pos = np.arange(n)
    times = np.concatenate([start_c[order], end_c[order]])
    task = np.concatenate([order, order])
    is_end = np.concatenate([np.zeros(n, bool), np.ones(n, bool)])
    walk = np.lexsort((is_end, np.concatenate([pos, pos]), times))
    times, task, is_end = times[walk], task[walk], is_end[walk]
    new_group = np.ones(times.size, bool)
    new_group[1:] = times[1:] != times[:-1]
    group = np.cumsum(new_group) - 1
    first = np.flatnonzero(new_group)
    n_groups = first.size
    diff = np.zeros((2, n_groups), np.int64)
    seq_first = seq[task[first]]
    opens = np.ones(n_groups, bool)
    opens[1:] = seq_first[1:] != seq_first[:-1]
    initial = np.zeros((int(seq.max()) + 1, 2), np.int64)
    free = indeg == 0
    np.add.at(initial, (seq[free], kind[free]), 1)
    diff[:, opens] += initial[seq_first[opens]].T
    starts = np.flatnonzero(~is_end)
    np.add.at(diff, (kind[task[starts]], group[starts]), -1)
    ends = np.flatnonzero(is_end)
    end_at = np.empty(v.size, np.int64)
    end_at[task[ends]] = ends
    last_pred = np.full(v.size, -1, np.int64)
    np.maximum.at(last_pred, dst, end_at[src])
    waits = np.flatnonzero(indeg > 0)
    np.add.at(diff, (kind[waits], group[last_pred[waits]]), 1)
    resolved = np.zeros(n_groups, np.int64)
    np.add.at(resolved, group[ends], nsucc[task[ends]])
    return times[first], diff, resolved


def _dep_windows(now: list[float], resolved: np.ndarray) -> tuple[list[int], list[int],
                                                                  list[float]]:
    """Dependence Solving: a window closes at the first time point more than
    DEP_WINDOW_US after it opened; per window, the point closing it, the point opening it
    and the edges resolved per us in between."""
    dep_groups, dep_open, dep_rate = [], [], []
    window = fmt.DEP_WINDOW_US
    # window by window rather than point by point: time points increase, so the closing
    # one is found by bisection (then nudged to the exact float test the walk makes), and
    # the edges resolved in between are a difference of running sums
    resolved_sum = np.cumsum(resolved).tolist()
    opened, before = 0, 0
    while True:
        start = now[opened]
        g = max(bisect_right(now, start + window), opened + 1)
        while g > opened + 1 and now[g - 1] - start > window:
            g -= 1
        while g < len(now) and not now[g] - start > window:
            g += 1
        if g >= len(now):
            break
        dep_groups.append(g)
        dep_open.append(opened)
        dep_rate.append((resolved_sum[g] - before) / (now[g] - start))
        opened, before = g, resolved_sum[g]
    return dep_groups, dep_open, dep_rate


# a counter event (fmt.counter_event) after the ", " separating it from the one before;
# head: its name and what comes before the time stamp
_COUNTER = rt.Layout(', %(head)s%(ts)s, "args": {"size": %(size)s}}')
_COUNTER_HEADS = rt.texts([f'{{"name": {jt.string(name)}, "pid": {fmt.MACHINE_PID}, '
                           f'"tid": {fmt.COUNTER_TID}, "ph": "C", "ts": '
                           for name in (*fmt.READY_COUNTERS, fmt.DEP_SOLVING)])


def _counter_pieces(which: np.ndarray, count: np.ndarray, rate: np.ndarray, stamp: np.ndarray,
                    grid: np.ndarray | None) -> Iterator[memoryview]:
    """The counter events' text: ``which`` counter (3: Dependence Solving, whose size is
    its ``rate``; the others' is their ``count``), at ``stamp`` us (``grid``: the same
    on jsontext's grid, when it is)."""
    real = jt.real_for(stamp, rate)
    for lo, hi in jt.chunks(which.size):
        k = which[lo:hi]
        size = rt.decimal(count[lo:hi])
        dep = np.flatnonzero(k == 3)
        if dep.size:
            size = rt.overlay(size, dep, rt.texts([real(r) for r in rate[lo:hi][dep].tolist()]))
        ts = (rt.grid_decimal(grid[lo:hi]) if grid is not None else
              rt.texts([real(round(t, 4)) for t in stamp[lo:hi].tolist()]))
        yield _COUNTER.render(hi - lo, head=rt.pick(_COUNTER_HEADS, k), ts=ts, size=size)[2:]


def _execution_hints(v: TaskView, order: np.ndarray, ts: np.ndarray,
                     te: np.ndarray) -> dict[int, str]:
    """Per leaf function: mean, longest and shortest run over its tasks, summed and
    compared in ``order`` (the L1 file's) as the merger does: the first longest and the
    first shortest task win."""
    if order.size == 0:
        return {}
    leaf = v.leaf[order].astype(np.int64)
    dur = te[order] - ts[order]
    size = int(leaf.max()) + 1
    n = np.bincount(leaf, minlength=size)
    # bincount adds the weights one by one in array order: the loop's running total
    total = np.bincount(leaf, weights=dur, minlength=size)
    pos = np.arange(order.size)
    hints = {}
    picks = []
    for pick in (np.maximum, np.minimum):
        best = np.full(size, -np.inf if pick is np.maximum else np.inf)
        pick.at(best, leaf, dur)
        # the first task in ``order`` that reaches it
        at = np.full(size, order.size, np.int64)
        hit = dur == best[leaf]
        np.minimum.at(at, leaf[hit], pos[hit])
        picks.append((best, order[np.minimum(at, order.size - 1)]))
    (longest, hi), (shortest, lo) = picks
    seq, task_id = v.seq, v.task_id
    _, first = np.unique(leaf, return_index=True)
    for k in leaf[np.sort(first)].tolist():     # leaves in order of first appearance
        a, b = int(hi[k]), int(lo[k])
        hints[k] = fmt.execution_hint(
            float(total[k]) / int(n[k]), float(longest[k]),
            formal_name(int(seq[a]), int(task_id[a])), float(shortest[k]),
            formal_name(int(seq[b]), int(task_id[b])))
    return hints


def merged_swimlane(program: Program, timeline: Timeline, freq: float, shift: int = 0) -> dict:
    v, tl, st = TaskView.of(program), timeline, Stamps.of(timeline, freq, shift)
    ts, te = st.ts, st.te
    opmagic, _ = call_ops(v)
    events: list[dict] = [fmt.process_meta(), fmt.thread_meta(fmt.FAKE_CORE, -1)]
    events += [fmt.thread_meta(kind_of_block(int(b), tl.aic_cores), int(b))
               for b in np.unique(tl.task_core)]
    order = np.lexsort((tl.task_start, tl.task_core))
    hints = _execution_hints(v, order, ts, te)
    order_hints = ["\n".join(f.merge_info) for f in program.leaf_functions]
    tid_of = fmt.thread_id(tl.task_core)
    ins, outs, hint = operand_hints(program, v)
    cols = zip(order.tolist(), *(c[order].tolist() for c in (v.seq, v.task_id, v.leaf, v.root,
                                                             v.op, opmagic, tid_of, ts, te,
                                                             hint)))
    for k, (t, seq, tid, leaf, root, op, magic, lane, start, end, h) in enumerate(cols):
        args = {"event-hint": fmt.event_hint(seq, tid, v.root_hash[root], magic,
                                             v.leaf_hash[leaf], order_hints[leaf]),
                "ioperand-hint": ins[h], "ooperand-hint": outs[h],
                "execution-hint": hints[leaf], "color": v.labels[leaf],
                "taskId": tid, "seqNo": seq, "wrapId": -1}
        if order_hints[leaf]:
            args["hashOrder-hint"] = order_hints[leaf]
        events.append({
            "args": args, "cat": "event", "id": k,
            "name": fmt.task_name(seq, tid, root, op, v.labels[leaf]),
            "ph": "X", "pid": fmt.MACHINE_PID, "tid": lane,
            "ts": round(start, 4), "dur": round(end - start, 4)})
    lanes, ts_l, te_l = tid_of.tolist(), ts.tolist(), te.tolist()
    src, dst = flow_edges(v, order)
    for k, (a, b) in enumerate(zip(src.tolist(), dst.tolist()), start=order.size):
        events += fmt.flow_events(k, lanes[a], te_l[a], lanes[b], ts_l[b])
    events += ready_counters(v, order, st.start_c, st.end_c, freq)
    return {"traceEvents": events}


def aicore_summary(timeline: Timeline, freq: float | None = None,
                   shift: int = 0) -> tuple[float, float, str]:
    """AICore end-to-end time, utilization and the block PyPTO prints.  With ``freq``, from
    the task stamps as the swimlane files hold them (whole counter ticks), which is what
    upstream's summary computes from them; without, from the simulated times."""
    tl = timeline
    if tl.task_start.size == 0:
        return 0.0, 0.0, fmt.summary_text(0.0, 0.0)
    if freq is None:
        ts, te = tl.task_start, tl.task_end
    else:
        st = Stamps.of(tl, freq, shift)
        ts, te = st.ts, st.te
    e2e = float(te.max() - ts.min())
    lanes = np.unique(tl.task_core).size
    util = float((te - ts).sum()) / (lanes * e2e) if e2e > 0 else 0.0
    return e2e, util, fmt.summary_text(e2e, util)


def bubble_log(program: Program, timeline: Timeline, freq: float, shift: int = 0) -> str:
    """Per core: work span, total wait, wait for the scheduler vs for predecessors, the
    floats computed in upstream's order (analysis_wait_cycles): times are ticks / freq,
    sums run task by task, predecessors are dyn_topo's."""
    v, tl, st = TaskView.of(program), timeline, Stamps.of(timeline, freq, shift)
    ts, te = st.ts, st.te
    min_start = float(ts.min()) if ts.size else 0.0
    pred_ready = np.full(v.size, min_start)
    src, dst, _ = dev_task_successors(v)
    np.maximum.at(pred_ready, dst, te[src])
    # the merger's core 0 for tasks the L1 file lacks: here none
    blocks = [fmt.bubble_core_block(fmt.FAKE_CORE, -1, 0, 0.0, 0, 0, [])]
    top_all = []
    seq, task_id = v.seq, v.task_id
    # per core its tasks by start (ties by index, as a stable sort of each core's tasks)
    by_core = core_order(tl.task_core, ts)
    for lo, hi in core_runs(tl.task_core[by_core]):
        idx = by_core[lo:hi]
        block = tl.task_core[idx[0]]
        prev_end = np.concatenate([[min_start], te[idx][:-1]])
        wait_sched = ts[idx] - np.maximum(prev_end, pred_ready[idx])
        # the ten longest waits, ties in time order (a stable sort, as sorted() was)
        first = np.argsort(-wait_sched, kind="stable")[:10]
        top = [(float(wait_sched[k]), task_key(int(seq[t]), int(task_id[t])),
                fmt.task_name(int(seq[t]), int(task_id[t]), int(v.root[t]), int(v.op[t]),
                              v.labels[v.leaf[t]]))
               for k, t in zip(first.tolist(), idx[first].tolist())]
        top_all += top
        blocks.append(fmt.bubble_core_block(
            kind_of_block(int(block), tl.aic_cores), int(block), idx.size,
            float(te[idx][-1]) - min_start, _running_sum(ts[idx] - prev_end),
            _running_sum(wait_sched), [fmt.bubble_task_line(k, n, w) for w, k, n in top[:3]]))
    top10 = [fmt.bubble_task_line(k, n, w, fmt.TOP_WAIT_GAP)
             for w, k, n in sorted(top_all, key=lambda r: -r[0])[:10]]
    return fmt.bubble_log(top10, blocks)


def _running_sum(values: np.ndarray) -> float:
    """The sum a Python loop adding one value at a time gives (numpy's sum pairs them)."""
    return float(np.cumsum(values)[-1]) if values.size else 0


def write_swimlane_files(program: Program, timeline: Timeline, freq: float, out: Path,
                         aicpu_views: list[str] = (), shift: int = 0) -> str:
    """The swimlane files; ``aicpu_views``: the AICPU View events of each perf file
    (perf_trace.write_perf_files), put in front of the merged swimlane's own, the last
    file's first, as upstream's gen_perfetto leaves them after prepending file by file.
    ``shift``: the ticks of the launch the files hold (``launch_shift``)."""
    write_l1_prof_data(program, timeline, freq, out / fmt.L1_PROF_FILE, shift)
    write_merged_swimlane(program, timeline, freq, out / fmt.MERGED_FILE, aicpu_views, shift)
    write_text(out / fmt.BUBBLE_FILE, bubble_log(program, timeline, freq, shift))
    return aicore_summary(timeline, freq, shift)[2]


def launch_shift(rounds: int, round_ticks: int) -> int:
    """Ticks from the first launch to the last: every launch rewrites the L1 file
    (upstream's DumpDevicePerf, once per RunWithProfile), so after ``rounds`` launches it
    holds the last, whose AICore stamps are that much later than the first's."""
    return (rounds - 1) * round_ticks


# tilefwk_L1_prof_data.json as json.dumps(l1_prof_data(...), indent=4) lays it out
_L1_CORE = '    {\n        "blockIdx": %d,\n        "coreType": %s,\n        "tasks": [\n'
_L1_TASK = rt.Layout(
    ',\n            {\n                "seqNo": %(seq)s,\n                "leafIndex": %(leaf)s,\n'
    '                "subGraphId": %(leaf)s,\n                "taskId": %(tid)s,\n'
    '                "execStart": %(start)s,\n                "execEnd": %(end)s\n            }')
_L1_CORE_END = b"\n        ]\n    }"


def write_l1_prof_data(program: Program, timeline: Timeline, freq: float, path: Path,
                       shift: int = 0) -> None:
    """``l1_prof_data`` written as ``write_json`` would, a slice of tasks at a time."""
    v, tl = TaskView.of(program), timeline
    order = core_order(tl.task_core, tl.task_start)
    block = tl.task_core[order]
    st = Stamps.of(tl, freq, shift)
    start, end = st.start_c[order], st.end_c[order]
    seq, leaf, tid = v.seq[order], v.leaf[order], v.task_id[order]
    with open_bytes(path) as out:
        if order.size == 0:
            out.write(b"[]\n")
            return
        out.write(b"[\n")
        for k, (lo, hi) in enumerate(core_runs(block)):
            b = int(block[lo])
            kind = jt.string(kind_of_block(b, tl.aic_cores))
            out.write(((",\n" if k else "") + _L1_CORE % (b, kind)).encode())
            for a, z in jt.chunks(hi - lo):
                cut = slice(lo + a, lo + z)
                text = _L1_TASK.render(
                    z - a, seq=rt.decimal(seq[cut]), leaf=rt.decimal(leaf[cut]),
                    tid=rt.decimal(tid[cut]), start=rt.decimal(start[cut]),
                    end=rt.decimal(end[cut]))
                out.write(text if a else text[2:])      # a run's first task has no ",\n"
            out.write(_L1_CORE_END)
        out.write(b"\n]\n")


def _time_texts(st: Stamps):
    """For tasks ``o``: the texts of ``round(ts, 4)`` and ``round(te - ts, 4)`` as byte rows,
    from the counter ticks when they lie on jsontext's grid, else float by float."""
    ms, me, ts, te = st.ms, st.me, st.ts, st.te
    if me is not None and not np.any(me < ms):
        return lambda o: (rt.grid_decimal(ms[o]), rt.grid_decimal(me[o] - ms[o]))
    real = jt.real_for(ts, te)
    return lambda o: (rt.texts([real(round(a, 4)) for a in ts[o].tolist()]),
                      rt.texts([real(round(b - a, 4))
                                for a, b in zip(ts[o].tolist(), te[o].tolist())]))


# a task event of merged_swimlane (fmt.event_hint, fmt.task_name), after the ", " that
# separates it from the event before
_TASK_EVENT = rt.Layout(
    ', {"args": {"event-hint": "Task:[%(seq)s-%(fid)s-%(opi)s], rootHash:%(root_hash)s, '
    'callOpMagic:%(magic)s, leafHash:%(leaf_hash)s, TaskId:%(tid)s%(tail)s", '
    '"ioperand-hint": %(ins)s, "ooperand-hint": %(outs)s%(middle)s'
    '"taskId": %(tid)s, "seqNo": %(seq)s, "wrapId": -1%(extra)s}, "cat": "event", '
    '"id": %(id)s, "name": "%(seq)s-%(fid)s-%(opi)s-%(root)s-%(op)s%(label)s", "ph": "X", '
    '"pid": %(pid)s, "tid": %(lane)s, "ts": %(ts)s, "dur": %(dur)s}')


def _leaf_parts(program: Program, hints: dict[int, str]) -> dict[str, np.ndarray]:
    """Per leaf function, the parts of its task events that do not change from task to
    task, as tables of byte rows."""
    leaves = program.leaf_functions
    order_hints = ["\n".join(f.merge_info) for f in leaves]
    return {
        "tail": rt.texts([jt.string("\n" + h)[1:-1] if h else "" for h in order_hints]),
        "middle": rt.texts([
            f', "execution-hint": '
            f'{jt.string(hints[k]) if k in hints else ""}, "color": {jt.string(f.label)}, '
            for k, f in enumerate(leaves)]),
        "extra": rt.texts([f', "hashOrder-hint": {jt.string(h)}' if h else ""
                           for h in order_hints]),
        "label": rt.texts([jt.string(f"({f.label})")[1:-1] for f in leaves])}


def operand_hints(program: Program, v: TaskView) -> tuple[list[str], list[str], np.ndarray]:
    """The ioperand-hint and ooperand-hint texts of the CALL ops of every root function
    (their GM operands in program.json), and per task which: the op index of its call."""
    ins, outs, starts, counts = ["[]"], ["[]"], [], []
    for root in program.root_functions:
        tensors, raws, per_op = root_operands(root)
        starts.append(len(ins))
        counts.append(max(per_op, default=-1) + 1)
        for op in range(counts[-1]):
            read, written = per_op.get(op, ((), ()))
            ins.append(pj.operand_hint(read, tensors, raws))
            outs.append(pj.operand_hint(written, tensors, raws))
    start, count = np.asarray(starts, np.int64), np.asarray(counts, np.int64)
    root, op = v.root.astype(np.int64), v.op.astype(np.int64)
    known = op < count[root] if root.size else np.zeros(0, bool)
    return ins, outs, np.where(known, start[root] + op, 0) if root.size else root


def _task_event_texts(v: TaskView, program: Program, timeline: Timeline, order: np.ndarray,
                      st: Stamps) -> Iterator[memoryview]:
    """The task events of ``merged_swimlane``, as compact JSON, a slice at a time."""
    tl = timeline
    opmagic, _ = call_ops(v)
    per_leaf = _leaf_parts(program, _execution_hints(v, order, st.ts, st.te))
    root_hash, leaf_hash = v.hash_texts()
    ins, outs, hint = operand_hints(program, v)
    ins, outs = rt.texts([jt.string(h) for h in ins]), rt.texts([jt.string(h) for h in outs])
    pid = rt.texts([str(fmt.MACHINE_PID)])
    lanes = fmt.thread_id(tl.task_core)
    texts = _time_texts(st)
    for lo, hi in jt.chunks(order.size):
        o = order[lo:hi]
        tid, leaf, root = v.task_id[o], v.leaf[o], v.root[o]
        start, dur = texts(o)
        yield _TASK_EVENT.render(
            hi - lo, seq=rt.decimal(v.seq[o]), fid=rt.decimal(func_id(tid)),
            opi=rt.decimal(op_idx(tid)), root_hash=rt.pick(root_hash, root),
            magic=rt.decimal(opmagic[o]), leaf_hash=rt.pick(leaf_hash, leaf),
            tid=rt.decimal(tid), id=rt.decimal(np.arange(lo, hi)), root=rt.decimal(root),
            op=rt.decimal(v.op[o]), pid=pid, lane=rt.decimal(lanes[o]), ts=start, dur=dur,
            ins=rt.pick(ins, hint[o]), outs=rt.pick(outs, hint[o]),
            **{name: rt.pick(table, leaf) for name, table in per_leaf.items()})[2:]


# the two flow events of a dependency edge (fmt.flow_events)
_FLOW = rt.Layout(
    ', {"cat": %(cat)s, "id": %(id)s, "name": %(cat)s, "ph": "s", "pid": %(pid)s, '
    '"tid": %(src_lane)s, "ts": %(src_ts)s}, {"bp": "e", "cat": %(cat)s, "id": %(id)s, '
    '"name": %(cat)s, "ph": "f", "pid": %(pid)s, "tid": %(dst_lane)s, "ts": %(dst_ts)s}')


def _flow_stamps(st: Stamps):
    """For edges (a, b): the texts of ``round(te[a] - DEP_LEAD_US, 4)`` and
    ``round(ts[b], 4)`` as byte rows; on jsontext's grid the lead is one step."""
    ms, me, ts, te = st.ms, st.me, st.ts, st.te
    lead = round(fmt.DEP_LEAD_US * jt.GRID)
    if me is not None and lead == fmt.DEP_LEAD_US * jt.GRID and np.all(me >= lead):
        return lambda a, b: (rt.grid_decimal(me[a] - lead), rt.grid_decimal(ms[b]))
    real = jt.real_for(ts, te)
    return lambda a, b: (rt.texts([real(round(t - fmt.DEP_LEAD_US, 4)) for t in te[a].tolist()]),
                         rt.texts([real(round(t, 4)) for t in ts[b].tolist()]))


def flow_edges(v: TaskView, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dependencies the merger draws, in its order: task by task in the L1 file's
    order (``order``), each task's successors as dyn_topo.txt lists them."""
    src, dst, _ = dev_task_successors(v)
    pos = np.empty(v.size, np.int64)
    pos[order] = np.arange(order.size)
    by_task = np.argsort(pos[src], kind="stable")     # each task's successors keep their order
    return src[by_task], dst[by_task]


def _flow_texts(v: TaskView, tl: Timeline, st: Stamps,
                order: np.ndarray) -> Iterator[memoryview]:
    """Two flow events per dependency edge, as compact JSON, a slice at a time; their ids
    go on from the task events' (one counter, as the merger's)."""
    src, dst = flow_edges(v, order)
    if src.size == 0:
        return
    cat, pid = rt.texts([jt.string(fmt.DEP_CATEGORY)]), rt.texts([str(fmt.MACHINE_PID)])
    lanes = fmt.thread_id(tl.task_core)
    stamps = _flow_stamps(st)
    for lo, hi in jt.chunks(src.size):
        a, b = src[lo:hi], dst[lo:hi]
        src_ts, dst_ts = stamps(a, b)
        yield _FLOW.render(hi - lo, cat=cat, pid=pid,
                           id=rt.decimal(np.arange(lo, hi) + order.size),
                           src_lane=rt.decimal(lanes[a]), src_ts=src_ts,
                           dst_lane=rt.decimal(lanes[b]), dst_ts=dst_ts)[2:]


def merged_swimlane_texts(program: Program, timeline: Timeline, freq: float,
                          shift: int = 0) -> Iterator[bytes | memoryview]:
    """``merged_swimlane``'s events as compact JSON pieces, UTF-8 (each a run of events
    joined by ", "), in the same order, never all held at once."""
    v, tl, st = TaskView.of(program), timeline, Stamps.of(timeline, freq, shift)
    head = [fmt.process_meta(), fmt.thread_meta(fmt.FAKE_CORE, -1)]
    head += [fmt.thread_meta(kind_of_block(int(b), tl.aic_cores), int(b))
             for b in np.unique(tl.task_core)]
    yield jt.compact_items(head).encode()
    order = core_order(tl.task_core, tl.task_start)
    yield from _task_event_texts(v, program, tl, order, st)
    yield from _flow_texts(v, tl, st, order)
    yield from _counter_texts(v, order, st.start_c, st.end_c, freq)


def write_merged_swimlane(program: Program, timeline: Timeline, freq: float, path: Path,
                          aicpu_views: list[str] = (), shift: int = 0) -> None:
    """``{"traceEvents": aicpu_views (last first) + merged_swimlane events}``, written as
    ``write_json(..., indent=None)`` would."""
    views = [view.encode() for view in reversed(list(aicpu_views))]
    with open_bytes(path) as out:
        out.write(b'{"traceEvents": [')
        first = True
        for piece in chain(views, merged_swimlane_texts(program, timeline, freq, shift)):
            if piece:
                if not first:
                    out.write(b", ")
                out.write(piece)
                first = False
        out.write(b"]}\n")
