"""``DUMP_DEVICE_PERF=true`` files: AICPU/AICore phase stamps per round.

``machine_trace_perf_data_<N>.json`` (reference/upstream-formats.md §6): an array
of lanes ``{blockIdx, coreType, freq, tasks: [{name, end}]}``; every stamp marks
the *end* of a phase.  A file covers up to 50 rounds and is named by its first
round; at most 200 rounds are recorded.  Dev-task phases keep at most
``devtask_limit`` instances per thread and round; the excess is dropped with
upstream's warning.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from simcore.machine import Timeline

from .atomic import write_json
from .swimlane import to_cycles

MAX_ROUNDS = 200
ROUNDS_PER_FILE = 50
DEVTASK_LIMIT_DEFAULT = 20   # the seeds' figure; upstream code has since raised it to 200


def _lane(block: int, core_type: str, freq: float) -> dict:
    return {"blockIdx": block, "coreType": core_type, "freq": freq, "tasks": []}


class _Stamper:
    def __init__(self, freq: float, offset_us: float, r: int, limit: int):
        self.freq, self.offset, self.r, self.limit = freq, offset_us, r, limit
        self.dropped = False

    def add(self, lane: dict, phase: str, t_us: float, k: int | None = None,
            seq: int | None = None) -> None:
        """k: dev-task instance on an AICPU thread (capped); seq: dev task of an AICore stamp."""
        if k is not None and k >= self.limit:
            self.dropped = True
            return
        tag = k if k is not None else seq
        name = f"{phase}_{self.r}" + (f"({tag})" if tag is not None else "")
        lane["tasks"].append({"name": name, "end": int(to_cycles(t_us + self.offset, self.freq))})


def perf_lanes(tl: Timeline, freq: float, rounds: range, round_span_us: float,
               limit: int) -> tuple[list[dict], bool]:
    ctrl = _lane(0, "AICPU-CTRL", freq)
    sched = [_lane(i + 1, "AICPU-SCHED", freq) for i in range(len(tl.sched))]
    n_cores = tl.aic_cores + tl.aiv_cores
    cores = [_lane(b + 1, f"SCHED{tl.core_owner(b) + 1}-{'AIC' if b < tl.aic_cores else 'AIV'}",
                   freq) for b in range(n_cores)]
    dropped = False
    for r in rounds:
        st = _Stamper(freq, r * round_span_us, r, limit)
        st.add(ctrl, "BEGIN", tl.ctrl_begin)
        st.add(ctrl, "INIT", tl.ctrl_init)
        for k, t in enumerate(tl.dev_build_end):
            st.add(ctrl, "DEV_TASK_BUILD", float(t), k)
        st.add(ctrl, "EXIT", tl.ctrl_exit)
        for lane, th in zip(sched, tl.sched):
            st.add(lane, "BEGIN", th.begin)
            st.add(lane, "ALLOC_THREAD_ID", th.alloc)
            st.add(lane, "INIT", th.init)
            st.add(lane, "CORE_HAND_SHAKE", th.handshake)
            for k in range(len(th.rcv)):
                st.add(lane, "DEV_TASK_RCV", th.rcv[k], k)
                if k == 0:
                    st.add(lane, "DEV_TASK_SEND_FIRST_LEAF_TASK", th.first_send[0])
                st.add(lane, "DEV_TASK_SCHED_EXEC", th.sched_exec[k], k)
                st.add(lane, "DEV_TASK_SYNC_CORE_STOP", th.sync_stop[k], k)
                st.add(lane, "DEV_TASK_RSP", th.rsp[k], k)
            st.add(lane, "WAIT_ALL_DEV_TASK_FINISH", th.wait_all_finish)
            st.add(lane, "WAIT_CORE_EXIT", th.core_exit)
            st.add(lane, "EXIT", th.exit)
        dev_of_task = np.searchsorted(tl.dev_start, tl.task_start, side="right") - 1
        for b, lane in enumerate(cores):
            st.add(lane, "BEGIN", tl.core_begin)
            st.add(lane, "INIT", tl.core_init)
            mine = np.flatnonzero(tl.task_core == b)
            for k in np.unique(dev_of_task[mine]):
                on_k = mine[dev_of_task[mine] == k]
                seq = int(k)
                st.add(lane, "DEV_TASK_RCV_MODEL", float(tl.dev_start[k]), seq=seq)
                st.add(lane, "DEV_TASK_WAIT_RCV_FIRST_LEAF_TASK",
                       float(tl.task_start[on_k].min()), seq=seq)
                st.add(lane, "DEV_TASK_ALL_LEAF_TASK_EXEC", float(tl.task_end[on_k].max()),
                       seq=seq)
            st.add(lane, "WAIT_EXIT_NOTIFY", float(tl.core_exit[b]))
        dropped |= st.dropped
    return [ctrl] + sched + cores, dropped


def write_perf_files(tl: Timeline, freq: float, rounds: int, launch_gap_us: float, out: Path,
                     devtask_limit: int = DEVTASK_LIMIT_DEFAULT) -> list[Path]:
    recorded = min(rounds, MAX_ROUNDS)
    if rounds > MAX_ROUNDS:
        print(f"Aicpu perf info more than maxTurnNum={MAX_ROUNDS}, some info would be lost",
              file=sys.stderr)
    span = tl.e2e_us + launch_gap_us
    written, warned = [], False
    for first in range(0, recorded, ROUNDS_PER_FILE):
        rng = range(first, min(first + ROUNDS_PER_FILE, recorded))
        lanes, dropped = perf_lanes(tl, freq, rng, span, devtask_limit)
        if dropped and not warned:
            print(f"Dev task num larger than: {devtask_limit}, the excess part will not be "
                  f"recorded", file=sys.stderr)
            warned = True
        path = out / f"machine_trace_perf_data_{first}.json"
        write_json(path, lanes)
        written.append(path)
    return written
