"""msprof ``aicpu.data`` records that PyPTO's AICPU reports (hicann/pypto
framework/src/machine/device/dynamic/aicore_prof.{h,cpp}; read by
tools/profiling/tilefwk_pmu_to_csv.py (PMU records) and
tools/profiling/tilefwk_prof_data_parser.py (LOG records)).

Files ``PROF_<id>/device_<n>/data/*aicpu.data*`` are runs of 256-byte records:

- ``MsprofAdditionalInfo`` header (24 B): magic 0x5A5A, level 6000, type 10,
  threadId (the AICPU thread), dataLen (head + entries), timeStamp;
- PyPTO head (40 B): magic 0x6BD3, a u16 of coreId (bits 0-6), coreType
  (bits 7-9, cores.CoreType) and dataType (bits 10-15: 2 LOG, 3 PMU), taskId,
  streamId, cnt (entries in the record);
- entries from byte 64: PMU ``{seqNo u32, taskId u32, totalCyc u64,
  pmuCnt0..9 u32}`` (56 B; a 48-byte form with 8 counters also exists), at most
  3 a record; LOG ``{seqNo i16, subGraphId i16, taskId i32, execStart i64,
  execEnd i64}`` (24 B, the head of TaskStat), at most 8 a record.

The device fills one record per core and reports it when full (and the rest at
the end), so a core's entries are in execution order.  LOG records need
msprof's task-time level L2, PMU records level L3 (which includes L2).
"""
from __future__ import annotations

import struct

import numpy as np

PROF_DIR = "PROF_000001"
DEVICE_DATA = "device_0/data"
DATA_FILE = "aicpu.data.0.slice_0"
DATA_MARK = "aicpu.data"            # readers take every file whose name holds this
CONFIG_FILE = "ptolab_pmu.json"     # beside device_0: the group and chip of the records
TRACE_DIR, TRACE_FILE = "mindstudio_profiler_output", "msprof_000001.json"

RECORD_BYTES = 256
MAGIC, LEVEL, MSPROF_TYPE = 0x5A5A, 6000, 10   # MSPROF_REPORT_AICPU_HCCL_OP_INFO
HEAD_MAGIC = 0x6BD3
LOG_TYPE, PMU_TYPE = 2, 3
COUNTERS = 10
PMU_PER_RECORD, LOG_PER_RECORD = 3, 8
ENTRY_OFFSET = 64

# the reader's view (struct, little-endian, explicit offsets)
HEADER = struct.Struct("<HHIIIQ")
HEAD = struct.Struct("<HHIHBB7I")
PMU_ENTRY = {56: struct.Struct("<IIQ10I"), 48: struct.Struct("<IIQ8I")}
LOG_ENTRY = struct.Struct("<hhiqq")


def head_bits(core: np.ndarray, core_type: np.ndarray, data_type: int) -> np.ndarray:
    return (np.asarray(core) & 0x7F) | (np.asarray(core_type) << 7) | (data_type << 10)


def split_head_bits(bits: int) -> tuple[int, int, int]:
    """(coreId, coreType, dataType) of the head's bitfield."""
    return bits & 0x7F, (bits >> 7) & 0x7, bits >> 10


def _record(entry: np.dtype, per_record: int) -> np.dtype:
    """The writer's view: one numpy record, the same offsets as HEADER + HEAD + entries."""
    return np.dtype({
        "names": ["magic", "level", "type", "thread", "data_len", "timestamp",
                  "head_magic", "head_bits", "head_task", "stream", "cnt", "entries"],
        "formats": ["<u2", "<u2", "<u4", "<u4", "<u4", "<u8",
                    "<u2", "<u2", "<u4", "<u2", "u1", (entry, per_record)],
        "offsets": [0, 2, 4, 8, 12, 16, 24, 26, 28, 32, 34, ENTRY_OFFSET],
        "itemsize": RECORD_BYTES})


PMU_ENTRY_DTYPE = np.dtype({"names": ["seq", "task", "total", "cnt"],
                            "formats": ["<u4", "<u4", "<u8", ("<u4", COUNTERS)],
                            "offsets": [0, 4, 8, 16], "itemsize": 56})
LOG_ENTRY_DTYPE = np.dtype({"names": ["seq", "leaf", "task", "start", "end"],
                            "formats": ["<i2", "<i2", "<i4", "<i8", "<i8"],
                            "offsets": [0, 2, 4, 8, 16], "itemsize": 24})
PMU_RECORD = _record(PMU_ENTRY_DTYPE, PMU_PER_RECORD)
LOG_RECORD = _record(LOG_ENTRY_DTYPE, LOG_PER_RECORD)


def records_of(core: np.ndarray, per_record: int) -> np.ndarray:
    """Record number of each entry, entries sorted by core: a record holds one core's
    next ``per_record`` entries."""
    pos = np.arange(core.size) - np.searchsorted(core, core, side="left")
    return np.cumsum(pos % per_record == 0) - 1
