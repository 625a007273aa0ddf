"""What one leaf task costs on its core, pipe by pipe: the one place work meets rates.

The compiler hands over hardware-independent work (simcore/compiler/work.py);
everything but MTE2 is priced here once per program, vectorised over tasks.
MTE2 depends on the memory system while the task loads: how many of its bytes
hit L2 (looked up at the start) and how many cores share HBM meanwhile;
``Mte2Model`` gives the latency and the per-loader HBM rates the engine re-prices
as loaders come and go.  A task whose tiles pipeline (several in
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


# A row reduction folds the repeats of each row pairwise with the matching elementwise
# instruction, then reduces the last repeat of every row with its reduce instruction
# (pto-isa's TRowReduce: vadd/vmax/vmin then vcadd/vcmax/vcmin, docs/sources.md §2).
REDUCE_FOLD = {"rowsum": "add", "rowamax": "maximum", "rowamin": "minimum"}


# the binary ALU instructions pto-isa's 910B3 calibration found paying a dispatch floor in
# count-mask mode (cce_costmodel_vector_compute.hpp: vadd, vsub, vmul, vdiv, vmax, vmin)
COUNT_MODE_KINDS = ("add", "sub", "mul", "div", "maximum", "minimum")


def vector_cycles(hw: Hardware, vector: VectorWork, n: int) -> np.ndarray:
    """Each op tile as the instructions it issues (docs/sources.md §2, Vector unit).

    An instruction costs its start-up plus a rate per repeat; a row shorter than a
    repeat still takes one, so small tiles pay per row, not per byte.  A tile op pays
    the scalar issue; one that waits for an earlier op's result also pays the pipe
    drain.  A reduction along the last axis with k repeats per row folds them in
    k - 1 dependent steps of the fold instruction (each over every row), then
    reduces each row once.  A kind with ``row_cycles`` adds them per row (a row
    expand reads each row's value on the scalar unit).  Unlisted kinds use the
    table's "default".
    """
    table, issue = hw.pipes.vector, hw.pipes.vector_issue
    if vector.task.size == 0:
        return np.zeros(n)
    rep = float(issue.repeat_bytes)
    rate = lambda k: table.get(k, table["default"])
    own = [rate(k) for k in vector.kinds]
    fold = [rate(REDUCE_FOLD.get(k, k)) for k in vector.kinds]
    fixed = np.asarray([r.fixed_cycles for r in own])
    per_rep = rep / np.asarray([r.bytes_per_cycle for r in own])
    fold_fixed = np.asarray([r.fixed_cycles for r in fold])
    fold_rep = rep / np.asarray([r.bytes_per_cycle for r in fold])
    k = vector.kind
    tiles, rows, red = vector.tiles, vector.rows, vector.reduce
    per_row = np.ceil(vector.row_bytes / rep)
    tile_rows = np.divide(rows, tiles, out=np.zeros(rows.size), where=tiles > 0)
    # elementwise: every row's repeats in instructions of at most max_repeats
    repeats = np.where(red, 1.0, per_row) * rows
    tile_reps = np.where(red, 1.0, per_row) * tile_rows
    instr = tiles * np.ceil(tile_reps / issue.max_repeats)
    # a reduction's own instructions reduce each row once (its rate); a reduction that is
    # not along the last axis is all folding, the elementwise fold instruction issued row
    # by row from a scalar loop (pto-isa TColSum / TColMax): a start-up and the loop's
    # issue for every row
    folds_only = np.asarray([kk in REDUCE_FOLD for kk in vector.kinds])[k] & ~red
    cycles = np.where(folds_only, rows * (fold_fixed[k] + issue.loop_instruction_cycles),
                      instr * fixed[k]) \
        + repeats * np.where(folds_only, fold_rep[k], per_rep[k])
    steps = np.where(red, np.maximum(per_row - 1.0, 0.0), 0.0)   # dependent fold steps per tile
    cycles += steps * (instr * fold_fixed[k] + rows * fold_rep[k] + tiles * issue.dependency_cycles)
    # a tile op that touches every row on the scalar unit pays that per row (row expand)
    row_cycles = np.asarray([r.row_cycles for r in own])
    cycles += rows * row_cycles[k]
    cycles += tiles * issue.issue_cycles + vector.dependent * issue.dependency_cycles
    # tensor-tensor ALU instructions over rows of a partial repeat: the count-mask floor
    counted = np.asarray([kk in COUNT_MODE_KINDS for kk in vector.kinds])[k] \
        & (np.mod(vector.row_bytes, rep) != 0)
    cycles += np.where(counted, instr * issue.count_mode_cycles, 0.0)
    return _per_task(vector.task, cycles, n)


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
    # a result written out and read back inside the task: the read waits for the write, so
    # each such round trip adds a copy-out and a copy-in latency the task's one-per-task
    # MTE2 and MTE3 latencies do not cover (charged to MTE3, where the wait starts)
    mte3 = mte3 + work.round_trips * (p.mte3.fixed_cycles + p.mte2.fixed_cycles)
    # a scalar loop waits for the Vector pipe to drain before it starts and the Vector
    # pipe waits for it after: two hand-overs, each priced as a pipe drain
    scalar = work.scalar_elements * p.scalar.element_cycles \
        + work.scalar_stores * p.scalar.store_cycles_per_element \
        + work.scalar_loops * 2 * p.vector_issue.dependency_cycles
    return {"mte1": _linear(p.mte1, work.mte1_steps, work.mte1_bytes),
            "cube": cube_cycles(hw, work.cube, n),
            "vector": vector_cycles(hw, work.vector, n),
            "fixp": _linear(p.fixp, work.fixp_tiles, work.fixp_bytes),
            "mte3": mte3,
            "scalar": scalar}


def static_pipe_us(hw: Hardware, program: Program) -> dict[str, np.ndarray]:
    """Per task, microseconds on every pipe except MTE2."""
    clock = hw.cores.clock_mhz
    return {k: v / clock for k, v in pipe_cycles(hw, program.work).items()}


def busiest_pipe_us(pipes: dict[str, np.ndarray], work: Work) -> np.ndarray:
    """Per task, the pipe (other than MTE2) that sets the pace once its tiles pipeline:
    the longest, except that k steps whose L0A or L0B tile leaves no room for a second
    (``Work.l0_serial_steps``) run their L1 -> L0 move and their multiply one after the
    other, as one pipe: PyPTO's matmul guide gets MTE1 double buffering from 32 KiB L0
    tiles, none from larger ones (docs/sources.md §2)."""
    busiest = np.stack(list(pipes.values())).max(axis=0)
    if not work.l0_serial_steps.any():
        return busiest
    mte1, cube = pipes["mte1"], pipes["cube"]
    share = np.divide(work.l0_serial_steps, work.mte1_steps,
                      out=np.zeros(work.tasks), where=work.mte1_steps > 0)
    serial = share * (mte1 + cube) + (1.0 - share) * np.maximum(mte1, cube)
    return np.maximum(busiest, serial)


class Mte2Model:
    """MTE2 time of a task: a latency, then its HBM bytes at the bandwidth share of the moment.

    A copy-in pays the GM round trip, then streams; L2 hits stream at the core type's copy
    rate (an AIC's into L1 its own, measured on a GEMM) or the L2's share if that is lower
    (L2 is several times HBM, so its share is taken at the start).  Every contiguous run
    of a box costs the DMA a setup, but the engine issues the next run's descriptor while
    earlier runs stream, so the setups only bound the stream from below: they show when the
    runs are short (a short tail axis, ND rows reordered into fractals on the way to L1),
    and hide behind the data when the runs are long.  So does each copy-in after a task's
    first (one DataCopy: its fixed time, pto-isa's on-device fit): a task of many small
    copy-ins waits for them one after another however little they carry.
    The HBM bytes drain at a rate the engine re-prices whenever a loader joins or leaves
    (``rates``): the chip's HBM is water-filled over the cores loading at that moment, each
    held to its own per-core ceiling, so a lone loader runs at its cap and many share HBM.
    """

    def __init__(self, hw: Hardware):
        m = hw.pipes.mte2
        clock = hw.cores.clock_mhz
        self.fixed_us = m.fixed_cycles / clock
        self.l2_fixed_us = m.l2_hit_fixed_cycles / clock
        self.burst_us = m.burst_setup_cycles / clock
        self.aiv_copy_us = m.aiv_copy_cycles / clock
        self.aic_copy_us = m.aic_copy_cycles / clock
        self.core_rate = m.bytes_per_cycle * clock          # bytes per us, one core
        # an AIC streams its L2 hits into L1 at its own rate (unset: the AIV's)
        self.aic_core_rate = (m.aic_l2_bytes_per_cycle or m.bytes_per_cycle) * clock
        self.hbm_rate = hw.memory.hbm_gbps * 1e3            # bytes per us, whole chip
        self.l2_rate = hw.memory.l2_gbps * 1e3
        # per core type (CoreType: AIV 0, AIC 1), bytes per us one core pulls from HBM;
        # unset, the type's own copy rate
        self.caps = [(g * 1e3 if g else rate) for g, rate in
                     ((m.aiv_hbm_gbps, self.core_rate), (m.aic_hbm_gbps, self.aic_core_rate))]

    def latency_us(self, hbm_bytes: float, l2_bytes: float, running: int,
                   aic: bool = False) -> float:
        """Everything of the MTE2 phase before the HBM bytes: the GM latency, paid once per
        task (its copy-ins queue back to back and pipelined tiles hide each other's
        latency), and the L2 hits.  All-L2 tasks wait only the L2 round trip."""
        fixed = self.fixed_us if hbm_bytes > 0 else self.l2_fixed_us
        l2 = min(self.aic_core_rate if aic else self.core_rate,
                 self.l2_rate / max(running, 1))
        return fixed + (l2_bytes / l2 if l2_bytes else 0.0)

    def setups_us(self, bursts, loads, aic=False):
        """The setups of a task's contiguous runs and of its copy-ins after the first,
        back to back: its MTE2 phase ends no sooner than this after its GM latency,
        whatever its bandwidth share.  Scalars for one task, or per-task arrays (the
        engine's column)."""
        copy_us = np.where(aic, self.aic_copy_us, self.aiv_copy_us)
        return bursts * self.burst_us + np.maximum(np.subtract(loads, 1.0), 0.0) * copy_us

    def rates(self, n_aiv: int, n_aic: int, over_v: float = 1.0,
              over_c: float = 1.0) -> tuple[float, float]:
        """Bytes per us each AIV and each AIC loader gets with ``n_aiv`` and ``n_aic`` of
        them active: equal shares of HBM, except that a core type whose cap is below the
        equal share keeps its cap and leaves the rest to the other type (water-filling).

        The rates count the bytes a loader asked for; ``over_v`` and ``over_c`` are the
        HBM bytes fetched per byte asked by each type's loaders (whole 512 B lines for a
        box that covers them in part, l2.py).  The core's cap holds the bytes it asked
        for, HBM carries every fetched byte: a type's HBM cap is its core cap times its
        overfetch, and its asked rate is its HBM share divided by it."""
        cap_v, cap_c = self.caps
        n = n_aiv + n_aic
        if n == 0:
            return cap_v, cap_c
        hcap_v, hcap_c = cap_v * over_v, cap_c * over_c
        share = self.hbm_rate / n
        if share <= hcap_v and share <= hcap_c:
            return share / over_v, share / over_c
        # one type is capped below the equal share: it takes its cap, the other the rest
        # (a capped type's rate is its cap exactly, not cap * over / over)
        if hcap_v <= hcap_c:
            rest = (self.hbm_rate - n_aiv * hcap_v) / n_aic if n_aic else hcap_c
            return cap_v, (cap_c if rest >= hcap_c else rest / over_c)
        rest = (self.hbm_rate - n_aic * hcap_c) / n_aiv if n_aiv else hcap_v
        return (cap_v if rest >= hcap_v else rest / over_v), cap_c

    def us(self, loads: float, bursts: float, hbm_bytes: float, l2_bytes: float,
           loaders: int, asked_bytes: float | None = None) -> float:
        """The whole MTE2 phase if ``loaders`` AIV loaders kept the same share throughout.
        ``asked_bytes``: of the ``hbm_bytes`` fetched, those the task asked for (all of
        them by default); the core's rate limits these, HBM's share all fetched bytes."""
        if loads == 0:
            return 0.0
        asked = hbm_bytes if asked_bytes is None or hbm_bytes == 0 else asked_bytes
        over = hbm_bytes / asked if asked else 1.0
        rate = self.rates(max(loaders, 1), 0, over_v=over)[0]
        fixed = self.fixed_us if hbm_bytes > 0 else self.l2_fixed_us
        stream = self.latency_us(hbm_bytes, l2_bytes, loaders) - fixed + \
            (asked / rate if asked else 0.0)
        return fixed + max(stream, self.setups_us(bursts, loads))

    def write_us(self, nbytes: float, loaders: int) -> float:
        return nbytes / (self.hbm_rate / max(loaders, 1)) if nbytes else 0.0
