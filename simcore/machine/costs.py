"""How long one leaf task runs on its core, from the leaf function's pipe work.

First model: the tile's pipe work runs back to back (one tile in flight, no
double buffering), each op costing fixed cycles plus bytes over the pipe's rate,
and the core adds a head overhead per leaf task.
"""
from __future__ import annotations

import numpy as np

from ..compiler.program import LeafFunction, PipeWork, Program
from ..spec.hardware import Hardware, PipeRate


def _rate(hw: Hardware, work: PipeWork) -> PipeRate:
    if work.pipe == "mte2":
        return hw.pipes.mte2
    if work.pipe == "mte3":
        return hw.pipes.mte3
    table = hw.pipes.vector
    return table.get(work.kind, table["default"])


def pipe_cycles(hw: Hardware, leaf: LeafFunction) -> dict[str, float]:
    cycles: dict[str, float] = {}
    for work in leaf.work:
        rate = _rate(hw, work)
        cycles[work.pipe] = cycles.get(work.pipe, 0.0) + rate.fixed_cycles \
            + work.bytes / rate.bytes_per_cycle
    return cycles


def leaf_duration_us(hw: Hardware, leaf: LeafFunction) -> float:
    busy = sum(pipe_cycles(hw, leaf).values())
    return hw.core.head_overhead_us + busy / hw.cores.clock_mhz


def task_durations_us(hw: Hardware, program: Program) -> np.ndarray:
    per_leaf = np.asarray([leaf_duration_us(hw, leaf) for leaf in program.leaf_functions])
    return per_leaf[program.task_leaf] if per_leaf.size else np.zeros(0)


PIPES = ("mte2", "mte1", "cube", "vector", "fixp", "mte3", "scalar")


def task_pipe_cycles(hw: Hardware, program: Program) -> dict[str, np.ndarray]:
    """Busy cycles of every pipe for every leaf task (core clock cycles)."""
    per_leaf = [pipe_cycles(hw, leaf) for leaf in program.leaf_functions]
    return {pipe: np.asarray([c.get(pipe, 0.0) for c in per_leaf])[program.task_leaf]
            if per_leaf else np.zeros(0) for pipe in PIPES}
