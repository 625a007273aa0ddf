"""What one leaf task costs on its core, pipe by pipe: the one place work meets rates.

The compiler hands over hardware-independent work (simcore/compiler/work.py);
everything but MTE2 is priced here once per program, vectorised over tasks.
MTE2 depends on the memory system at the moment the task starts: how many of
its bytes hit L2, and how many cores share HBM and L2 bandwidth then;
``Mte2Model`` prices it at dispatch.  A task whose tiles pipeline (several in
flight: NBuffer, L1Reuse or a multi-step K loop) overlaps its pipes; a
single-tile task runs them back to back.
"""
from __future__ import annotations

import numpy as np

from ..compiler.program import Program
from ..compiler.work import CubeWork, VectorWork, Work
from ..spec.hardware import Hardware, PipeRate


def _per_task(task: np.ndarray, cycles: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(task, weights=cycles, minlength=n).astype(float) if n else np.zeros(0)


def vector_cycles(hw: Hardware, vector: VectorWork, n: int) -> np.ndarray:
    """Each op kind at its rate from the vector table (its "default" for unlisted kinds)."""
    table = hw.pipes.vector
    rates = [table.get(k, table["default"]) for k in vector.kinds]
    fixed = np.asarray([r.fixed_cycles for r in rates] or [0.0])
    per_byte = np.asarray([r.bytes_per_cycle for r in rates] or [1.0])
    k = vector.kind
    return _per_task(vector.task, vector.tiles * fixed[k] + vector.bytes / per_byte[k], n)


def cube_cycles(hw: Hardware, cube: CubeWork, n: int) -> np.ndarray:
    rate = hw.pipes.cube
    table = rate.cycles_per_fractal
    per_fractal = np.asarray([table.get(d, table["default"]) for d in cube.dtypes] or [0.0])
    cycles = cube.tiles * rate.fixed_cycles + cube.fractals * per_fractal[cube.dtype]
    return _per_task(cube.task, cycles, n)


def _linear(rate: PipeRate, starts: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    return rate.fixed_cycles * starts + nbytes / rate.bytes_per_cycle


def pipe_cycles(hw: Hardware, work: Work) -> dict[str, np.ndarray]:
    """Per task, core cycles on every pipe except MTE2."""
    n, p = work.tasks, hw.pipes
    mte3 = np.where(work.mte3_bytes > 0,
                    p.mte3.fixed_cycles + work.mte3_bytes / p.mte3.bytes_per_cycle, 0.0)
    return {"mte1": _linear(p.mte1, work.mte1_steps, work.mte1_bytes),
            "cube": cube_cycles(hw, work.cube, n),
            "vector": vector_cycles(hw, work.vector, n),
            "fixp": _linear(p.fixp, work.fixp_tiles, work.fixp_bytes),
            "mte3": mte3}


def static_pipe_us(hw: Hardware, program: Program) -> dict[str, np.ndarray]:
    """Per task, microseconds on every pipe except MTE2."""
    clock = hw.cores.clock_mhz
    return {k: v / clock for k, v in pipe_cycles(hw, program.work).items()}


class Mte2Model:
    """MTE2 time of a task from its L2 hits/misses and the bandwidth share at dispatch."""

    def __init__(self, hw: Hardware):
        m = hw.pipes.mte2
        clock = hw.cores.clock_mhz
        self.fixed_us = m.fixed_cycles / clock
        self.l2_fixed_us = m.l2_hit_fixed_cycles / clock
        self.burst_us = m.burst_setup_cycles / clock
        self.core_rate = m.bytes_per_cycle * clock          # bytes per us, one core
        self.hbm_rate = hw.memory.hbm_gbps * 1e3            # bytes per us, whole chip
        self.l2_rate = hw.memory.l2_gbps * 1e3

    def us(self, loads: float, bursts: float, hbm_bytes: float, l2_bytes: float,
           loaders: int) -> float:
        """The GM latency is paid once per task: its copy-ins queue back to back and the
        tiles of a pipelined task hide each other's latency.  A task whose every byte
        hits L2 (a consumer of data just written) waits only the L2 round trip."""
        if loads == 0:
            return 0.0
        share = max(loaders, 1)
        hbm = min(self.core_rate, self.hbm_rate / share)
        l2 = min(self.core_rate, self.l2_rate / share)
        fixed = self.fixed_us if hbm_bytes > 0 else self.l2_fixed_us
        return fixed + bursts * self.burst_us + hbm_bytes / hbm + l2_bytes / l2


    def write_us(self, nbytes: float, loaders: int) -> float:
        return nbytes / (self.hbm_rate / max(loaders, 1)) if nbytes else 0.0
