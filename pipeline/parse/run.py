"""Parse one run folder into parquet tables and the parsed metrics.

The parsed ``metrics.json`` is computed from the profiling files alone, so it is
the same for a simulated run and for one captured on a device.  To those
metrics it adds only the keys that no PyPTO file carries (FLOPs, bytes,
workspace, kernel and hardware names), copied from the simulator's
``metrics.json`` when the folder has one.  ``sources`` says, for every key,
which file it came from.  The simulator's record is read, never rewritten.

Every file is read and checked before anything is written, and ``metrics.json``
is written last: a bad or inconsistent folder stops with one ConfigError naming
the file, and leaves no tables behind.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import polars as pl

from simcore.spec.errors import ConfigError

from ..emit.atomic import write_json
from .analyze import analyze, load_lanes, rounds_json
from .perf_trace import e2e_us, read_phases
from .pmu import ARCHES, GROUPS, pmu_table, read_pipe_timeline, read_pmu
from .swimlane import aicore_metrics, read_ops, read_tasks, read_topo, topo_counts

RECORD = "metrics.json"
RECORD_SOURCE = "metrics.json (simulator record)"
SWIMLANE, TOPO, PROGRAM = "merged_swimlane.json", "dyn_topo.txt", "program.json"
PERF_GLOB = "machine_trace_perf_data_*.json"
PMU_SIDECAR = "ptolab_pmu.json"      # written by ptolab's emitter beside the PMU records
# Keys the profiling files give; the simulator's record never supplies these.
FILE_KEYS = ("kernel_us", "aicore_utilization", "e2e_us", "dev_tasks", "root_calls",
             "leaf_tasks", "leaf_functions", "aic_tasks", "aiv_tasks")
# Counts the topology gives that a record of the same run must agree with.
COUNT_KEYS = ("dev_tasks", "root_calls", "leaf_tasks", "leaf_functions", "aic_tasks",
              "aiv_tasks")


@dataclass
class Parsed:
    metrics: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)      # file name -> polars frame
    json_files: dict = field(default_factory=dict)  # file name -> JSON data

    def add(self, values: dict, source: str) -> None:
        self.metrics.update(values)
        self.sources.update({key: source for key in values})


def _read(path: Path, what: str, reader: Callable):
    """Run a format reader; anything it trips over becomes one line naming the file."""
    try:
        return reader(path)
    except ConfigError:
        raise
    except (MemoryError, KeyboardInterrupt):
        raise
    except OSError as exc:
        raise ConfigError(f"cannot read it ({exc.strerror or exc}).", source=str(path)) from None
    except Exception as exc:   # noqa: BLE001 - any format error of a foreign file
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"is not a readable {what} ({type(exc).__name__}: {detail[:160]}). "
                          f"A truncated file usually means the run was interrupted; rerun it.",
                          source=str(path)) from None


def parse_run(run_dir: Path, out: Path) -> dict:
    """Read and check every file of ``run_dir``, then write the tables and metrics to ``out``."""
    parsed = read_run(Path(run_dir))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, table in parsed.tables.items():
        table.write_parquet(out / name)
    for name, data in parsed.json_files.items():
        write_json(out / name, data)
    result = {**parsed.metrics, "sources": parsed.sources}
    write_json(out / "metrics.json", result)   # last: its presence marks a complete parse
    return result


def read_run(run_dir: Path) -> Parsed:
    _check_folder(run_dir)
    parsed = Parsed()
    record = _read_record(run_dir)
    tasks = topo = None
    if (run_dir / SWIMLANE).exists():
        tasks = _read(run_dir / SWIMLANE, "swimlane (Chrome trace JSON with AIC_/AIV_ lanes)",
                      read_tasks)
        parsed.tables["tasks.parquet"] = tasks
        parsed.add(aicore_metrics(tasks), SWIMLANE)
    if (run_dir / TOPO).exists():
        topo = _read(run_dir / TOPO, "dyn_topo.txt (comma-separated integer rows)", read_topo)
        if topo.height == 0:
            raise ConfigError("has no task rows (only a header, or nothing): the run wrote "
                              "no topology, or the file was cut short.",
                              source=str(run_dir / TOPO))
        parsed.tables["topo.parquet"] = topo
        parsed.add(topo_counts(topo), TOPO)
    if tasks is not None and topo is not None:
        _check_tasks_in_topo(run_dir, tasks, topo)
    if (run_dir / PROGRAM).exists():
        parsed.tables["ops.parquet"] = _read(run_dir / PROGRAM, "program.json", read_ops)
    _read_perf(run_dir, parsed)
    _read_pmu(run_dir, parsed, record.get("hardware"))
    if not parsed.tables:
        raise ConfigError(
            f"holds no profiling file that parse reads ({SWIMLANE}, {TOPO}, "
            f"{PERF_GLOB.replace('*', '<N>')}, PROF_*/device_*/data/*aicpu.data*). Simulate "
            f"with --set debug_options.runtime_debug_mode=1 and DUMP_DEVICE_PERF=true, or "
            f"pass a folder captured on a device.", source=str(run_dir))
    _check_record(run_dir, record, parsed.metrics)
    parsed.add({k: v for k, v in record.items() if k not in FILE_KEYS}, RECORD_SOURCE)
    return parsed


def _check_folder(run_dir: Path) -> None:
    if not run_dir.exists():
        raise ConfigError("does not exist. Pass a run folder (what ptolab simulate --out "
                          "wrote, or a device's output folder).", source=str(run_dir))
    if not run_dir.is_dir():
        raise ConfigError("is a file, not a run folder. Pass the folder that holds "
                          f"{SWIMLANE}, {TOPO} and the other profiling files.",
                          source=str(run_dir))
    if not any(run_dir.iterdir()):
        raise ConfigError("is empty; there is nothing to parse.", source=str(run_dir))


def _read_record(run_dir: Path) -> dict:
    path = run_dir / RECORD
    if not path.exists():
        return {}
    data = _read(path, "metrics.json (a JSON object)",
                 lambda p: json.loads(p.read_text(encoding="utf-8")))
    if not isinstance(data, dict):
        raise ConfigError(f"must hold a JSON object of metrics, not a {type(data).__name__}.",
                          source=str(path))
    return data


def _check_tasks_in_topo(run_dir: Path, tasks, topo) -> None:
    keys = topo.select("seq_no", "task_id")
    orphans = tasks.select("seq_no", "task_id").join(keys, on=["seq_no", "task_id"], how="anti")
    if orphans.height:
        first = orphans.row(0)
        raise ConfigError(
            f"has {orphans.height} leaf task(s) that {TOPO} does not list (first: seqNo "
            f"{first[0]}, taskId {first[1]}); the two files come from different runs. "
            f"Rerun into a fresh folder.", source=str(run_dir / SWIMLANE))


def _check_record(run_dir: Path, record: dict, from_files: dict) -> None:
    """A simulator record of another run (a rerun mixed into the folder) is an error."""
    wrong = [f"{k} {record[k]} vs {from_files[k]}" for k in COUNT_KEYS
             if k in record and k in from_files and record[k] != from_files[k]]
    if wrong:
        raise ConfigError(
            f"does not match the profiling files beside it ({'; '.join(wrong)}: record vs "
            f"{TOPO}); the folder mixes two runs. Rerun into a fresh folder.",
            source=str(run_dir / RECORD))


def _file_round(path: Path) -> int:
    tail = path.stem.rsplit("_", 1)[-1]
    if not tail.isdigit():
        raise ConfigError("does not end in _<N>.json with N the first round it holds.",
                          source=str(path))
    return int(tail)


def _read_perf(run_dir: Path, parsed: Parsed) -> None:
    """DUMP_DEVICE_PERF files: the phase table, e2e_us and analyze's per-round table."""
    perf = sorted(run_dir.glob(PERF_GLOB), key=_file_round)
    if not perf:
        return
    what = "machine_trace_perf_data file (a JSON list of lanes with freq and tasks)"
    # one file at a time, so an error names the file
    phases = pl.concat([_read(path, what, lambda p: read_phases([p])) for path in perf])
    parsed.tables["phases.parquet"] = phases
    rounds = []
    for path in perf:
        rounds += _read(path, what, lambda p: analyze(load_lanes(p)))
    parsed.json_files["analyze.json"] = rounds_json(rounds)
    value = e2e_us(phases)
    if value is not None:
        parsed.add({"e2e_us": value}, perf[0].name)


def _read_pmu(run_dir: Path, parsed: Parsed, hardware: str | None) -> None:
    """PMU records: one row per leaf task (core, type, total and pipe busy cycles);
    PMU Trace: one row per stretch of pipe work on a captured core."""
    pmu_dir = _pmu_data_dir(run_dir)
    if pmu_dir is not None:
        group, arch = pmu_setting(pmu_dir, hardware)
        rows = _read(pmu_dir, "msprof PMU data folder", read_pmu)
        parsed.tables["pmu.parquet"] = _read(pmu_dir, "msprof PMU data folder",
                                             lambda _: pmu_table(rows, group, arch))
    traces = sorted(run_dir.glob("PROF_*/mindstudio_profiler_output/msprof_*.json"))
    if traces:
        parsed.tables["pipe_timeline.parquet"] = _read(
            traces[0], "PMU Trace (Chrome trace JSON)", read_pipe_timeline)


def _pmu_data_dir(run_dir: Path) -> Path | None:
    """The first PROF_*/device_*/data folder holding aicpu.data records."""
    for data in sorted(run_dir.glob("PROF_*/device_*/data")):
        if data.is_dir() and any("aicpu.data" in p.name for p in data.iterdir()):
            return data
    return None


def read_pmu_sidecar(data_dir: Path) -> tuple[int, str] | None:
    """Group and chip ptolab noted beside its PMU records (PROF_*/ptolab_pmu.json), if any."""
    note = Path(data_dir).parents[1] / PMU_SIDECAR if len(Path(data_dir).parents) > 1 else None
    if note is None or not note.is_file():
        return None
    data = _read(note, f"{PMU_SIDECAR} (a JSON object with 'group' and 'arch')",
                 lambda p: json.loads(p.read_text(encoding="utf-8")))
    group = data.get("group") if isinstance(data, dict) else None
    arch = data.get("arch") if isinstance(data, dict) else None
    if type(group) is not int or group not in GROUPS or arch not in ARCHES:
        raise ConfigError(f"records group {group!r} and arch {arch!r}; expected a group of "
                          f"{', '.join(map(str, GROUPS))} and an arch of {', '.join(ARCHES)}. "
                          f"The file is damaged; rerun the simulation.", source=str(note))
    return group, arch


def pmu_setting(data_dir: Path, hardware: str | None) -> tuple[int, str]:
    """Group and chip of the records: ptolab notes them; a device run falls back to the
    defaults (group 2, the run's hardware or dav_2201)."""
    noted = read_pmu_sidecar(data_dir)
    if noted is not None:
        return noted
    return 2, hardware if hardware in ARCHES else "dav_2201"
