"""The pipe busy shares of metrics.json: msprof's PipeUtilization names, per core type.

One list for the emitter that computes them (pipeline/emit/metrics.py), the nightly's
thresholds and the report's table; it imports nothing, so the workflow's plan reads it
without the simulator."""
from __future__ import annotations

# (metric, core type, the simulated pipe it stands for (Timeline.task_pipe_cycles), label)
PIPE_SHARES = (
    ("aic_mac_ratio", "aic", "cube", "AIC Cube"),
    ("aic_mte1_ratio", "aic", "mte1", "AIC MTE1"),
    ("aic_mte2_ratio", "aic", "mte2", "AIC MTE2"),
    ("aic_fixpipe_ratio", "aic", "fixp", "AIC FIXP"),
    ("aiv_vec_ratio", "aiv", "vector", "AIV Vector"),
    ("aiv_mte2_ratio", "aiv", "mte2", "AIV MTE2"),
    ("aiv_mte3_ratio", "aiv", "mte3", "AIV MTE3"),
    ("aiv_scalar_ratio", "aiv", "scalar", "AIV Scalar"),
)
PIPE_SHARE_NAMES = tuple(name for name, *_ in PIPE_SHARES)
