"""``metrics.json``: one flat object per simulated run (its key names are a contract)."""
from __future__ import annotations

from simcore.compiler import Program
from simcore.machine import Timeline
from simcore.spec.hardware import Hardware

from .swimlane import aicore_summary
from .tasks import TaskView


def metrics(program: Program, timeline: Timeline, hw: Hardware) -> dict:
    _, utilization, _ = aicore_summary(timeline)
    flops = float(program.work.flops.sum())
    hbm = float(timeline.task_hbm_bytes.sum())
    aic = TaskView.of(program).is_aic
    l2 = float(timeline.task_l2_bytes.sum())
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
        "l2_hit_rate": round(l2 / (l2 + hbm), 6) if l2 + hbm else 0.0,
        "flops": int(flops),
        "workspace_bytes": int(program.workspace_bytes),
    }
