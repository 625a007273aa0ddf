"""How upstream numbers leaf tasks (hicann/pypto
framework/src/interface/machine/device/tilefwk/aikernel_data.h, ``MakeTaskID``).

A taskId is ``funcId << 16 | opIdx``: funcId is the root call's position in its
dev task (10 bits), opIdx the CALL op's index in the root function (16 bits).
Files keep the low 26 bits.  A task is unique by ``(seqNo, taskId)``; the
swimlane merger keys it as ``seqNo << 32 | taskId`` and shows it as
``seqNo-funcId-opIdx``.  Functions work on ints and numpy arrays alike.
"""
from __future__ import annotations

OP_BITS, FUNC_BITS = 16, 10
FILE_MASK = (1 << (OP_BITS + FUNC_BITS)) - 1
TASK_KEY_COLUMNS = ("seq_no", "task_id")    # parsed tables join on these


def make_task_id(func_id, op_idx):
    return (func_id << OP_BITS) | op_idx


def func_id(task_id):
    return (task_id >> OP_BITS) & ((1 << FUNC_BITS) - 1)


def op_idx(task_id):
    return task_id & ((1 << OP_BITS) - 1)


def in_file(task_id):
    """The taskId as files store it (26 bits)."""
    return task_id & FILE_MASK


def task_key(seq_no, task_id):
    return (seq_no << 32) | task_id


def formal_name(seq_no: int, task_id: int) -> str:
    return f"{seq_no}-{func_id(task_id)}-{op_idx(task_id)}"
