"""``metrics.json``: one flat object per simulated run (its key names are a contract)."""
from __future__ import annotations

import numpy as np

from simcore.compiler import Program
from simcore.machine import Timeline
from simcore.spec.hardware import Hardware

from ..pipe_shares import PIPE_SHARES
from .swimlane import aicore_summary
from .tasks import TaskView


def pipe_shares(timeline: Timeline, aic: np.ndarray) -> dict:
    """Per core type, the share of its cores' time each pipe is busy: the pipe's cycles over
    that type's tasks (``aic`` marks the AIC ones), over the type's cores times the kernel
    time, as msprof's PipeUtilization gives a pipe's cycles over a core's (averaged over the
    cores)."""
    cycles = timeline.kernel_us * timeline.clock_mhz
    masks = {"aic": (aic, timeline.aic_cores), "aiv": (~aic, timeline.aiv_cores)}
    shares = {}
    for name, kind, pipe, _ in PIPE_SHARES:
        mask, cores = masks[kind]
        busy = timeline.task_pipe_cycles.get(pipe)
        total = float(busy[mask].sum()) if busy is not None and busy.size else 0.0
        shares[name] = round(total / (cores * cycles), 6) if cores and cycles else 0.0
    return shares


def l2_hit_rate(timeline: Timeline) -> float:
    """The share of the bytes the tasks read that came from L2 rather than HBM."""
    l2, hbm = float(timeline.task_l2_bytes.sum()), float(timeline.task_hbm_bytes.sum())
    return round(l2 / (l2 + hbm), 6) if l2 + hbm else 0.0


def mechanism_figures(program: Program, timeline: Timeline) -> dict:
    """The figures of metrics.json a chip's profile also gives besides times: the pipe busy
    shares and the L2 hit rate (what ``ptolab validate`` compares with documented ones)."""
    return {**pipe_shares(timeline, TaskView.of(program).is_aic),
            "l2_hit_rate": l2_hit_rate(timeline)}


def metrics(program: Program, timeline: Timeline, hw: Hardware) -> dict:
    _, utilization, _ = aicore_summary(timeline)
    flops = float(program.work.flops.sum())
    hbm = float(timeline.task_hbm_bytes.sum())
    aic = TaskView.of(program).is_aic
    return {
        "kernel": program.kernel,
        "hardware": hw.name,
        "kernel_us": round(timeline.kernel_us, 4),
        "e2e_us": round(timeline.e2e_us, 4),
        "aicore_utilization": round(utilization, 6),
        **program.counts(),
        "aic_tasks": int(aic.sum()),
        "aiv_tasks": int((~aic).sum()),
        "hbm_read_bytes": int(hbm),                      # L2 misses
        "hbm_write_bytes": int(program.task_write_bytes.sum()),   # written back eventually
        "l2_hit_rate": l2_hit_rate(timeline),
        "flops": int(flops),
        "workspace_bytes": int(program.workspace_bytes),
        **pipe_shares(timeline, aic),
    }
