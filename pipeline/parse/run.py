"""Parse one run folder into parquet tables and a metrics object."""
from __future__ import annotations

import json
from pathlib import Path

from ..emit.atomic import write_json
from .perf_trace import e2e_us, read_phases
from .swimlane import aicore_metrics, read_tasks, read_topo, topo_counts


def parse_run(run_dir: Path, out: Path) -> dict:
    run_dir, out = Path(run_dir), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    parsed: dict = {}
    metrics_file = run_dir / "metrics.json"
    if metrics_file.exists():
        parsed.update(json.loads(metrics_file.read_text(encoding="utf-8")))
    recomputed = []
    if (run_dir / "merged_swimlane.json").exists():
        tasks = read_tasks(run_dir / "merged_swimlane.json")
        tasks.write_parquet(out / "tasks.parquet")
        parsed.update(aicore_metrics(tasks))
        recomputed += ["kernel_us", "aicore_utilization"]
    if (run_dir / "dyn_topo.txt").exists():
        topo = read_topo(run_dir / "dyn_topo.txt")
        topo.write_parquet(out / "topo.parquet")
        parsed.update(topo_counts(topo))
        recomputed += ["dev_tasks", "root_calls", "leaf_tasks", "leaf_functions"]
    perf = list(run_dir.glob("machine_trace_perf_data_*.json"))
    if perf:
        phases = read_phases(perf)
        phases.write_parquet(out / "phases.parquet")
        value = e2e_us(phases)
        if value is not None:
            parsed["e2e_us"] = value
            recomputed.append("e2e_us")
    parsed["recomputed_from_files"] = recomputed
    write_json(out / "metrics.json", parsed)
    return parsed
