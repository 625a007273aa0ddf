"""A stage's swimlane as columnar data for the canvas viewer (reports/static/swimlane.js).

One lane per AIC/AIV core that ran a task, then the AICPU lanes of the phase table.
Times are microseconds relative to the earliest bar, so float64 keeps sub-ns detail.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .embed import typed

# the viewer's colours (reports/static/swimlane.js PALETTE), for the HTML legend
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b",
           "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#1f77b4", "#8c564b",
           "#17becf", "#bcbd22", "#7f7f7f", "#d62728"]


def legend(data: dict) -> list[tuple[str, str]]:
    return [(PALETTE[i % len(PALETTE)], label) for i, label in enumerate(data["labels"])]

def _lane_key(core_type: str, core: int) -> tuple:
    return (0 if core_type == "AIC" else 1, core)


def _index(values: list[str]) -> tuple[list[str], dict[str, int]]:
    table = sorted(set(values))
    return table, {v: i for i, v in enumerate(table)}


def _core_bars(tasks: pl.DataFrame) -> tuple[list[str], pl.DataFrame]:
    lanes = sorted({(t, c) for t, c in tasks.select("core_type", "core").iter_rows()},
                   key=lambda k: _lane_key(*k))
    custom = {} if "lane_name" not in tasks.columns else {
        (t, c): n for t, c, n in tasks.select("core_type", "core", "lane_name").unique().iter_rows()}
    names = [custom.get((t, c), f"{t}_{c}") for t, c in lanes]
    lane_of = pl.DataFrame({"core_type": [t for t, _ in lanes], "core": [c for _, c in lanes],
                            "lane": list(range(len(lanes)))},
                           schema={"core_type": pl.Utf8, "core": pl.Int64, "lane": pl.Int64})
    bars = tasks.join(lane_of, on=["core_type", "core"], how="left")
    return names, bars


def aicpu_bars(phases: pl.DataFrame, window: tuple[float, float] | None) -> pl.DataFrame:
    """Each AICPU stamp ends a phase that began at the lane's previous stamp.

    Only rounds overlapping the leaf tasks' window are kept: other rounds would stretch
    the time axis far beyond the swimlane (the trace holds the last round's tasks).
    """
    aicpu = phases.filter(pl.col("lane_type").str.starts_with("AICPU"))
    if window is not None and aicpu.height:
        spans = aicpu.group_by("round").agg(pl.col("end_us").min().alias("lo"),
                                            pl.col("end_us").max().alias("hi"))
        keep = spans.filter((pl.col("lo") <= window[1]) & (pl.col("hi") >= window[0]))["round"]
        if keep.len():
            aicpu = aicpu.filter(pl.col("round").is_in(keep.to_list()))
    # equal stamps on a lane keep file order: a phase's start is its predecessor's end
    aicpu = aicpu.sort(["lane_type", "block", "end_us"], maintain_order=True)
    prev = pl.col("end_us").shift(1).over(["lane_type", "block"])
    # upstream's stamp names: PHASE_round or PHASE_round(idx)
    base = pl.format("{}_{}", pl.col("phase"), pl.col("round"))
    name = pl.when(pl.col("idx").is_null()).then(base) \
             .otherwise(pl.format("{}({})", base, pl.col("idx")))
    return aicpu.with_columns(
        start_us=pl.coalesce(prev, pl.col("end_us") - 0.01),
        name=name,
        lane_name=pl.format("{}-{}", pl.col("lane_type"), pl.col("block")),
    ).with_columns(dur_us=pl.col("end_us") - pl.col("start_us"))


def _edges(tasks: pl.DataFrame, topo: pl.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    if topo is None or "succ" not in topo.columns or tasks.height == 0:
        return np.zeros(0, np.uint32), np.zeros(0, np.uint32)
    key = tasks.select("seq_no", "task_id", pl.int_range(pl.len()).alias("i"))
    pairs = (topo.select("seq_no", "task_id", "succ").explode("succ").drop_nulls("succ")
             .join(key, on=["seq_no", "task_id"], how="inner")
             .join(key.rename({"task_id": "succ", "i": "j"}), on=["seq_no", "succ"],
                   how="inner")
             .sort(["i", "j"]))
    return pairs["i"].to_numpy().astype(np.uint32), pairs["j"].to_numpy().astype(np.uint32)


def payload(tasks: pl.DataFrame, topo: pl.DataFrame | None = None,
            phases: pl.DataFrame | None = None, codes: list[str] | None = None) -> dict:
    """Columns for the viewer: lanes, bar arrays, string tables and dependency edges.

    ``codes``: the source texts ("softmax.py:16, 17") a ``code`` column of ``tasks``
    indexes (sources.with_codes); each bar then names the Python lines of its ops."""
    if "hash_order" not in tasks.columns:
        tasks = tasks.with_columns(hash_order=pl.lit(""))
    if "code" not in tasks.columns:
        tasks = tasks.with_columns(code=pl.lit(0, pl.Int64))
    names, bars = _core_bars(tasks)
    bars = bars.sort(["lane", "start_us", "name"])
    window = (bars["start_us"].min(), bars["end_us"].max()) if bars.height else None
    cpu = aicpu_bars(phases, window) if phases is not None and phases.height else None
    cpu_lanes = sorted(set(cpu["lane_name"])) if cpu is not None else []
    if cpu is not None:
        lane_no = {n: len(names) + i for i, n in enumerate(cpu_lanes)}
        cpu = cpu.with_columns(lane=pl.col("lane_name").replace_strict(lane_no),
                               label=pl.lit("AICPU ") + pl.col("phase"),
                               hash_order=pl.lit(""), seq_no=pl.lit(None, pl.Int64),
                               task_id=pl.lit(None, pl.Int64), code=pl.lit(0, pl.Int64))
    cols = ["lane", "start_us", "dur_us", "name", "label", "hash_order", "seq_no", "task_id",
            "code"]
    allbars = bars.select(cols)
    if cpu is not None:
        allbars = pl.concat([allbars, cpu.select(cols).cast(allbars.schema)])
    # core bars keep their positions (they come first, in the same order): edges index them
    allbars = allbars.sort(["lane", "start_us", "name"], maintain_order=True)
    out = _pack(allbars, bars, names + cpu_lanes, len(names), topo)
    if codes is not None and len(codes) > 1:
        out.update(codes=list(codes),
                   codeIdx=typed(allbars["code"].cast(pl.Int64).to_list(), "uint16"))
    return out


def _pack(allbars: pl.DataFrame, core_bars: pl.DataFrame, lanes: list[str], n_core: int,
          topo: pl.DataFrame | None) -> dict:
    t0 = float(allbars["start_us"].min()) if allbars.height else 0.0
    labels, label_i = _index(allbars["label"].to_list())
    orders, order_i = _index(allbars["hash_order"].to_list())
    src, dst = _edges(core_bars, topo)
    return {
        "lanes": lanes, "coreLanes": n_core, "t0": round(t0, 6), "n": allbars.height,
        "labels": labels, "hashOrders": orders,
        "names": "\n".join(allbars["name"].to_list()),
        "lane": typed(allbars["lane"].to_list(), "uint16"),
        "start": typed((allbars["start_us"] - t0).to_list(), "float64"),
        "dur": typed(allbars["dur_us"].to_list(), "float32"),
        "labelIdx": typed([label_i[v] for v in allbars["label"].to_list()], "uint16"),
        "orderIdx": typed([order_i[v] for v in allbars["hash_order"].to_list()], "uint16"),
        "seq": typed(allbars["seq_no"].fill_null(-1).to_list(), "int32"),
        "src": typed(src, "uint32"), "dst": typed(dst, "uint32"),
    }
