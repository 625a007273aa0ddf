"""merged_swimlane.json, dyn_topo.txt and program.json -> task, topology and op tables
(formats: pipeline/formats/swimlane.py, topo.py, program.py)."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ..formats import program as pj
from ..formats import topo as topo_fmt
from ..formats.cores import CoreType, parse_lane_name
from ..formats.swimlane import MACHINE_PID
from ..formats.task_id import OP_BITS, TASK_KEY_COLUMNS


def read_tasks(path: Path) -> pl.DataFrame:
    """Leaf-task events of the Machine View: one row per task, times in us."""
    trace = json.loads(Path(path).read_text(encoding="utf-8"))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    lanes: dict[int, tuple[str, int]] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == MACHINE_PID:
            lane = parse_lane_name(str(e.get("args", {}).get("name", "")))
            if lane:
                lanes[e["tid"]] = lane
    rows = [(e["tid"], e["name"], float(e["ts"]), float(e["dur"]),
             e.get("args", {}).get("seqNo"), e.get("args", {}).get("taskId"),
             e.get("args", {}).get("color", ""), e.get("args", {}).get("hashOrder-hint", ""))
            for e in events
            if e.get("ph") == "X" and e.get("pid") == MACHINE_PID and e.get("tid") in lanes]
    schema = {"tid": pl.Int64, "name": pl.Utf8, "start_us": pl.Float64, "dur_us": pl.Float64,
              "seq_no": pl.Int64, "task_id": pl.Int64, "label": pl.Utf8, "hash_order": pl.Utf8}
    df = pl.DataFrame(rows, schema=schema, orient="row")
    lane_df = pl.DataFrame({"tid": list(lanes), "core_type": [v[0] for v in lanes.values()],
                            "core": [v[1] for v in lanes.values()]},
                           schema={"tid": pl.Int64, "core_type": pl.Utf8, "core": pl.Int64})
    return (df.join(lane_df, on="tid", how="left")
              .with_columns(end_us=pl.col("start_us") + pl.col("dur_us"))
              .sort(["core", "start_us"]))


def read_topo(path: Path) -> pl.DataFrame:
    """dyn_topo.txt: the fixed columns, the successor count and the successor task ids.

    ``succ`` keeps the ids as the file has them (taskIds within the same seqNo), so the
    report can draw dependency arrows and the advisor can count fan-in/fan-out.
    """
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parsed = topo_fmt.parse_line(line)
        if parsed is not None:
            fixed, succ = parsed
            rows.append(fixed + [len(succ), succ])
    cols = [*topo_fmt.COLUMNS, "successors"]
    schema = {c: (pl.UInt64 if c.endswith("hash") else pl.Int64) for c in cols}
    schema["succ"] = pl.List(pl.Int64)
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
    func = (pl.col("task_id") // (1 << OP_BITS)).alias("func")    # the root call in its dev task
    calls = topo.select(pl.struct("seq_no", func).n_unique()).item() if topo.height else 0
    return {"dev_tasks": topo["seq_no"].n_unique(), "root_calls": calls,
            "leaf_tasks": topo.height, "leaf_functions": topo["leaf_hash"].n_unique(),
            "aic_tasks": topo.filter(pl.col("core_type") == int(CoreType.AIC)).height,
            "aiv_tasks": topo.filter(pl.col("core_type") == int(CoreType.AIV)).height}


def tasks_with_topology(tasks: pl.DataFrame, topo: pl.DataFrame,
                        columns: tuple[str, ...] = ("leaf_index", "leaf_hash")) -> pl.DataFrame:
    """Leaf-task events with ``columns`` of their dyn_topo row (null where a task has no
    row): a task is the same task in both files by its (seqNo, taskId)."""
    keys = list(TASK_KEY_COLUMNS)
    return tasks.join(topo.select(*keys, *columns), on=keys, how="left")


def _ints(values) -> list[int] | None:
    """A numeric shape/offset list, or None when upstream wrote symbolic expressions."""
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        return None
    return [int(v) for v in values]


def _op_row(func: dict, op: dict, tensors: dict, raws: dict) -> tuple:
    attr = op.get("op_attr") or {}
    first = next(iter(op.get("ioperands") or []), None)
    tensor = tensors.get(first if isinstance(first, int) else None, {})
    raw = tensor.get("rawtensor")
    axis = attr.get("axis", attr.get("reduce_axis"))
    return (int(func.get("hash", 0)), str(func.get("func_magicname", "")),
            int(op.get("opmagic", -1)), str(op.get("opcode", "")),
            pj.op_label(op),
            int(axis) if isinstance(axis, int) else None,
            _ints(tensor.get("shape")), _ints(tensor.get("offset")),
            int(raw) if isinstance(raw, int) else None,
            _ints(raws.get(raw, {}).get("rawshape")),
            str(attr.get("l1_reuse_hashOrder", "")), pj.op_location(op))


def read_ops(path: Path) -> pl.DataFrame:
    """program.json tile operations (CALL ops left out) with their first input's tile and
    raw tensor.

    The advisor needs it to see reductions whose tile does not span the reduce axis and
    GM blocks that several copy-ins load; fields a producer leaves out stay null.
    """
    rows = []
    operands: dict[int, tuple[dict, dict]] = {}
    for func, op in pj.tile_ops(json.loads(Path(path).read_text(encoding="utf-8"))):
        if id(func) not in operands:
            operands[id(func)] = ({t.get("magic"): t for t in func.get("tensors", [])},
                                  {r.get("rawmagic"): r for r in func.get("rawtensors", [])})
        rows.append(_op_row(func, op, *operands[id(func)]))
    schema = {"func_hash": pl.UInt64, "func_name": pl.Utf8, "opmagic": pl.Int64,
              "opcode": pl.Utf8, "label": pl.Utf8, "axis": pl.Int64,
              "in_shape": pl.List(pl.Int64), "in_offset": pl.List(pl.Int64),
              "raw": pl.Int64, "raw_shape": pl.List(pl.Int64), "l1_hash_order": pl.Utf8,
              "src": pl.Utf8}
    return pl.DataFrame(rows, schema=schema, orient="row")
