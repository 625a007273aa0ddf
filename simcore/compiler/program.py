"""The compiled task graph: what PyPTO would hand its runtime.

Leaf tasks are stored column-wise in numpy arrays (one row per leaf task) so the
machine model and the emitters stay linear in the number of tasks.  What a task
asks of each pipe is in hardware-independent units (work.py: bytes, fractals,
tiles); the machine prices it for a chip, so one Program runs on any Hardware
with the same mapping limits (limits.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from .work import Work


class CoreType(IntEnum):
    """Which AI core a leaf task runs on, numbered as upstream's CoreType."""
    AIV = 0
    AIC = 1


@dataclass(frozen=True)
class LeafFunction:
    index: int
    hash: int
    name: str
    core_type: CoreType
    label: str
    root: int                      # root function it belongs to
    order: int                     # hashOrder: isomorphic group index in the root function
    merge_info: tuple[str, ...] = ()   # "l1ReuseInfo hashOrder: func8_0, subGraphCount: 24"
    ops: tuple[str, ...] = ()          # the PyPTO ops merged into this leaf function
    # per op: (reduce axis or None, first input's tile shape, that input's full shape)
    op_shapes: tuple = ()
    srcs: tuple = ()                   # per op: FILE.py:LINE that wrote it, or None

    @property
    def hash_order(self) -> str:
        return f"func{self.root}_{self.order}"


@dataclass(frozen=True)
class RootFunction:
    index: int
    hash: int
    name: str
    # the GM operands of its CALL ops, as its first call has them (program.json's tensors,
    # rawtensors and each CALL op's ioperands / ooperands)
    operands: "CallOperands | None" = None


@dataclass(frozen=True)
class CallOperands:
    """The GM boxes each op (leaf task) of one root call reads and writes, a row each:
    ``op`` its index in the call, ``tensor`` an index into ``tensors`` ((name, whole shape,
    dtype)), ``lo`` and ``hi`` the box in that tensor's dims."""
    tensors: tuple[tuple[str, tuple[int, ...], str], ...]
    op: np.ndarray
    tensor: np.ndarray
    write: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


# L2 line: the unit L2 fills and the region bitmaps count.  512 B is CANN's cache line on
# A2/A3 (the matmul tiling's CACHELINE; best practice 10_0014's efficient access unit) and
# upstream's l2LineSize (docs/sources.md §3).
L2_LINE_BYTES = 512


@dataclass(frozen=True)
class RegionAccesses:
    """The L2 regions each leaf task reads or writes, one row per (GM box, region).

    A box covers, in its buffer's row-major layout, one contiguous run of bytes per
    row of its outer dimensions; ``lines`` marks the lines of the region those runs
    touch and ``bytes`` counts the box's bytes inside the region, so the rows of one
    box add up to its bytes.  The L2 model looks them up in the order a task starts.
    """
    task: np.ndarray
    region: np.ndarray          # (buffer << 40) + region index
    bytes: np.ndarray           # bytes of the access inside the region
    lines: np.ndarray           # uint64 bitmap of the region's L2 lines it touches
    write: np.ndarray
    bypass: np.ndarray          # set_cache_policy bypass: read from HBM, not kept

    @classmethod
    def empty(cls) -> "RegionAccesses":
        z = np.zeros(0)
        return cls(z.astype(np.int64), z.astype(np.int64), z, z.astype(np.uint64),
                   z.astype(bool), z.astype(bool))


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
    task_core: np.ndarray          # CoreType value
    work: Work                     # what each task asks of each pipe
    regions: RegionAccesses        # for the L2 model
    # dependency edges (task index -> task index), sorted by src then dst
    edge_src: np.ndarray
    edge_dst: np.ndarray
    workspace_bytes: int
    info: dict = field(default_factory=dict)
    # input tensors whose values the control flow reads (kernel's control_flow_input)
    control_inputs: tuple[str, ...] = ()
    # per edge: the hub it reaches its successor through, or -1 (simcore/compiler/encode.py);
    # empty: every edge direct
    edge_hub: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # the tasks that resolve an end hub when they end, and its index (after the edge hubs;
    # simcore/compiler/encode.py end_hubs): nothing waits for an end hub
    tail_task: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tail_hub: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

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
    def hubs(self) -> int:
        last = max([-1] + [int(h.max()) for h in (self.edge_hub, self.tail_hub) if h.size])
        return last + 1

    @property
    def task_dev_task(self) -> np.ndarray:
        return self.call_dev_task[self.task_call]

    @property
    def task_id(self) -> np.ndarray:
        """Upstream taskId: (funcId << 16) | opIdx, funcId = call position in its dev task."""
        return (self.call_in_dev_task[self.task_call].astype(np.int64) << 16) | self.task_op

    @property
    def task_read_bytes(self) -> np.ndarray:
        return self.work.mte2_bytes

    @property
    def task_write_bytes(self) -> np.ndarray:
        w = self.regions.write
        return np.bincount(self.regions.task[w], weights=self.regions.bytes[w],
                           minlength=self.leaf_tasks).astype(float)

    def counts(self) -> dict[str, int]:
        return {
            "root_calls": self.root_calls,
            "loop_bodies": self.loop_bodies,
            "leaf_functions": len(self.leaf_functions),
            "leaf_tasks": self.leaf_tasks,
            "dev_tasks": self.dev_tasks,
        }
