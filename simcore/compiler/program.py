"""The compiled task graph: what PyPTO would hand its runtime.

Leaf tasks are stored column-wise in numpy arrays (one row per leaf task) so the
machine model and the emitters stay linear in the number of tasks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

AIV, AIC = 0, 1   # upstream CoreType numbering


@dataclass(frozen=True)
class PipeWork:
    """One tile op's work on one pipe: ``kind`` selects the rate in the hardware file."""
    pipe: str      # "mte2", "vector", "mte3"
    kind: str      # op kind for vector ("add", "exp", ...), "copy_in" / "copy_out" for MTE
    bytes: int


@dataclass(frozen=True)
class LeafFunction:
    index: int
    hash: int
    name: str
    core_type: int
    label: str
    work: tuple[PipeWork, ...]
    ub_bytes: int        # peak live bytes in UB for one tile
    flops: int


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
    call_dev_task: np.ndarray      # dev task (seqNo)
    call_in_dev_task: np.ndarray   # position of the call inside its dev task (funcId)
    # per leaf task
    task_call: np.ndarray
    task_leaf: np.ndarray          # leaf function index
    task_op: np.ndarray            # opIdx inside the root call
    task_core: np.ndarray          # AIV / AIC
    task_read_bytes: np.ndarray
    task_write_bytes: np.ndarray
    # dependency edges (task index -> task index), sorted by src then dst
    edge_src: np.ndarray
    edge_dst: np.ndarray
    loop_bodies: int
    workspace_bytes: int
    info: dict = field(default_factory=dict)

    @property
    def root_calls(self) -> int:
        return int(self.call_root.size)

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

    def counts(self) -> dict[str, int]:
        return {
            "root_calls": self.root_calls,
            "loop_bodies": self.loop_bodies,
            "leaf_functions": len(self.leaf_functions),
            "leaf_tasks": self.leaf_tasks,
            "dev_tasks": self.dev_tasks,
        }
