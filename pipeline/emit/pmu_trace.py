"""PMU Trace (``codegen_options.enable_pmu_trace``): the pipes inside a core.

Upstream (hicann/pypto framework/src/codegen/npu/cloudnpu/codegen_cloudnpu.cpp;
PyPTO's tools guide, docs/zh/tutorials/debug) inserts
``mark_stamp`` pairs at the entry (on PIPE_MTE2, 100 NOPs apart) and exit (on
PIPE_MTE3, 1000 NOPs apart) of every leaf function, tagged with a PMU ID, and
msprof's instruction-level collection shows each pipe's activity over time.
Only the Ascend 950 (dav_3510) has it, for a single operator, on at most 6
cores.  ptolab writes the same view as a Chrome trace,
``PROF_000001/mindstudio_profiler_output/msprof_000001.json``: one process per
captured core, one thread per pipe (MTE2, MTE1, Cube, Vector, FIXP, MTE3,
Scalar), an ``X`` event per stretch of pipe work and an instant event per
mark_stamp.  Times are absolute microseconds on merged_swimlane.json's base.

The model does not charge the inserted NOPs, so the exit pair sits just after
the task's end, where the real NOPs would have run.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from simcore.compiler import Program
from simcore.machine import Timeline
from simcore.spec.hardware import Hardware

from ..formats import pmu as rec
from ..formats.cores import kind_of_block, lane_name
from .atomic import write_json
from .swimlane import BASE_CYCLES
from .tasks import TaskView

SUPPORTED_ARCH = "dav_3510"
MAX_CORES = 6
ENTRY_NOPS, EXIT_NOPS = 100, 1000
STAMP_LIMIT = 4096               # bisheng's stamp values are below this
LANES = (("MTE2", "mte2"), ("MTE1", "mte1"), ("Cube", "cube"), ("Vector", "vector"),
         ("FIXP", "fixp"), ("MTE3", "mte3"), ("Scalar", "scalar"))
# the order work flows through a core: how pipe busy times are laid out in time
SERIAL_ORDER = ("scalar", "mte2", "mte1", "cube", "fixp", "vector", "mte3")


def main_blocks(program: Program) -> np.ndarray:
    """Per leaf function: is it a main block (full tiles) rather than a tail block?

    The compiler gives tail tiles their own leaf functions, doing the same ops on
    less data; so within one label the leaf functions moving the most bytes are
    the main blocks (bytes per task, read plus written).  A compiler that knows
    better can give LeafFunction an ``is_main_block`` flag.
    """
    leaves = program.leaf_functions
    moved = np.zeros(len(leaves))
    np.maximum.at(moved, TaskView.of(program).leaf,
                  np.asarray(program.task_read_bytes) + np.asarray(program.task_write_bytes))
    biggest: dict[str, float] = {}
    for f, m in zip(leaves, moved):
        biggest[f.label] = max(biggest.get(f.label, 0.0), m)
    flags = [getattr(f, "is_main_block", None) for f in leaves]
    return np.asarray([flag if flag is not None else m == biggest[f.label]
                       for f, m, flag in zip(leaves, moved, flags)], dtype=bool)


def pmu_id(function_hash: int, main_block: bool) -> int:
    """upstream GenPMUId: "1" for a main block, then the hash's last three digits, mod 4096."""
    digits = str(int(function_hash)).zfill(3)[-3:]
    return int(("1" if main_block else "") + digits) % STAMP_LIMIT


def pmu_ids(program: Program) -> np.ndarray:
    main = main_blocks(program)
    return np.asarray([pmu_id(f.hash, bool(m)) for f, m in zip(program.leaf_functions, main)],
                      dtype=np.int64)


def captured_cores(tl: Timeline) -> np.ndarray:
    """The first cores (block order, AIC first) that ran work, at most six."""
    return np.unique(tl.task_core)[:MAX_CORES]


def pipe_intervals(tl: Timeline, tasks: np.ndarray, head_us: float):
    """(task, pipe, start_us, end_us) of every stretch of pipe work of ``tasks``.

    The timeline gives each task's busy time per pipe and its duration, not when
    each pipe worked.  When the busy times fit after the head overhead the pipes
    ran back to back, in the order work flows; when they do not, the machine
    overlapped them (several tiles in flight), so the starts are drawn closer in
    proportion: every pipe keeps its busy time and the last one ends with the
    task.  A machine that records real intervals can supply them here instead.
    """
    zeros = np.zeros(tl.task_start.size)
    dur = np.stack([np.asarray(tl.task_pipe_cycles.get(p, zeros), dtype=float)[tasks]
                    for p in SERIAL_ORDER], axis=1) / tl.clock_mhz
    t0 = tl.task_start[tasks] + head_us
    end = tl.task_end[tasks][:, None]
    squeeze = _squeeze(dur, tl.task_end[tasks] - t0)
    starts = t0[:, None] + (np.cumsum(dur, axis=1) - dur) * squeeze[:, None]
    stops = np.minimum(starts + dur, end)
    starts = np.minimum(starts, end)
    task_idx, pipe_idx = np.nonzero(stops > starts)
    lane_of = np.asarray([[key for _, key in LANES].index(p) for p in SERIAL_ORDER])
    return (tasks[task_idx], lane_of[pipe_idx], starts[task_idx, pipe_idx],
            stops[task_idx, pipe_idx])


def _squeeze(dur: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Per task, the factor on start offsets that makes the last busy pipe end on time."""
    rows = np.arange(dur.shape[0])
    busy = dur > 0
    last = dur.shape[1] - 1 - np.argmax(busy[:, ::-1], axis=1)
    d_last = np.where(busy.any(axis=1), dur[rows, last], 0.0)
    total = dur.sum(axis=1)
    factor = np.divide(window - d_last, total - d_last, out=np.ones_like(total),
                       where=total - d_last > 0)
    return np.where(total > window, np.clip(factor, 0.0, 1.0), 1.0)


def _meta(core: int, kind: str) -> list[dict]:
    pid = core + 1
    events = [{"name": "process_name", "ph": "M", "pid": pid,
               "args": {"name": lane_name(kind, core)}},
              {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}}]
    for tid, (name, _) in enumerate(LANES):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    return events


def _stamps(pid: int, task_start: float, task_end: float, clock: float, ident: int) -> list:
    """The entry pair on MTE2 and the exit pair on MTE3, NOP gaps apart."""
    mte2, mte3 = 0, [k for k, _ in LANES].index("MTE3")
    points = [(mte2, task_start), (mte2, task_start + ENTRY_NOPS / clock),
              (mte3, task_end), (mte3, task_end + EXIT_NOPS / clock)]
    return [{"name": f"mark_stamp({ident})", "cat": "mark_stamp", "ph": "i", "s": "t",
             "ts": round(t, 6), "pid": pid, "tid": tid, "args": {"pmu_id": ident}}
            for tid, t in points]


def pmu_trace(program: Program, tl: Timeline, hw: Hardware) -> dict:
    v = TaskView.of(program)
    base = BASE_CYCLES / hw.aicpu.profile_freq_mhz
    ids = pmu_ids(program)[v.leaf]
    names = [f.name for f in program.leaf_functions]
    events: list[dict] = []
    for core in captured_cores(tl):
        events += _meta(int(core), kind_of_block(int(core), tl.aic_cores))
        tasks = np.flatnonzero(tl.task_core == core)
        tasks = tasks[np.argsort(tl.task_start[tasks], kind="stable")]
        for t, lane, s, e in zip(*pipe_intervals(tl, tasks, hw.core.head_overhead_us)):
            events.append({"name": names[v.leaf[t]], "cat": "pipe", "ph": "X",
                           "ts": round(base + s, 6), "dur": round(e - s, 6),
                           "pid": int(core) + 1, "tid": int(lane),
                           "args": {"pmu_id": int(ids[t]), "seqNo": int(v.seq[t]),
                                    "taskId": int(v.task_id[t])}})
        for t in tasks:
            events += _stamps(int(core) + 1, base + float(tl.task_start[t]),
                              base + float(tl.task_end[t]), tl.clock_mhz, int(ids[t]))
    return {"traceEvents": events}


def write_pmu_trace(program: Program, tl: Timeline, hw: Hardware, out: Path) -> Path | None:
    """The msprof trace on dav_3510; elsewhere a warning, since the option has no effect."""
    if hw.name != SUPPORTED_ARCH:
        print(f"codegen_options.enable_pmu_trace is set, but PMU Trace exists only on "
              f"{SUPPORTED_ARCH} (Ascend 950PR/950DT); on {hw.name} codegen inserts no "
              f"mark_stamp, so no msprof_*.json is written. Simulate with --hardware "
              f"{SUPPORTED_ARCH} to see the pipes inside a core.", file=sys.stderr)
        return None
    path = Path(out) / rec.PROF_DIR / rec.TRACE_DIR / rec.TRACE_FILE
    write_json(path, pmu_trace(program, tl, hw), indent=None)
    return path
