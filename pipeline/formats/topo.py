"""``dyn_topo.txt``: one row per leaf task (hicann/pypto
framework/src/machine/utils/dynamic/device_task.h ``DumpTopo``; read by
tools/profiling/draw_swim_lane.py ``load_dyn_topo``).

A header line, then ``seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,
leafHash,coreType,psgId,wrapId,staticSuccCount,successors...``: the successors
are taskIds of the same dev task (seqNo), those inside the same root call first
(their count is staticSuccCount), then the stitch successors in other root
calls.  The reader skips lines that start with a letter and reads integers only.
``opmagic`` is the magic of the root function's CALL op that runs the task
(see program.py).
"""
from __future__ import annotations

HEADER = ("seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,"
          "wrapId,staticSuccCount,successors")
# the parsed table's names of the fixed columns, in file order
COLUMNS = ("seq_no", "task_id", "root_index", "root_hash", "opmagic", "leaf_index", "leaf_hash",
           "core_type", "psg_id", "wrap_id", "static_succ_count")
FIXED = len(COLUMNS)
NO_WRAP = -1


def row(fields: list[int], successors: list[int]) -> str:
    """One task's line: the 11 fixed fields, then its successors' taskIds."""
    return ",".join(map(str, [*fields, *successors]))


def parse_line(line: str) -> tuple[list[int], list[int]] | None:
    """(fixed fields, successors) of a task line; None for the header or a blank line."""
    if not line.strip() or line[0].isalpha():
        return None
    cells = [int(c) for c in line.split(",") if c.strip()]
    return cells[:FIXED], cells[FIXED:]
