"""merged_swimlane.json and dyn_topo.txt -> task and topology tables."""
from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

_LANE = re.compile(r"^(AIC|AIV)_(\d+)$")


def read_tasks(path: Path) -> pl.DataFrame:
    """Leaf-task events of the Machine View: one row per task, times in us."""
    trace = json.loads(Path(path).read_text(encoding="utf-8"))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    lanes: dict[int, tuple[str, int]] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == 1:
            m = _LANE.match(str(e.get("args", {}).get("name", "")))
            if m:
                lanes[e["tid"]] = (m.group(1), int(m.group(2)))
    rows = [(e["tid"], e["name"], float(e["ts"]), float(e["dur"]),
             e.get("args", {}).get("seqNo"), e.get("args", {}).get("taskId"),
             e.get("args", {}).get("color", ""))
            for e in events
            if e.get("ph") == "X" and e.get("pid") == 1 and e.get("tid") in lanes]
    schema = {"tid": pl.Int64, "name": pl.Utf8, "start_us": pl.Float64, "dur_us": pl.Float64,
              "seq_no": pl.Int64, "task_id": pl.Int64, "label": pl.Utf8}
    df = pl.DataFrame(rows, schema=schema, orient="row")
    lane_df = pl.DataFrame({"tid": list(lanes), "core_type": [v[0] for v in lanes.values()],
                            "core": [v[1] for v in lanes.values()]},
                           schema={"tid": pl.Int64, "core_type": pl.Utf8, "core": pl.Int64})
    return (df.join(lane_df, on="tid", how="left")
              .with_columns(end_us=pl.col("start_us") + pl.col("dur_us"))
              .sort(["core", "start_us"]))


def read_topo(path: Path) -> pl.DataFrame:
    """dyn_topo.txt: the fixed columns plus the successor count per task."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line or line[0].isalpha():
            continue
        cells = [int(c) for c in line.split(",") if c.strip()]
        rows.append(cells[:11] + [len(cells) - 11])
    cols = ["seq_no", "task_id", "root_index", "root_hash", "opmagic", "leaf_index", "leaf_hash",
            "core_type", "psg_id", "wrap_id", "static_succ_count", "successors"]
    schema = {c: (pl.UInt64 if c.endswith("hash") else pl.Int64) for c in cols}
    return pl.DataFrame(rows, schema=schema, orient="row")


def aicore_metrics(tasks: pl.DataFrame) -> dict:
    """AICore end-to-end time and utilization exactly as PyPTO's summary computes them."""
    if tasks.height == 0:
        return {"kernel_us": 0.0, "aicore_utilization": 0.0}
    span = tasks["end_us"].max() - tasks["start_us"].min()
    lanes = tasks["core"].n_unique()
    busy = tasks["dur_us"].sum()
    return {"kernel_us": round(span, 4),
            "aicore_utilization": round(busy / (lanes * span), 6) if span > 0 else 0.0}


def topo_counts(topo: pl.DataFrame) -> dict:
    calls = topo.select(pl.struct("seq_no", (pl.col("task_id") // 65536).alias("func"))
                        .n_unique()).item() if topo.height else 0
    return {"dev_tasks": topo["seq_no"].n_unique(), "root_calls": calls,
            "leaf_tasks": topo.height, "leaf_functions": topo["leaf_hash"].n_unique(),
            "aic_tasks": topo.filter(pl.col("core_type") == 1).height,
            "aiv_tasks": topo.filter(pl.col("core_type") == 0).height}
