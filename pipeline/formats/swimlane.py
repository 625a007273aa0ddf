"""Swimlane files of a ``runtime_debug_mode=1`` run.

- ``tilefwk_L1_prof_data.json`` (hicann/pypto
  framework/src/machine/runtime/runner/dump_device_perf.cpp): an array of cores
  ``{blockIdx, coreType, tasks: [{seqNo, leafIndex, subGraphId, taskId,
  execStart, execEnd}]}``, stamps in AICPU counter cycles; upstream's merger
  reads ``subGraphId``, the runtime writes ``leafIndex``: both are written.
- ``merged_swimlane.json`` (tools/profiling/draw_swim_lane.py
  ``convert_to_chrome_trace_json``): Chrome trace, process "Machine View"
  (pid 1), a thread per core at tid ``core_idx * 2 + 1000`` named ``AIC_n`` /
  ``AIV_n`` after the merger's core 0 (``Fake Core_0``, tid 1000), an ``X`` event per
  task in the L1 file's order named
  ``seqNo-funcId-opIdx-rootIndex-psgId(label)``, dependency flows (their ids going on
  from the tasks') and ReadyCount counters on tid 1.
- ``bubble_analysis.log`` (``analysis_wait_cycles``): per core its task count,
  work span and waits; tools/scripts/tuner/tuner.py matches ``CORE_BLOCK``.
- the ``AICORE Prof Summary`` block (``print_aicore_summary``).
"""
from __future__ import annotations

import re

from .cores import lane_name
from .task_id import formal_name

L1_PROF_FILE = "tilefwk_L1_prof_data.json"
MERGED_FILE = "merged_swimlane.json"
BUBBLE_FILE = "bubble_analysis.log"

MACHINE_VIEW, MACHINE_PID = "Machine View", 1
THREAD_OFFSET = 1000
COUNTER_TID = 1
DEP_CATEGORY = "machine-view-last-dep"
DEP_LEAD_US = 0.0001            # a flow leaves its source this long before the source ends
READY_COUNTERS = ("ReadyCount_AIC", "ReadyCount_AIV", "ReadyCount_Total")
DEP_SOLVING = "Dependence Solving (MHz)"
DEP_WINDOW_US = 5               # Dependence Solving averages over windows longer than this
SUMMARY_TITLE = "-------- AICORE Prof Summary --------"
# tools/scripts/tuner/tuner.py Execution._get_execution_time: one match per core
CORE_BLOCK = re.compile(
    r"\[(AIC_\d+|AIV_\d+)\] Execute task num:(\d+)\s+Core Total Work Time: ([\d.]+)\s+"
    r"Total Wait Time: ([\d.]+)\s+Wait Schedule Time: ([\d.]+)\s+"
    r"Wait Predecessor Time: ([\d.]+)")


def l1_core(block: int, kind: str) -> dict:
    return {"blockIdx": int(block), "coreType": kind, "tasks": []}


def l1_task(seq_no: int, leaf: int, task_id: int, start: int, end: int) -> dict:
    return {"seqNo": int(seq_no), "leafIndex": int(leaf), "subGraphId": int(leaf),
            "taskId": int(task_id), "execStart": int(start), "execEnd": int(end)}


def thread_id(block):
    """The Machine View tid of a 0-based block (ints or numpy arrays)."""
    return (block + 1) * 2 + THREAD_OFFSET


def process_meta() -> dict:
    return {"args": {"name": MACHINE_VIEW}, "cat": "__metadata", "name": "process_name",
            "ph": "M", "pid": MACHINE_PID}


# upstream's merger always opens a core 0 for tasks the topology lists and the L1 file lacks
# (draw_swim_lane.py parse_swim_data): block -1 in our numbering, so tid 1000
FAKE_CORE = "Fake Core"


def thread_meta(kind: str, block: int) -> dict:
    return {"args": {"name": lane_name(kind, block)}, "cat": "__metadata",
            "name": "thread_name", "ph": "M", "pid": MACHINE_PID, "tid": int(thread_id(block))}


def task_name(seq_no: int, task_id: int, root_index: int, psg_id: int, label: str) -> str:
    return f"{formal_name(seq_no, task_id)}-{root_index}-{psg_id}({label})"


def event_hint(seq_no: int, task_id: int, root_hash: int, opmagic: int, leaf_hash: int,
               hash_order: str) -> str:
    base = (f"Task:[{formal_name(seq_no, task_id)}], rootHash:{root_hash}, "
            f"callOpMagic:{opmagic}, leafHash:{leaf_hash}, TaskId:{task_id}")
    return f"{base}\n{hash_order}" if hash_order else base


def execution_hint(mean: float, longest: float, longest_task: str, shortest: float,
                   shortest_task: str) -> str:
    """Times in us as Python prints a float (the merger does not round them)."""
    return (f"Average Execution Time: {mean}\n"
            f"Max Execution Time: {longest}, Task: [{longest_task}]\n"
            f"Min Execution Time: {shortest}, Task: [{shortest_task}]\n")


def flow_events(k: int, src_tid: int, src_end_us: float, dst_tid: int,
                dst_start_us: float) -> list[dict]:
    return [{"cat": DEP_CATEGORY, "id": k, "name": DEP_CATEGORY, "ph": "s",
             "pid": MACHINE_PID, "tid": src_tid, "ts": round(src_end_us - DEP_LEAD_US, 4)},
            {"bp": "e", "cat": DEP_CATEGORY, "id": k, "name": DEP_CATEGORY, "ph": "f",
             "pid": MACHINE_PID, "tid": dst_tid, "ts": round(dst_start_us, 4)}]


def counter_event(name: str, ts_us: float, size: float) -> dict:
    return {"name": name, "pid": MACHINE_PID, "tid": COUNTER_TID, "ph": "C",
            "ts": round(ts_us, 4), "args": {"size": size}}


def summary_text(e2e_us: float, utilization: float) -> str:
    return (f"{SUMMARY_TITLE}\nAICore End-to-End Time: {e2e_us:.2f}\n"
            f"AICore Utilization:     {utilization * 100:.2f}%\n{'-' * len(SUMMARY_TITLE)}\n")


# analysis_wait_cycles writes each waiting task as a backslash-continued f-string; the
# continuation line's indent (20 spaces in a core's block, 16 in the top ten) stays in the
# text, between "wait: " and the value
CORE_WAIT_GAP, TOP_WAIT_GAP = 20, 16


def bubble_task_line(key: int, name: str, wait: float, gap: int = CORE_WAIT_GAP) -> str:
    return f"    Task:{key}, label:{name}, wait: {' ' * gap}{wait!r}"


def bubble_core_block(kind: str, block: int, tasks: int, work: float, total_wait: float,
                      wait_schedule: float, top: list[str]) -> str:
    """A core's block, numbers as analysis_wait_cycles prints them (Python's float text;
    its running sums start from the int 0, so a core without tasks prints 0)."""
    lines = [f"[{lane_name(kind, block)}] Execute task num:{tasks}",
             f"    Core Total Work Time: {work!r}",
             f"    Total Wait Time: {total_wait!r}",
             f"    Wait Schedule Time: {wait_schedule!r}",
             f"    Wait Predecessor Time: {total_wait - wait_schedule!r}"]
    if tasks:
        lines.append("    Top 3 tasks in waiting schedule time")
    return "\n".join(lines + top)


def bubble_log(top10: list[str], core_blocks: list[str]) -> str:
    # the top ten end with a line holding "\n" itself: two empty lines before the cores
    return "\n".join(["Top 10 tasks in waiting schedule", *top10]) + "\n\n\n" + \
        "\n".join(core_blocks) + "\n"
