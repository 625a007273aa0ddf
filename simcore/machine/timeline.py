"""What a simulated run leaves behind: when every leaf task and AICPU phase happened.

All times are microseconds from the launch (the AICPU control thread's BEGIN).
The emit stage turns a Timeline into PyPTO's files; nothing here knows a format.
A Timeline owns its arrays and thread records: the run that made it hands them
over, and no later run of the same Machine shares or changes them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SchedThread:
    index: int
    begin: float
    alloc: float
    init: float
    handshake: float
    rcv: list[float] = field(default_factory=list)           # per dev task
    first_send: list[float] = field(default_factory=list)
    sched_exec: list[float] = field(default_factory=list)
    sync_stop: list[float] = field(default_factory=list)
    rsp: list[float] = field(default_factory=list)
    wait_all_finish: float = 0.0
    core_exit: float = 0.0
    exit: float = 0.0
    dispatches: int = 0


@dataclass
class Timeline:
    aic_cores: int
    aiv_cores: int
    task_core: np.ndarray        # block index: AIC 0..aic-1, then AIV
    task_start: np.ndarray
    task_end: np.ndarray
    ctrl_begin: float
    ctrl_init: float
    dev_build_end: np.ndarray    # per dev task
    dev_start: np.ndarray
    dev_end: np.ndarray
    ctrl_exit: float
    sched: list[SchedThread]
    core_begin: float
    core_init: float
    core_exit: np.ndarray        # per core
    # busy cycles (core clock) per pipe per leaf task: mte2, mte1, cube, vector, fixp, mte3, scalar
    task_pipe_cycles: dict[str, np.ndarray] = field(default_factory=dict)
    clock_mhz: float = 1000.0
    # GM bytes each task read from HBM (L2 misses) and from L2 (hits)
    task_hbm_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    task_l2_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def kernel_us(self) -> float:
        if self.task_start.size == 0:
            return 0.0
        return float(self.task_end.max() - self.task_start.min())

    @property
    def e2e_us(self) -> float:
        exits = [self.ctrl_exit] + [s.exit for s in self.sched]
        begins = [self.ctrl_begin] + [s.begin for s in self.sched]
        return float(max(exits) - min(begins))

    def core_owner(self, core: int) -> int:
        return core % len(self.sched)
