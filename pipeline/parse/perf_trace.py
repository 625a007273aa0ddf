"""machine_trace_perf_data_<N>.json -> a phase table (one row per stamp)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

# upstream analyze's name grammar: BASE[_round][(idx)]
_NAME = re.compile(r"^([A-Z0-9_]+?)(?:_(\d+))?(?:\((\d+)\))?$")


def read_phases(paths: list[Path]) -> pl.DataFrame:
    rows = []
    for path in sorted(paths, key=lambda p: int(re.findall(r"_(\d+)\.json$", p.name)[0])):
        for lane in json.loads(Path(path).read_text(encoding="utf-8")):
            freq = float(lane["freq"])
            for stamp in lane["tasks"]:
                m = _NAME.match(stamp["name"])
                base, rnd, idx = (m.group(1), m.group(2), m.group(3)) if m else \
                    (stamp["name"], None, None)
                rows.append((lane["coreType"], int(lane["blockIdx"]), base,
                             int(rnd) if rnd is not None else 0,
                             int(idx) if idx is not None else None,
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
