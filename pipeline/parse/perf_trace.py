"""machine_trace_perf_data_<N>.json -> a phase table (one row per stamp; format:
pipeline/formats/perf_trace.py)."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ..formats.perf_trace import file_round, parse_name


def read_phases(paths: list[Path]) -> pl.DataFrame:
    rows = []
    for path in sorted(paths, key=file_round):
        for lane in json.loads(Path(path).read_text(encoding="utf-8")):
            freq = float(lane["freq"])
            for stamp in lane["tasks"]:
                base, rnd, idx = parse_name(stamp["name"]) or (stamp["name"], None, None)
                rows.append((lane["coreType"], int(lane["blockIdx"]), base,
                             rnd if rnd is not None else 0, idx,
                             int(stamp["end"]), int(stamp["end"]) / freq))
    schema = {"lane_type": pl.Utf8, "block": pl.Int64, "phase": pl.Utf8, "round": pl.Int64,
              "idx": pl.Int64, "end_cycles": pl.Int64, "end_us": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def e2e_us(phases: pl.DataFrame, round_no: int = 0) -> float | None:
    """Device end-to-end: first AICPU BEGIN to last AICPU EXIT in one round."""
    aicpu = phases.filter(pl.col("lane_type").str.starts_with("AICPU")
                          & (pl.col("round") == round_no))
    begin = aicpu.filter(pl.col("phase") == "BEGIN")["end_us"]
    exit_ = aicpu.filter(pl.col("phase") == "EXIT")["end_us"]
    if begin.len() == 0 or exit_.len() == 0:
        return None
    return round(exit_.max() - begin.min(), 4)
