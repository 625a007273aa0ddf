"""PMU counters (``PYPTO_PROF_PMU_EVENT_TYPE``): msprof's raw ``aicpu.data`` records.

PyPTO reads the event group from ``PYPTO_PROF_PMU_EVENT_TYPE`` when msprof runs
with ``--task-time=l3``; the AICPU then reports, per leaf task, the PMU total
cycle counter and 8 (dav_2201) or 10 (dav_3510) programmable counters.  ptolab
writes them when the variable is set, or when ``PTOLAB_MSPROF_TASK_TIME=l3``
stands in for the msprof switch (then an unset variable gets upstream's warning
and group 2).  Layout: pipeline/formats/pmu.py; the records go to
``PROF_000001/device_0/data/aicpu.data.0.slice_0``, three tasks a PMU record, per
core in execution order, followed by the LOG records (eight tasks a record) that
the same collection reports.

Counter values come from the simulated run, one quantity per slot:

- ``total``: task duration x core clock (head overhead included);
- pipe busy cycles (``mte2 mte1 cube vector fixp mte3 scalar``): the timeline's
  ``task_pipe_cycles``; arithmetic counters count every cube/vector cycle as the
  fp16-cube / fp32-vector kind, since tasks carry no data type yet;
- memory requests: one request per 32-byte block (the UB/L1 access granule).
  A vector task moves its GM input into UB by MTE2 and reads it with the vector
  unit, writes its output into UB and MTE3 reads it back out; a cube task moves
  its input into L1 (MTE2), L1 into L0A/L0B (MTE1, split evenly), and its output
  from L0C to GM (FIXP).  All GM traffic passes L2; reads that miss L2 and all
  writes reach main memory.  The L2 hit rate of a task is the share of its GM
  reads the timeline says L2 served (``task_l2_bytes`` against
  ``task_hbm_bytes``), 0 while the machine has no L2; writes allocate lines in L2,
  so every write request counts as a miss-allocate;
- anything the model does not simulate (icache, bank conflicts, the second L2
  read port, victims) is 0.

A machine that simulates more can hand any of these quantities over directly as
``Timeline.task_counters[name]`` (per-task arrays); those replace the estimates.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Mapping

import numpy as np

from simcore.compiler import Program
from simcore.machine import Timeline
from simcore.spec.hardware import Hardware

from ..formats import pmu as rec
from ..formats.cores import type_of_blocks
from ..formats.task_id import in_file
from .atomic import write_bytes, write_text
from .swimlane import to_cycles
from .tasks import TaskView, core_order

GROUP_ENV = "PYPTO_PROF_PMU_EVENT_TYPE"
MSPROF_ENV = "PTOLAB_MSPROF_TASK_TIME"
DEFAULT_GROUP = 2
GROUP_NAMES = {1: "ARITHMETIC_UTILIZATION", 2: "PIPE_UTILIZATION", 4: "MEMORY",
               5: "MEMORY_L0", 6: "RESOURCE_CONFLICT_RATION", 7: "MEMORY_UB", 8: "L2_CACHE"}
REQ_BYTES = 32
SLOTS = {"dav_2201": 8, "dav_3510": 10}

# per arch and group: the event code and the simulated quantity of each slot, in slot order
EVENTS: dict[str, dict[int, list[tuple[int, str]]]] = {
    "dav_2201": {
        1: [(0x49, "cube"), (0x4a, "zero"), (0x4b, "vector"), (0x4c, "zero"), (0x4d, "zero"),
            (0x4e, "zero"), (0x4f, "zero"), (0, "zero")],
        2: [(0x08, "vector"), (0x0a, "cube"), (0x09, "scalar"), (0x0b, "mte1"), (0x0c, "mte2"),
            (0x0d, "mte3"), (0x55, "zero"), (0x54, "zero")],
        4: [(0x15, "ub_read"), (0x16, "ub_write"), (0x31, "l1_read"), (0x32, "l1_write"),
            (0x0f, "l2_read"), (0x10, "l2_write"), (0x12, "main_read"), (0x13, "main_write")],
        5: [(0x1b, "l0a_read"), (0x1c, "l0a_write"), (0x21, "l0b_read"), (0x22, "l0b_write"),
            (0x27, "l0c_read"), (0x28, "l0c_write")],
        6: [(0x64, "zero"), (0x65, "zero"), (0x66, "zero")],
        7: [(0x3d, "mte3_ub_read"), (0x10, "l2_write"), (0x13, "main_write"),
            (0x3e, "mte2_ub_write"), (0x43, "vec_ub_read"), (0x44, "vec_ub_write"),
            (0x37, "zero"), (0x38, "zero")],
        8: [(0x500, "l2_write_hit"), (0x502, "l2_write_miss"), (0x504, "l2_read_hit"),
            (0x506, "l2_read_miss"), (0x508, "zero"), (0x50a, "zero")],
    },
    "dav_3510": {
        1: [(0x323, "cube"), (0x324, "zero")],
        2: [(0x501, "vector"), (0x301, "cube"), (0x1, "scalar"), (0x701, "mte1"),
            (0x202, "mte2"), (0x203, "mte3"), (0x34, "zero"), (0x35, "zero"), (0x714, "fixp")],
        4: [(0, "zero"), (0, "zero"), (0x400, "mte3_ub_read"), (0x401, "vec_ub_read"),
            (0x56f, "mte2_ub_write"), (0x571, "vec_ub_write"), (0x570, "l1_read"),
            (0x572, "l1_write"), (0x707, "zero"), (0x709, "zero")],
        5: [(0x304, "l0a_read"), (0x703, "l0a_write"), (0x306, "l0b_read"), (0x705, "l0b_write"),
            (0x712, "l0c_read"), (0x30a, "zero"), (0x308, "l0c_write")],
        6: [(0x3556, "zero"), (0x3540, "zero"), (0x3502, "vector"), (0x3528, "zero")],
        7: [(0x3, "ub_read"), (0x5, "ub_write"), (0x70c, "zero"), (0x206, "mte2_ub_write"),
            (0x204, "mte3_ub_read"), (0x571, "vec_ub_read"), (0x572, "vec_ub_write")],
        8: [(0x424, "l2_read_hit"), (0x425, "l2_read_miss"), (0x426, "zero"),
            (0x42a, "l2_write_hit"), (0x42b, "l2_write_miss"), (0x42c, "zero")],
    },
}


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _stoi(raw: str) -> int:
    """C++ ``std::stoi``: leading blanks, a sign and digits; trailing text is ignored."""
    m = re.match(r"\s*[+-]?\d+", raw)
    if not m or abs(int(m.group())) > 2**31 - 1:
        raise ValueError("stoi")
    return int(m.group())


def pmu_group(env: Mapping[str, str]) -> int | None:
    """The requested group (None: PMU collection off), with upstream's warnings."""
    raw = env.get(GROUP_ENV)
    if raw is None:
        if env.get(MSPROF_ENV, "").strip().lower() != "l3":
            return None
        _warn(f"Dont support {GROUP_ENV} env, use default pmu event type PIPE_UTILIZATION.")
        return DEFAULT_GROUP
    try:
        group = _stoi(raw)
    except ValueError as exc:
        _warn(f"Invalid {GROUP_ENV} value [{raw}], use default PIPE_UTILIZATION. error: {exc}")
        return DEFAULT_GROUP
    if group not in GROUP_NAMES:
        _warn(f"Invalid profPmuType {group}, only support [1,2,4,5,6,7,8].")
    return group


def arch_of(hw: Hardware) -> str:
    """The PMU layout of a chip; a custom hardware file counts as dav_2201."""
    return hw.name if hw.name in EVENTS else "dav_2201"


def slot_events(arch: str, group: int) -> list[tuple[int, str]]:
    """Every slot of the chip; a group PyPTO does not know leaves all of them at event 0."""
    events = EVENTS[arch].get(group, [])
    return (events + [(0, "zero")] * SLOTS[arch])[:SLOTS[arch]]


def l2_hit_rate(tl: Timeline, n: int) -> np.ndarray:
    """Per task: the share of its GM reads L2 served (0 while the machine has no L2)."""
    l2 = np.asarray(getattr(tl, "task_l2_bytes", np.zeros(0)), dtype=float)
    hbm = np.asarray(getattr(tl, "task_hbm_bytes", np.zeros(0)), dtype=float)
    if l2.size != n or hbm.size != n:
        return np.zeros(n)
    seen = l2 + hbm
    return np.divide(l2, seen, out=np.zeros(n), where=seen > 0)


def _memory_quantities(program: Program, tl: Timeline) -> dict[str, np.ndarray]:
    """Requests per buffer, from the bytes a task moves and the core type that moves them."""
    n = program.leaf_tasks
    aic = (tl.task_core < tl.aic_cores).astype(float)
    aiv = 1.0 - aic
    rd = np.ceil(np.asarray(program.task_read_bytes, dtype=float) / REQ_BYTES)
    wr = np.ceil(np.asarray(program.task_write_bytes, dtype=float) / REQ_BYTES)
    hit = np.rint(rd * l2_hit_rate(tl, n))
    q = {"vec_ub_read": rd * aiv, "vec_ub_write": wr * aiv, "mte2_ub_write": rd * aiv,
         "mte3_ub_read": wr * aiv, "l1_write": rd * aic, "l1_read": rd * aic,
         "l0a_read": np.floor(rd / 2) * aic, "l0b_read": np.ceil(rd / 2) * aic,
         "l0c_read": wr * aic, "l0c_write": wr * aic, "l2_read": rd, "l2_write": wr,
         "l2_read_hit": hit, "l2_read_miss": rd - hit, "l2_write_hit": np.zeros(n),
         "l2_write_miss": wr, "main_read": rd - hit, "main_write": wr}
    q.update(ub_read=q["vec_ub_read"] + q["mte3_ub_read"],
             ub_write=q["mte2_ub_write"] + q["vec_ub_write"],
             l0a_write=q["l0a_read"], l0b_write=q["l0b_read"])
    return q


def task_quantities(program: Program, tl: Timeline) -> dict[str, np.ndarray]:
    """Every quantity a slot can count, per leaf task (see the module docstring)."""
    zero = np.zeros(program.leaf_tasks)
    q = {"zero": zero, "total": (tl.task_end - tl.task_start) * tl.clock_mhz}
    for pipe in ("mte2", "mte1", "cube", "vector", "fixp", "mte3", "scalar"):
        q[pipe] = np.asarray(tl.task_pipe_cycles.get(pipe, zero), dtype=float)
    q.update(_memory_quantities(program, tl))
    q.update(getattr(tl, "task_counters", None) or {})
    return q


def counter_matrix(program: Program, tl: Timeline, arch: str, group: int) -> np.ndarray:
    """(tasks, 10) u32 counters: the group's slots, unused slots 0."""
    q = task_quantities(program, tl)
    out = np.zeros((program.leaf_tasks, rec.COUNTERS), dtype=np.uint32)
    for slot, (code, name) in enumerate(slot_events(arch, group)):
        values = q[name] if code else q["zero"]
        out[:, slot] = np.clip(np.rint(values), 0, 2**32 - 1).astype(np.uint32)
    return out


def _records(dtype: np.dtype, tl: Timeline, order: np.ndarray, per_record: int, data_type: int,
             freq: float, shift: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Records of ``order``'s tasks, headers filled: (records, record of each entry,
    slot of each entry in its record)."""
    rec_of = rec.records_of(tl.task_core[order], per_record)
    records = np.zeros(int(rec_of[-1]) + 1 if order.size else 0, dtype=dtype)
    slot = np.arange(order.size) - np.searchsorted(rec_of, rec_of, side="left")
    cnt = np.bincount(rec_of, minlength=records.size)
    core = tl.task_core[order][np.searchsorted(rec_of, np.arange(records.size))]  # first task's
    records["magic"], records["level"], records["type"] = rec.MAGIC, rec.LEVEL, rec.MSPROF_TYPE
    records["thread"] = np.asarray([tl.core_owner(int(c)) + 1 for c in core], dtype=np.uint32)
    records["data_len"] = rec.HEAD.size + dtype["entries"].base.itemsize * cnt
    # a record is flushed when its last task ends: stamp it with that AICPU counter value
    last_end = np.zeros(records.size)
    np.maximum.at(last_end, rec_of, tl.task_end[order])
    records["timestamp"] = to_cycles(last_end, freq) + shift
    records["head_magic"] = rec.HEAD_MAGIC
    records["head_bits"] = rec.head_bits(core, type_of_blocks(core, tl.aic_cores), data_type)
    records["cnt"] = cnt
    return records, rec_of, slot


def pmu_records(program: Program, tl: Timeline, freq: float, arch: str, group: int,
                shift: int = 0) -> bytes:
    """The PMU records: per task the total cycles and the group's ten counters."""
    v, order = TaskView.of(program), core_order(tl.task_core, tl.task_start)
    records, rec_of, slot = _records(rec.PMU_RECORD, tl, order, rec.PMU_PER_RECORD,
                                     rec.PMU_TYPE, freq, shift)
    entries = records["entries"]          # a view: filling it fills the records
    entries["seq"][rec_of, slot] = v.seq[order]
    entries["task"][rec_of, slot] = in_file(v.task_id[order])
    entries["total"][rec_of, slot] = np.rint((tl.task_end - tl.task_start)
                                             * tl.clock_mhz)[order].astype(np.uint64)
    entries["cnt"][rec_of, slot] = counter_matrix(program, tl, arch, group)[order]
    return records.tobytes()


def log_records(program: Program, tl: Timeline, freq: float, shift: int = 0) -> bytes:
    """The LOG records: per task its seqNo, leaf function, taskId and the same start
    and end cycles as tilefwk_L1_prof_data.json (``shift``: the launch they are)."""
    v, order = TaskView.of(program), core_order(tl.task_core, tl.task_start)
    records, rec_of, slot = _records(rec.LOG_RECORD, tl, order, rec.LOG_PER_RECORD,
                                     rec.LOG_TYPE, freq, shift)
    entries = records["entries"]
    entries["seq"][rec_of, slot] = v.seq[order]
    entries["leaf"][rec_of, slot] = v.leaf[order]
    entries["task"][rec_of, slot] = in_file(v.task_id[order])
    entries["start"][rec_of, slot] = (to_cycles(tl.task_start, freq) + shift)[order]
    entries["end"][rec_of, slot] = (to_cycles(tl.task_end, freq) + shift)[order]
    return records.tobytes()


def write_pmu_files(program: Program, tl: Timeline, hw: Hardware, env: Mapping[str, str],
                    out: Path, shift: int = 0) -> Path | None:
    """The PROF folder's PMU records when PMU collection is on; its data dir, else None.
    ``shift``: the ticks of the launch they are, the one the swimlane files hold."""
    group = pmu_group(env)
    if group is None:
        return None
    arch = arch_of(hw)
    data_dir = Path(out) / rec.PROF_DIR / rec.DEVICE_DATA
    freq = hw.aicpu.profile_freq_mhz
    # PMU collection (task-time L3) includes the L2 task log: both kinds share the file
    write_bytes(data_dir / rec.DATA_FILE, pmu_records(program, tl, freq, arch, group, shift)
                + log_records(program, tl, freq, shift))
    config = {"group": group, "arch": arch, "slots": SLOTS[arch],
              "event_codes": [code for code, _ in slot_events(arch, group)]}
    write_text(Path(out) / rec.PROF_DIR / rec.CONFIG_FILE, json.dumps(config, indent=4) + "\n")
    return data_dir
