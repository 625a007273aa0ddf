"""``DUMP_DEVICE_PERF=true`` files: AICPU/AICore phase stamps per round.

``machine_trace_perf_data_<N>.json`` (layout: pipeline/formats/perf_trace.py):
lanes of phase-end stamps, up to 50 rounds a file, at most 200 rounds.  Dev-task
phases keep at most ``limit`` instances per AICPU thread and round; the excess is
dropped with upstream's warning.  The limit is ``PTOLAB_PERF_DEVTASK_MAX``
(default 20, the figure of PyPTO's performance tuning guide,
docs/zh/tutorials/debug/performance.md; upstream code has since raised it to 200).

After each file, as the runtime runs ``machine_perf_trace.py gen_perfetto``, the
AICPU view ``machine_runtime_operator_trace_<N>.json`` is written; upstream then
prepends its events to ``merged_swimlane.json`` (``runtime_debug_mode=1``).  Here
each view's events are handed back as compact JSON text, and the swimlane writer
puts them in front of its own events in one pass (see operator_trace.py).

Every round replays the same simulated launch, shifted by a whole number of
cycles, so all rounds give the same durations (a float shift would let rounding
move stamps by a cycle from one round to the next).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping

import numpy as np

from simcore.machine import Timeline
from simcore.spec.errors import ConfigError

from ..formats import perf_trace as fmt
from ..formats.cores import kind_of_block, sched_core_lane
from . import jsontext as jt
from .atomic import open_text
from .operator_trace import operator_trace, write_operator_trace
from .swimlane import to_cycles

MAX_ROUNDS = fmt.MAX_ROUNDS
ROUNDS_PER_FILE = fmt.ROUNDS_PER_FILE
DEVTASK_LIMIT_DEFAULT = 20     # the tuning guide's figure; upstream code has since raised it to 200
DEVTASK_LIMIT_ENV = "PTOLAB_PERF_DEVTASK_MAX"
AICORE_STAMPS_MAX = 8 * 200    # per core per round; upstream caps these silently

# a lane's stamps for one round, before the round is known: (phase, index or None, cycles)
Template = list[tuple[str, int | None, int]]


def devtask_limit(env: Mapping[str, str]) -> int:
    """The dev-task instance limit, from ``PTOLAB_PERF_DEVTASK_MAX`` (default 20)."""
    raw = env.get(DEVTASK_LIMIT_ENV, "").strip()
    if not raw:
        return DEVTASK_LIMIT_DEFAULT
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(
            f"environment variable {DEVTASK_LIMIT_ENV}={raw!r} is not a positive integer. It "
            f"caps how many dev-task instances each AICPU thread records per round in "
            f"machine_trace_perf_data_<N>.json; use 20 (the default, the figure of PyPTO's "
            f"performance tuning guide) or 200 (current upstream code).")
    return int(raw)


class _Lane:
    """One lane's template: stamps in microseconds, turned into cycles once."""

    def __init__(self, block: int, core_type: str, freq: float):
        self.block, self.core_type, self.freq = block, core_type, freq
        self.stamps: list[tuple[str, int | None, float]] = []

    def add(self, phase: str, t_us: float, idx: int | None = None) -> None:
        self.stamps.append((phase, idx, float(t_us)))

    def template(self) -> Template:
        cycles = to_cycles(np.asarray([s[2] for s in self.stamps]), self.freq)
        return [(p, idx, int(c)) for (p, idx, _), c in zip(self.stamps, cycles)]


def _ctrl_lane(tl: Timeline, freq: float, limit: int) -> _Lane:
    lane = _Lane(0, fmt.CTRL, freq)
    lane.add("BEGIN", tl.ctrl_begin)
    lane.add("INIT", tl.ctrl_init)
    for k, t in enumerate(tl.dev_build_end[:limit]):
        lane.add("DEV_TASK_BUILD", t, k)
    lane.add("EXIT", tl.ctrl_exit)
    return lane


def _sched_lane(th, block: int, freq: float, limit: int) -> _Lane:
    lane = _Lane(block, fmt.SCHED, freq)
    for phase, t in (("BEGIN", th.begin), ("ALLOC_THREAD_ID", th.alloc), ("INIT", th.init),
                     ("CORE_HAND_SHAKE", th.handshake)):
        lane.add(phase, t)
    for k in range(min(len(th.rcv), limit)):
        lane.add("DEV_TASK_RCV", th.rcv[k], k)
        if k == 0:
            lane.add("DEV_TASK_SEND_FIRST_LEAF_TASK", th.first_send[0])
        lane.add("DEV_TASK_SCHED_EXEC", th.sched_exec[k], k)
        lane.add("DEV_TASK_SYNC_CORE_STOP", th.sync_stop[k], k)
        lane.add("DEV_TASK_RSP", th.rsp[k], k)
    for phase, t in (("WAIT_ALL_DEV_TASK_FINISH", th.wait_all_finish),
                     ("WAIT_CORE_EXIT", th.core_exit), ("EXIT", th.exit)):
        lane.add(phase, t)
    return lane


def _core_lanes(tl: Timeline, freq: float) -> list[_Lane]:
    """SCHEDk-AIC/AIV lanes: per dev task a core ran, first receive and last finish."""
    runs = _core_dev_runs(tl)
    lanes = []
    for b in range(tl.aic_cores + tl.aiv_cores):
        kind = kind_of_block(b, tl.aic_cores)
        lane = _Lane(b + 1, sched_core_lane(tl.core_owner(b) + 1, kind), freq)
        lane.add("BEGIN", tl.core_begin)
        lane.add("INIT", tl.core_init)
        for k, first, last in runs.get(b, ()):
            lane.add("DEV_TASK_RCV_MODEL", tl.dev_start[k], k)
            lane.add("DEV_TASK_WAIT_RCV_FIRST_LEAF_TASK", first, k)
            lane.add("DEV_TASK_ALL_LEAF_TASK_EXEC", last, k)
        lane.add("WAIT_EXIT_NOTIFY", tl.core_exit[b])
        del lane.stamps[AICORE_STAMPS_MAX:]
        lanes.append(lane)
    return lanes


def _core_dev_runs(tl: Timeline) -> dict[int, list[tuple[int, float, float]]]:
    """Per core, the dev tasks it ran tasks of, in order: (dev task, first task start,
    last task end), from one (core, dev task) table rather than a pass per core."""
    slots = len(tl.dev_start) + 1       # a dev task index, from -1 (before the first)
    dev = np.searchsorted(tl.dev_start, tl.task_start, side="right") - 1
    key = tl.task_core.astype(np.int64) * slots + dev + 1
    size = (tl.aic_cores + tl.aiv_cores) * slots
    first = np.full(size, np.inf)
    np.minimum.at(first, key, tl.task_start)
    last = np.full(size, -np.inf)
    np.maximum.at(last, key, tl.task_end)
    ran = np.flatnonzero(np.bincount(key, minlength=size))
    core, k = np.divmod(ran, slots)
    runs: dict[int, list[tuple[int, float, float]]] = {}
    for b, d, f, e in zip(core.tolist(), (k - 1).tolist(), first[ran].tolist(),
                          last[ran].tolist()):
        runs.setdefault(b, []).append((d, f, e))
    return runs


def lane_templates(tl: Timeline, freq: float, limit: int) -> tuple[list[_Lane], bool]:
    """Every lane of one round, and whether the dev-task limit dropped stamps."""
    lanes = [_ctrl_lane(tl, freq, limit)]
    lanes += [_sched_lane(th, i + 1, freq, limit) for i, th in enumerate(tl.sched)]
    lanes += _core_lanes(tl, freq)
    dropped = len(tl.dev_build_end) > limit or any(len(th.rcv) > limit for th in tl.sched)
    return lanes, dropped


def perf_lanes(lanes: list[_Lane], rounds: range, span_cycles: int) -> list[dict]:
    """The file content for ``rounds``: each round is the template shifted by r spans."""
    out = []
    for lane in lanes:
        tpl = lane.template()
        tasks = [{"name": fmt.stamp_name(phase, r, idx), "end": c + r * span_cycles}
                 for r in rounds for phase, idx, c in tpl]
        out.append(fmt.lane(lane.block, lane.core_type, lane.freq, tasks))
    return out


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


# a lane of a perf file, as json.dumps(lanes, indent=4) lays it out
_LANE = ('    {\n        "blockIdx": %s,\n        "coreType": %s,\n        "freq": %s,\n'
         '        "tasks": ')
_STAMP = '            {\n                "name": %s,\n                "end": %s\n            }'


def write_perf_data(path: Path, lanes: list[dict]) -> None:
    """``perf_lanes``' result written as ``write_json`` (indent=4) would."""
    with open_text(path) as out:
        if not lanes:
            out.write("[]\n")
            return
        out.write("[\n")
        for k, lane in enumerate(lanes):
            out.write((",\n" if k else "") + _LANE % (
                jt.number(lane["blockIdx"]), jt.string(lane["coreType"]), jt.number(lane["freq"])))
            tasks = lane["tasks"]
            if not tasks:
                out.write("[]\n    }")
                continue
            out.write("[\n" + ",\n".join(_STAMP % (jt.string(t["name"]), jt.number(t["end"]))
                                           for t in tasks) + "\n        ]\n    }")
        out.write("\n]\n")


def round_ticks(tl: Timeline, freq: float, launch_gap_us: float) -> int:
    """Counter ticks from one launch's start to the next's: the run plus the host's gap."""
    return int(np.ceil((tl.e2e_us + launch_gap_us) * freq))


def write_perf_files(tl: Timeline, freq: float, rounds: int, launch_gap_us: float, out: Path,
                     limit: int = DEVTASK_LIMIT_DEFAULT,
                     aicpu_views: list[str] | None = None) -> list[Path]:
    """Write one perf file (and its AICPU view) per 50 rounds; return the perf files.

    ``aicpu_views``: when given, each view's events are appended to it as compact JSON
    text, for swimlane.write_swimlane_files to put in front of the merged swimlane."""
    recorded = min(rounds, MAX_ROUNDS)
    if rounds > MAX_ROUNDS:
        _warn(f"Aicpu perf info more than maxTurnNum={MAX_ROUNDS}, some info would be lost")
    lanes, dropped = lane_templates(tl, freq, limit)
    if dropped:
        _warn(f"Dev task num larger than: {limit}, the excess part will not be recorded")
    span_cycles = round_ticks(tl, freq, launch_gap_us)
    written = []
    for first in range(0, recorded, ROUNDS_PER_FILE):
        data = perf_lanes(lanes, range(first, min(first + ROUNDS_PER_FILE, recorded)),
                          span_cycles)
        path = out / fmt.perf_file(first)
        write_perf_data(path, data)
        trace = operator_trace(data)
        write_operator_trace(out / fmt.view_file(first), trace)
        if aicpu_views is not None:
            aicpu_views.append(jt.compact_items(trace["traceEvents"]))
        written.append(path)
    return written
