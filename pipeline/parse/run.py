"""Parse one run folder into parquet tables and a metrics object."""
from __future__ import annotations

import json
from pathlib import Path

from ..emit.atomic import write_json
from .analyze import analyze, load_lanes, rounds_json
from .perf_trace import e2e_us, read_phases
from .pmu import pmu_table, read_pipe_timeline, read_pmu
from .swimlane import aicore_metrics, read_ops, read_tasks, read_topo, topo_counts


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
    if (run_dir / "program.json").exists():
        read_ops(run_dir / "program.json").write_parquet(out / "ops.parquet")
    recomputed += _parse_perf(run_dir, out, parsed)
    _parse_pmu(run_dir, out, parsed.get("hardware"))
    parsed["recomputed_from_files"] = recomputed
    write_json(out / "metrics.json", parsed)
    return parsed


def _parse_perf(run_dir: Path, out: Path, parsed: dict) -> list[str]:
    """DUMP_DEVICE_PERF files: the phase table, e2e_us and analyze's per-round table."""
    perf = list(run_dir.glob("machine_trace_perf_data_*.json"))
    if not perf:
        return []
    phases = read_phases(perf)
    phases.write_parquet(out / "phases.parquet")
    write_json(out / "analyze.json", analyze_files(perf))
    value = e2e_us(phases)
    if value is None:
        return []
    parsed["e2e_us"] = value
    return ["e2e_us"]


def _parse_pmu(run_dir: Path, out: Path, hardware: str | None) -> None:
    """PMU records: one row per leaf task (core, type, total and pipe busy cycles);
    PMU Trace: one row per stretch of pipe work on a captured core."""
    pmu_dir = _pmu_data_dir(run_dir)
    if pmu_dir is not None:
        group, arch = _pmu_setting(pmu_dir.parents[1], hardware)
        pmu_table(read_pmu(pmu_dir), group, arch).write_parquet(out / "pmu.parquet")
    traces = sorted(run_dir.glob("PROF_*/mindstudio_profiler_output/msprof_*.json"))
    if traces:
        read_pipe_timeline(traces[0]).write_parquet(out / "pipe_timeline.parquet")


def _file_round(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[-1])


def analyze_files(paths: list[Path]) -> dict:
    """The analyze table of every round of a run, files in round order."""
    rounds = []
    for path in sorted(paths, key=_file_round):
        rounds += analyze(load_lanes(path))
    return rounds_json(rounds)


def _pmu_data_dir(run_dir: Path) -> Path | None:
    """The first PROF_*/device_*/data folder holding aicpu.data records."""
    for data in sorted(run_dir.glob("PROF_*/device_*/data")):
        if any("aicpu.data" in p.name for p in data.iterdir()):
            return data
    return None


def _pmu_setting(prof_dir: Path, hardware: str | None) -> tuple[int, str]:
    """Group and chip of the records: ptolab notes them; a device run falls back to the
    defaults (group 2, the run's hardware or dav_2201)."""
    note = prof_dir / "ptolab_pmu.json"
    if note.exists():
        data = json.loads(note.read_text(encoding="utf-8"))
        return int(data["group"]), str(data["arch"])
    return 2, hardware if hardware in ("dav_2201", "dav_3510") else "dav_2201"
