"""Swimlane files of a ``runtime_debug_mode=1`` run.

- ``tilefwk_L1_prof_data.json``: per core, its leaf tasks with cycle stamps (§2);
- ``merged_swimlane.json``: Chrome Trace Event format, "Machine View" process,
  one lane per core, task events named like upstream, dependency arrows and
  ReadyCount counters (§4);
- ``bubble_analysis.log``: waiting time per core (§4.6);
- the ``AICORE Prof Summary`` block (§5).
Section numbers refer to reference/upstream-formats.md.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simcore.compiler import CoreType, Program
from simcore.machine import Timeline

from .atomic import write_json, write_text
from .topo import OPMAGIC_BASE

BASE_CYCLES = 1_000_000   # device counters are absolute; start the run at a fixed, nonzero tick


def to_cycles(t_us: np.ndarray | float, freq: float):
    return np.rint(np.asarray(t_us) * freq).astype(np.int64) + BASE_CYCLES


def core_type_name(block: int, timeline: Timeline) -> str:
    return "AIC" if block < timeline.aic_cores else "AIV"


def l1_prof_data(program: Program, timeline: Timeline, freq: float) -> list[dict]:
    start, end = to_cycles(timeline.task_start, freq), to_cycles(timeline.task_end, freq)
    seq, task_id = program.task_dev_task, program.task_id
    order = np.lexsort((timeline.task_start, timeline.task_core))
    cores: list[dict] = []
    for t in order:
        block = int(timeline.task_core[t])
        if not cores or cores[-1]["blockIdx"] != block:
            cores.append({"blockIdx": block, "coreType": core_type_name(block, timeline),
                          "tasks": []})
        cores[-1]["tasks"].append({
            "seqNo": int(seq[t]), "leafIndex": int(program.task_leaf[t]),
            "subGraphId": int(program.task_leaf[t]), "taskId": int(task_id[t]),
            "execStart": int(start[t]), "execEnd": int(end[t])})
    return cores


def _formal(seq: int, task_id: int) -> str:
    return f"{seq}-{(task_id >> 16) & 0x3FF}-{task_id & 0xFFFF}"


def ready_times(program: Program, timeline: Timeline) -> np.ndarray:
    """When each task's last predecessor in its dev task ended (else the dev task start)."""
    ready = timeline.dev_start[program.task_dev_task].copy()
    dev = program.task_dev_task
    same = dev[program.edge_src] == dev[program.edge_dst]
    np.maximum.at(ready, program.edge_dst[same], timeline.task_end[program.edge_src[same]])
    return ready


def _counter_events(name: str, ready: np.ndarray, start: np.ndarray, base_us: float) -> list:
    times = np.concatenate([ready, start])
    delta = np.concatenate([np.ones(ready.size, np.int64), -np.ones(start.size, np.int64)])
    order = np.lexsort((-delta, times))
    times, level = times[order], np.cumsum(delta[order])
    events, last = [], None
    for i in range(times.size):
        if i + 1 < times.size and times[i + 1] == times[i]:
            continue
        if level[i] != last:
            events.append({"name": name, "pid": 1, "tid": 1, "ph": "C",
                           "ts": round(base_us + float(times[i]), 4),
                           "args": {"size": int(level[i])}})
            last = level[i]
    return events


def merged_swimlane(program: Program, timeline: Timeline, freq: float) -> dict:
    p, tl = program, timeline
    base_us = BASE_CYCLES / freq
    start_c, end_c = to_cycles(tl.task_start, freq), to_cycles(tl.task_end, freq)
    ts, te = start_c / freq, end_c / freq
    seq, task_id = p.task_dev_task, p.task_id
    root_index = p.call_root[p.task_call]
    leaf_hash = np.asarray([f.hash for f in p.leaf_functions], dtype=np.uint64)
    root_hash = [f.hash for f in p.root_functions]
    labels = [f.label for f in p.leaf_functions]
    events: list[dict] = [{"args": {"name": "Machine View"}, "cat": "__metadata",
                           "name": "process_name", "ph": "M", "pid": 1}]
    blocks = np.unique(tl.task_core)
    for block in blocks:
        core_idx = int(block) + 1
        events.append({"args": {"name": f"{core_type_name(int(block), tl)}_{core_idx}"},
                       "cat": "__metadata", "name": "thread_name", "ph": "M", "pid": 1,
                       "tid": core_idx * 2 + 1000})
    # execution-hint: statistics per leaf function over all its tasks
    dur = te - ts
    hints = {}
    for leaf in np.unique(p.task_leaf):
        idx = np.flatnonzero(p.task_leaf == leaf)
        hi, lo = idx[np.argmax(dur[idx])], idx[np.argmin(dur[idx])]
        hints[int(leaf)] = (
            f"Average Execution Time: {dur[idx].mean():.4f}\n"
            f"Max Execution Time: {dur[hi]:.4f}, Task: [{_formal(int(seq[hi]), int(task_id[hi]))}]\n"
            f"Min Execution Time: {dur[lo]:.4f}, Task: [{_formal(int(seq[lo]), int(task_id[lo]))}]\n")
    tid_of = (tl.task_core + 1) * 2 + 1000
    for t in np.lexsort((tl.task_start, tl.task_core)):
        s, tid, leaf = int(seq[t]), int(task_id[t]), int(p.task_leaf[t])
        formal = _formal(s, tid)
        label = labels[leaf]
        order_hint = "\n".join(p.leaf_functions[leaf].merge_info)
        args = {
            "event-hint": f"Task:[{formal}], rootHash:{root_hash[root_index[t]]}, "
                          f"callOpMagic:{OPMAGIC_BASE + int(p.task_op[t])}, "
                          f"leafHash:{int(leaf_hash[leaf])}, TaskId:{tid}"
                          + (f"\n{order_hint}" if order_hint else ""),
            "ioperand-hint": "[]", "ooperand-hint": "[]",
            "execution-hint": hints[leaf], "color": label,
            "taskId": tid, "seqNo": s, "wrapId": -1}
        if order_hint:
            args["hashOrder-hint"] = order_hint
        events.append({
            "args": args,
            "cat": "event", "id": int(t),
            "name": f"{formal}-{int(root_index[t])}-{int(p.task_op[t])}({label})",
            "ph": "X", "pid": 1, "tid": int(tid_of[t]),
            "ts": round(float(ts[t]), 4), "dur": round(float(te[t] - ts[t]), 4)})
    for k, (a, b) in enumerate(zip(p.edge_src, p.edge_dst)):
        events.append({"cat": "machine-view-last-dep", "id": k, "name": "machine-view-last-dep",
                       "ph": "s", "pid": 1, "tid": int(tid_of[a]),
                       "ts": round(float(te[a]) - 0.0001, 4)})
        events.append({"bp": "e", "cat": "machine-view-last-dep", "id": k,
                       "name": "machine-view-last-dep", "ph": "f", "pid": 1,
                       "tid": int(tid_of[b]), "ts": round(float(ts[b]), 4)})
    ready = ready_times(p, tl)
    for name, mask in (("ReadyCount_AIC", p.task_core == CoreType.AIC),
                       ("ReadyCount_AIV", p.task_core != CoreType.AIC),
                       ("ReadyCount_Total", np.ones(p.leaf_tasks, bool))):
        if mask.any():
            events += _counter_events(name, ready[mask], tl.task_start[mask], base_us)
    return {"traceEvents": events}


def aicore_summary(timeline: Timeline) -> tuple[float, float, str]:
    """AICore end-to-end time, utilization and the block PyPTO prints (§5)."""
    tl = timeline
    if tl.task_start.size == 0:
        e2e, util = 0.0, 0.0
    else:
        e2e = float(tl.task_end.max() - tl.task_start.min())
        lanes = np.unique(tl.task_core).size
        busy = float((tl.task_end - tl.task_start).sum())
        util = busy / (lanes * e2e) if e2e > 0 else 0.0
    title = "-------- AICORE Prof Summary --------"
    text = (f"{title}\nAICore End-to-End Time: {e2e:.2f}\n"
            f"AICore Utilization:     {util * 100:.2f}%\n{'-' * len(title)}\n")
    return e2e, util, text


def bubble_log(program: Program, timeline: Timeline, freq: float) -> str:
    """Per core: work span, total wait, wait for the scheduler vs for predecessors."""
    p, tl = program, timeline
    ts = to_cycles(tl.task_start, freq) / freq
    te = to_cycles(tl.task_end, freq) / freq
    min_start = float(ts.min()) if ts.size else 0.0
    pred_ready = np.full(p.leaf_tasks, min_start)
    np.maximum.at(pred_ready, p.edge_dst, te[p.edge_src])
    seq, task_id = p.task_dev_task, p.task_id
    rows, top_all = [], []
    for block in np.unique(tl.task_core):
        idx = np.flatnonzero(tl.task_core == block)
        idx = idx[np.argsort(ts[idx], kind="stable")]
        prev_end = np.concatenate([[min_start], te[idx][:-1]])
        gaps = ts[idx] - prev_end
        wait_sched = np.maximum(ts[idx] - np.maximum(prev_end, pred_ready[idx]), 0.0)
        keys = [f"{(int(seq[t]) << 32) | int(task_id[t])}" for t in idx]
        names = [_formal(int(seq[t]), int(task_id[t])) for t in idx]
        top = sorted(zip(wait_sched, keys, names), key=lambda r: -r[0])
        top_all += top[:10]
        kind = core_type_name(int(block), tl)
        lines = [f"[{kind}_{int(block) + 1}] Execute task num:{idx.size}",
                 f"    Core Total Work Time: {te[idx][-1] - min_start:.4f}",
                 f"    Total Wait Time: {gaps.sum():.4f}",
                 f"    Wait Schedule Time: {wait_sched.sum():.4f}",
                 f"    Wait Predecessor Time: {gaps.sum() - wait_sched.sum():.4f}",
                 "    Top 3 tasks in waiting schedule time"]
        lines += [f"    Task:{k}, label:{n}, wait: {w:12.4f}" for w, k, n in top[:3]]
        rows.append("\n".join(lines))
    head = ["Top 10 tasks in waiting schedule"]
    head += [f"    Task:{k}, label:{n}, wait: {w:12.4f}"
             for w, k, n in sorted(top_all, key=lambda r: -r[0])[:10]]
    return "\n".join(head) + "\n\n" + "\n".join(rows) + "\n"


def write_swimlane_files(program: Program, timeline: Timeline, freq: float, out: Path) -> str:
    write_json(out / "tilefwk_L1_prof_data.json", l1_prof_data(program, timeline, freq))
    write_json(out / "merged_swimlane.json", merged_swimlane(program, timeline, freq), indent=None)
    write_text(out / "bubble_analysis.log", bubble_log(program, timeline, freq))
    return aicore_summary(timeline)[2]
