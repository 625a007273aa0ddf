"""What a stage's files say, reduced to the summary a baseline records.

A baseline cannot keep a stage's swimlane (it would not be diffable), so it
keeps what explains a change: the metrics, every leaf function's task count
and run time, every dev task's size and span, and the work each pipe was given.
The nightly computes the same summary from the current run and compares the two.
Everything here reads files only (parsed tables, ``program.json``), so the same
comparison works on runs captured on a real device.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl

from simcore.spec.errors import ConfigError

from ..formats import program as program_format
from ..parse.swimlane import tasks_with_topology

NOT_METRICS = {"sources"}   # where each parsed metric came from, not a metric
# Past this many dev tasks a baseline keeps only their aggregate, to stay readable.
MAX_DEV_TASK_ROWS = 512
DIGITS = 4


def _r(x: float) -> float:
    return round(float(x), DIGITS)


def read_metrics(stage_dir: Path) -> dict:
    path = Path(stage_dir) / "parsed" / "metrics.json"
    if not path.exists():
        raise ConfigError(f"no parsed results at '{path}'. Build the nightly studies first: "
                          f"snakemake -c2 nightly_stages.")
    data = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in sorted(data.items()) if k not in NOT_METRICS}


def _tasks_with_leaf(parsed: Path) -> pl.DataFrame:
    """Leaf-task events joined with the topology, so each knows its leaf function."""
    return tasks_with_topology(pl.read_parquet(parsed / "tasks.parquet"),
                               pl.read_parquet(parsed / "topo.parquet"))


def leaf_functions(tasks: pl.DataFrame) -> dict:
    """Per leaf function: core type, content hash, task count and run times."""
    if tasks.height == 0:
        return {}
    rows = (tasks.group_by("leaf_index", "label", "core_type", "leaf_hash")
            .agg(tasks=pl.len(), total_us=pl.col("dur_us").sum(),
                 mean_us=pl.col("dur_us").mean(), max_us=pl.col("dur_us").max())
            .sort("leaf_index", "label").rows(named=True))
    return {f"{r['label'] or 'leaf'}#{r['leaf_index']}": {
        "core_type": r["core_type"], "hash": f"{r['leaf_hash'] or 0:016x}",
        "tasks": int(r["tasks"]), "total_us": _r(r["total_us"]),
        "mean_us": _r(r["mean_us"]), "max_us": _r(r["max_us"])} for r in rows}


def dev_tasks(tasks: pl.DataFrame) -> list[dict]:
    """Per dev task: leaf tasks, start (from the first leaf task of the run) and span."""
    if tasks.height == 0:
        return []
    t0 = tasks["start_us"].min()
    rows = (tasks.group_by("seq_no")
            .agg(leaf_tasks=pl.len(), start=pl.col("start_us").min(), end=pl.col("end_us").max())
            .sort("seq_no").rows(named=True))
    return [{"seq": int(r["seq_no"]), "leaf_tasks": int(r["leaf_tasks"]),
             "start_us": _r(r["start"] - t0), "span_us": _r(r["end"] - r["start"])}
            for r in rows]


def pipes(program_json: Path, tasks_per_leaf: dict[int, int]) -> dict:
    """Ops and bytes each pipe was given over the whole run (program.json x task counts).

    No PyPTO file carries per-pipe busy time for a run yet, so the work handed
    to each pipe is what can say whether a change came from the pipes.
    """
    if not program_json.exists():
        return {}
    program = json.loads(program_json.read_text(encoding="utf-8"))
    totals: dict[str, dict] = {}
    for func in program_format.leaf_functions(program):
        count = tasks_per_leaf.get(int(func["hash"]), 0)
        for op in func.get("operations", []):
            entry = totals.setdefault(op.get("pipe", "?"), {"ops": 0, "bytes": 0})
            entry["ops"] += count
            entry["bytes"] += count * int(op.get("bytes", 0))
    return dict(sorted(totals.items()))


def sha256(path: Path) -> str | None:
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stage_summary(stage_dir: Path) -> dict:
    """The baseline-shaped summary of one built stage (``results/<study>/<stage>``)."""
    stage_dir = Path(stage_dir)
    parsed = stage_dir / "parsed"
    summary: dict = {"metrics": read_metrics(stage_dir)}
    if (parsed / "tasks.parquet").exists() and (parsed / "topo.parquet").exists():
        tasks = _tasks_with_leaf(parsed)
        summary["leaf_functions"] = leaf_functions(tasks)
        rows = dev_tasks(tasks)
        summary["dev_task_spans"] = rows if len(rows) <= MAX_DEV_TASK_ROWS else []
        topo = pl.read_parquet(parsed / "topo.parquet")
        per_leaf = dict(topo.group_by("leaf_hash").len().rows())
        # a device capture has only run/program.json; the workflow's compile step has both
        program = next((p for p in (stage_dir / "compile" / "program.json",
                                    stage_dir / "run" / "program.json") if p.exists()),
                       stage_dir / "compile" / "program.json")
        summary["pipes"] = pipes(program, {int(k): int(v) for k, v in per_leaf.items()})
    summary["swimlane_sha256"] = sha256(stage_dir / "run" / "merged_swimlane.json")
    return summary
