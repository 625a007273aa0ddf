"""A synthetic study whose one stage has N leaf tasks (default 100,000), for the report.

Writes parsed/ tables shaped like parse's output (tasks, topo with successors, phases,
metrics) and renders the report, so the swimlane viewer can be timed at scale:

    python benchmarks/big_report.py /tmp/big 100000    # -> /tmp/big/results/big/report.html
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

AIC, AIV = 24, 48          # dav_2201's cores
LABELS = ["q_proj", "k_proj", "softmax", "<script>alert(1)</script>", "mm2", "rmsnorm"]


def _tasks(n: int, rng: np.random.Generator) -> pl.DataFrame:
    cores = np.arange(n) % (AIC + AIV)
    per_core = np.bincount(cores, minlength=AIC + AIV)
    dur = rng.uniform(0.5, 6.0, n).round(3)
    start = np.zeros(n)
    for c in range(AIC + AIV):              # back to back with small gaps on every core
        idx = np.flatnonzero(cores == c)
        gaps = rng.uniform(0.05, 1.0, per_core[c])
        start[idx] = 1000.0 + np.cumsum(dur[idx] + gaps) - dur[idx]
    seq = (np.arange(n) // 2048).astype(np.int64)
    task_id = (np.arange(n) % 2048).astype(np.int64)
    label = [LABELS[(i // (AIC + AIV)) % len(LABELS)] for i in range(n)]   # cycles per core
    return pl.DataFrame({
        "tid": 1000 + 2 * (cores + 1), "name": [f"{s}-0-{t}-0-{t % 7}({lb})" for s, t, lb in
                                                zip(seq, task_id, label)],
        "start_us": start.round(3), "dur_us": dur, "seq_no": seq, "task_id": task_id,
        "label": label, "hash_order": [f"vecMergeInfo hashOrder: func3_{i % 4}, subGraphCount: 4"
                                       if i % 3 == 0 else "" for i in range(n)],
        "core_type": np.where(cores < AIC, "AIC", "AIV"), "core": cores + 1,
    }).with_columns(end_us=pl.col("start_us") + pl.col("dur_us"))


def _topo(tasks: pl.DataFrame) -> pl.DataFrame:
    tid = tasks["task_id"].to_numpy()
    succ = [[int(t + 1), int(t + 5)] if t + 5 < 2048 else [] for t in tid]
    return pl.DataFrame({"seq_no": tasks["seq_no"], "task_id": tasks["task_id"],
                         "leaf_hash": (tid % 7).astype(np.uint64),
                         "core_type": (tasks["core_type"] == "AIC").cast(pl.Int64),
                         "succ": succ}, schema_overrides={"succ": pl.List(pl.Int64)})


def _phases(t_end: float) -> pl.DataFrame:
    rows = []
    for lane, block in (("AICPU-CTRL", 0), ("AICPU-SCHED", 1), ("AICPU-SCHED", 2)):
        stamps = [("BEGIN", None, 990.0), ("INIT", None, 995.0)]
        stamps += [("DEV_TASK_BUILD" if block == 0 else "DEV_TASK_RCV", k, 1000.0 + k * 40)
                   for k in range(int((t_end - 1000) // 40))]
        stamps += [("EXIT", None, t_end + 5)]
        rows += [(lane, block, p, 0, k, int(e * 50), e) for p, k, e in stamps]
    for b in range(1, AIC + AIV + 1):
        rows.append((f"SCHED1-{'AIC' if b <= AIC else 'AIV'}", b, "BEGIN", 0, None, 49500, 990.0))
    return pl.DataFrame(rows, orient="row", schema={
        "lane_type": pl.Utf8, "block": pl.Int64, "phase": pl.Utf8, "round": pl.Int64,
        "idx": pl.Int64, "end_cycles": pl.Int64, "end_us": pl.Float64})


def make_study(root: Path, n: int = 100_000, seed: int = 7) -> tuple[Path, Path]:
    """Write the study config and its parsed stage; return (study file, stages dir)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    study = root / "big.yaml"
    study.write_text("name: big\ndescription: synthetic stage with many tasks\n"
                     "kernel: synthetic\nstages:\n  - name: big\n    description: one big "
                     "stage\n", encoding="utf-8")
    parsed = root / "results" / "big" / "big" / "parsed"
    parsed.mkdir(parents=True, exist_ok=True)
    tasks = _tasks(n, np.random.default_rng(seed))
    tasks.write_parquet(parsed / "tasks.parquet")
    _topo(tasks).write_parquet(parsed / "topo.parquet")
    _phases(float(tasks["end_us"].max())).write_parquet(parsed / "phases.parquet")
    span = float(tasks["end_us"].max() - tasks["start_us"].min())
    metrics = {"kernel_us": span, "e2e_us": span + 20, "aicore_utilization": 0.8,
               "root_calls": n // 16, "dev_tasks": int(tasks["seq_no"].n_unique()),
               "leaf_tasks": n, "hbm_read_bytes": 0, "hbm_write_bytes": 0, "l2_hit_rate": 0.0}
    (parsed / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    return study, root / "results" / "big"


def main(argv: list[str]) -> int:
    from pipeline.report.render import render_study
    root = Path(argv[1] if len(argv) > 1 else "/tmp/ptolab_big")
    study, stages = make_study(root, int(argv[2]) if len(argv) > 2 else 100_000)
    render_study(study, stages, stages / "report.html")
    print(stages / "report.html")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
