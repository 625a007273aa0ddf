"""The compiled task graph: what PyPTO would hand its runtime.

Leaf tasks are stored column-wise in numpy arrays (one row per leaf task) so the
machine model and the emitters stay linear in the number of tasks.  Pipe work
that does not depend on the memory system is in core cycles; GM loads are in
bytes and bursts, because their time depends on L2 hits and on how many cores
share HBM at that moment.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

AIV, AIC = 0, 1   # upstream CoreType numbering


@dataclass(frozen=True)
class LeafFunction:
    index: int
    hash: int
    name: str
    core_type: int
    label: str
    root: int                      # root function it belongs to
    order: int                     # hashOrder: isomorphic group index in the root function
    merge_info: tuple[str, ...] = ()   # "l1ReuseInfo hashOrder: func8_0, subGraphCount: 24"
    ops: tuple[str, ...] = ()          # the PyPTO ops merged into this leaf function
    # per op: (reduce axis or None, first input's tile shape, that input's full shape)
    op_shapes: tuple = ()

    @property
    def hash_order(self) -> str:
        return f"func{self.root}_{self.order}"


@dataclass(frozen=True)
class RootFunction:
    index: int
    hash: int
    name: str


@dataclass
class Program:
    kernel: str
    root_functions: list[RootFunction]
    leaf_functions: list[LeafFunction]
    # per root call
    call_root: np.ndarray          # root function index
    call_bodies: np.ndarray        # loop bodies (unroll units) in the call
    call_dev_task: np.ndarray      # dev task (seqNo)
    call_in_dev_task: np.ndarray   # position of the call inside its dev task (funcId)
    # per leaf task
    task_call: np.ndarray
    task_leaf: np.ndarray          # leaf function index
    task_op: np.ndarray            # opIdx inside the root call
    task_core: np.ndarray          # AIV / AIC
    work: dict[str, np.ndarray]    # vector, cube, mte1, fixp (cycles); mte2_bytes,
    #                                mte2_bursts, mte3_bytes, flops, in_flight
    # GM accesses, for the L2 model: the L2 regions each task reads or writes
    acc_task: np.ndarray
    acc_block: np.ndarray          # (buffer << 40) + region index of L2_REGION_BYTES
    acc_bytes: np.ndarray
    acc_region_bytes: np.ndarray   # size of the access's region (smaller at a tensor's end)
    acc_write: np.ndarray
    acc_bypass: np.ndarray
    # dependency edges (task index -> task index), sorted by src then dst
    edge_src: np.ndarray
    edge_dst: np.ndarray
    workspace_bytes: int
    info: dict = field(default_factory=dict)
    # input tensors whose values the control flow reads (kernel's control_flow_input)
    control_inputs: tuple[str, ...] = ()

    @property
    def root_calls(self) -> int:
        return int(self.call_root.size)

    @property
    def loop_bodies(self) -> int:
        return int(self.call_bodies.sum())

    @property
    def leaf_tasks(self) -> int:
        return int(self.task_call.size)

    @property
    def dev_tasks(self) -> int:
        return int(self.call_dev_task.max()) + 1 if self.call_root.size else 0

    @property
    def task_dev_task(self) -> np.ndarray:
        return self.call_dev_task[self.task_call]

    @property
    def task_id(self) -> np.ndarray:
        """Upstream taskId: (funcId << 16) | opIdx, funcId = call position in its dev task."""
        return (self.call_in_dev_task[self.task_call].astype(np.int64) << 16) | self.task_op

    @property
    def task_read_bytes(self) -> np.ndarray:
        return self.work["mte2_bytes"]

    @property
    def task_write_bytes(self) -> np.ndarray:
        out = np.zeros(self.leaf_tasks)
        w = self.acc_write
        np.add.at(out, self.acc_task[w], self.acc_bytes[w])
        return out

    def counts(self) -> dict[str, int]:
        return {
            "root_calls": self.root_calls,
            "loop_bodies": self.loop_bodies,
            "leaf_functions": len(self.leaf_functions),
            "leaf_tasks": self.leaf_tasks,
            "dev_tasks": self.dev_tasks,
        }
