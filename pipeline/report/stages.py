"""What a report shows of each stage, read from the stage's parsed/ files only."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .charts import Sweep

# polars is imported by the functions that read tables: the index reads only metrics.json


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).exists() else None


def table(parsed: Path, name: str) -> pl.DataFrame | None:
    import polars as pl
    path = Path(parsed) / f"{name}.parquet"
    return pl.read_parquet(path) if path.exists() else None


def speedup(base: float | None, value: float | None) -> float | None:
    return base / value if base and value else None


def changed(prev: dict | None, cur: dict) -> dict:
    """The knobs a stage sets differently from the stage before it (all of them for the first)."""
    if prev is None:
        return dict(cur)
    keys = sorted(set(prev) | set(cur))
    return {k: cur.get(k, "(default)") for k in keys if prev.get(k) != cur.get(k)}


def chip_cores(phases: pl.DataFrame | None) -> set[tuple[str, int]]:
    """Every AICore of the run: PyPTO stamps each block's lane (SCHEDk-AIC/-AIV, 1-based)."""
    import polars as pl
    if phases is None:
        return set()
    lanes = phases.filter(pl.col("lane_type").str.contains("-AI[CV]$")) \
                  .select(pl.col("lane_type").str.slice(-3), "block").unique()
    return {(t, int(b)) for t, b in lanes.iter_rows()}


def core_busy(tasks: pl.DataFrame | None, phases: pl.DataFrame | None = None
              ) -> tuple[list[tuple[str, float]], float, dict[str, int]]:
    """(core name, busy us) for every core that ran a task, the kernel window in us, and
    the chip's cores per type (from the phase file; the cores that ran when it is absent).

    Idle cores are counted, not drawn: a chart of 72 rows with one bar hides the one.
    """
    import polars as pl
    if tasks is None or tasks.height == 0:
        return [], 0.0, {}
    span = float(tasks["end_us"].max() - tasks["start_us"].min())
    busy = {(t, int(c)): float(b) for t, c, b in
            tasks.group_by("core_type", "core").agg(pl.col("dur_us").sum()).iter_rows()}
    chip: dict[str, int] = {}
    for t, _ in set(busy) | chip_cores(phases):
        chip[t] = chip.get(t, 0) + 1
    cores = sorted(busy, key=lambda k: (k[0] != "AIC", k[0], k[1]))
    return [(f"{t}_{c}", busy[(t, c)]) for t, c in cores], span, dict(sorted(chip.items()))


def analyze_rounds(parsed: Path) -> list[dict]:
    """parsed/analyze.json as a list of {name, header, rows}; [] when absent or unknown."""
    data = read_json(Path(parsed) / "analyze.json")
    rounds = data.get("rounds", []) if isinstance(data, dict) else data or []
    # the header is shared at the top level, or repeated per round
    shared = data.get("header", []) if isinstance(data, dict) else []
    out = []
    for i, r in enumerate(rounds if isinstance(rounds, list) else []):
        if isinstance(r, dict) and isinstance(r.get("rows"), list):
            out.append({"name": str(r.get("name", f"round{i + 1}")),
                        "header": [str(h) for h in r.get("header", shared)],
                        "rows": [[str(c) for c in row] for row in r["rows"]]})
    return out


def pmu_summary(pmu: pl.DataFrame | None) -> list[dict]:
    """Pipe busy cycles over total cycles, per core type (needs PMU group 2's pipe_* columns)."""
    import polars as pl
    if pmu is None or "total_cycles" not in pmu.columns or "core_type" not in pmu.columns:
        return []
    pipes = sorted(c for c in pmu.columns if c.startswith("pipe_"))
    if not pipes:
        return []
    agg = pmu.group_by("core_type").agg(pl.len().alias("tasks"), pl.col("total_cycles").sum(),
                                        *[pl.col(p).sum() for p in pipes]).sort("core_type")
    return [{"core_type": r["core_type"], "tasks": r["tasks"], "total_cycles": r["total_cycles"],
             "pipes": {p[5:]: (r[p] / r["total_cycles"] if r["total_cycles"] else 0.0)
                       for p in pipes}}
            for r in agg.iter_rows(named=True)]


def pipe_timeline(parsed: Path) -> pl.DataFrame | None:
    """parsed/pipe_timeline.parquet (core, pipe, start_us, dur_us[, name]) as swimlane tasks.

    Written on dav_3510 with PMU Trace on; each (core, pipe) pair becomes a lane.
    """
    import polars as pl
    pipes = table(parsed, "pipe_timeline")
    need = {"core", "pipe", "start_us", "dur_us"}
    if pipes is None or not need <= set(pipes.columns) or pipes.height == 0:
        return None
    name = pl.col("name") if "name" in pipes.columns else pl.col("pipe")
    ranks = {p: i for i, p in enumerate(sorted(set(pipes["pipe"].cast(pl.Utf8))))}
    return pipes.select(
        core_type=pl.lit("PIPE"),
        lane_name=pl.format("core{} {}", pl.col("core"), pl.col("pipe")),
        core=pl.col("core").cast(pl.Int64) * 16 + pl.col("pipe").cast(pl.Utf8)
        .replace_strict(ranks, return_dtype=pl.Int64),
        start_us=pl.col("start_us").cast(pl.Float64), dur_us=pl.col("dur_us").cast(pl.Float64),
        name=name.cast(pl.Utf8), label=pl.col("pipe").cast(pl.Utf8),
        hash_order=pl.lit(""), seq_no=pl.lit(None, pl.Int64), task_id=pl.lit(None, pl.Int64),
    ).with_columns(end_us=pl.col("start_us") + pl.col("dur_us"))


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def race_range(metrics: dict, key: str) -> tuple[float, float] | None:
    """(smallest, largest) run of ``key`` over the chip's race variants, when the stage
    raced (``ptolab stage --race``)."""
    lo, hi = metrics.get(f"{key}_race_min"), metrics.get(f"{key}_race_max")
    return (float(lo), float(hi)) if _numeric(lo) and _numeric(hi) else None


def race_ranges(metrics: list[dict]) -> dict[str, list[tuple[float, float] | None]]:
    """Per time (kernel_us, e2e_us), each stage's race range or None: what the charts draw."""
    return {k: [race_range(m, k) for m in metrics] for k in ("kernel_us", "e2e_us")}


def ranges_overlap(a: dict, b: dict, key: str) -> bool:
    """Both stages raced and their race ranges of ``key`` overlap: a difference between
    their single runs may be the race alone."""
    ra, rb = race_range(a, key), race_range(b, key)
    return ra is not None and rb is not None and ra[0] <= rb[1] and rb[0] <= ra[1]


def _timed(row: dict) -> bool:
    """Both times are in the stage's metrics (a sweep plots them)."""
    return all(_numeric(row["metrics"].get(k)) for k in ("kernel_us", "e2e_us"))


def sweeps(rows: list[dict]) -> list[Sweep]:
    """Maximal runs of consecutive stages that differ in exactly one numeric knob."""
    out, run, knob = [], [], None
    for prev, cur in zip(rows, rows[1:]):
        diff = changed(prev["knobs"], cur["knobs"])
        k = next(iter(diff)) if len(diff) == 1 else None
        ok = (k is not None and _numeric(prev["knobs"].get(k)) and _numeric(cur["knobs"].get(k))
              and _timed(prev) and _timed(cur))
        if ok and k == knob:
            run.append(cur)
            continue
        if len(run) >= 2:
            out.append(_sweep(knob, run))
        run, knob = ([prev, cur], k) if ok else ([], None)
    if len(run) >= 2:
        out.append(_sweep(knob, run))
    return out


def _sweep(knob: str, run: list[dict]) -> Sweep:
    return Sweep(knob, [r["name"] for r in run], [float(r["knobs"][knob]) for r in run],
                 [r["metrics"]["kernel_us"] for r in run], [r["metrics"]["e2e_us"] for r in run],
                 [dict(r["documented"]) for r in run],
                 race_ranges([r["metrics"] for r in run]))


# What each column of upstream's analyze table measures (hicann/pypto
# docs/zh/tutorials/appendix/faq/swimlane-issue.md and tools/scripts/machine_perf_trace.py).
PHASE_COLUMNS = [
    ("DEV_TASK_BUILD", "AICPU-CTRL: the sum of every dev-task (stitch batch) build."),
    ("ALLOC_THREAD_ID", "AICPU-SCHED: thread allocation and core binding."),
    ("INIT", "AICPU-SCHED: scheduler init. AICore: from the cores' first stamp (kernel entry) "
             "until the first leaf task arrives, i.e. the wait for the first dev task to be "
             "built and sent."),
    ("CORE_HAND_SHAKE", "AICPU-SCHED: handshake with the AI cores."),
    ("DEV_TASK_RCV", "AICPU-SCHED: receiving the first dev task from the control thread."),
    ("Post-process", "AICPU-CTRL: from the last build to exit. AICPU-SCHED: after the dev tasks "
                     "ran until exit. AICore: from the last leaf task's end to core exit."),
    ("End-to-End time", "AICore: from the first leaf task received to the last leaf task "
                        "finished — the kernel window (kernel_us)."),
    ("Total run time", "AICPU: launch to exit. AICore: kernel entry to core exit."),
]


def _cell(row: list[str], header: list[str], name: str) -> float | None:
    idx = next((i for i, h in enumerate(header) if h.startswith(name)), None)
    if idx is None or idx >= len(row):
        return None
    try:
        return float(row[idx])
    except ValueError:
        return None


def phase_reading(rnd: dict) -> str | None:
    """One sentence on how the AICore row's columns add up (INIT precedes the window)."""
    header = rnd["header"]
    core = next((r for r in rnd["rows"] if r and r[0] == "AICore"), None)
    ctrl = next((r for r in rnd["rows"] if r and r[0].startswith("AICPU-CTRL")), None)
    if core is None:
        return None
    init, post, e2e, total = (_cell(core, header, n) for n in
                              ("INIT", "Post-process", "End-to-End", "Total"))
    if None in (init, post, e2e, total):
        return None
    text = (f"AICore: INIT {init:.2f} us (waiting for the first leaf task) + End-to-End "
            f"{e2e:.2f} us (the kernel window) + Post-process {post:.2f} us = Total "
            f"{init + e2e + post:.2f} us (table: {total:.2f}). INIT ends where the kernel window "
            "begins: the two do not overlap.")
    build = _cell(ctrl, header, "DEV_TASK_BUILD") if ctrl else None
    if build is not None:
        text += (f" AICPU-CTRL's DEV_TASK_BUILD {build:.2f} us is the sum of all builds: "
                 "the first delays the first leaf task (AICore INIT), the later ones run during "
                 "the kernel window "
                 "(dev task k+1 is built while dev task k runs), so a build time can show in "
                 "both INIT and End-to-End.")
    return text


# Files of a stage's run/ folder a tuning engineer opens next to the report, with a note
# for what is absent (what produces it).
RUN_FILES = [
    ("bubble_analysis.log", "bubble_analysis.log", "gaps per core (runtime_debug_mode=1)"),
    ("dyn_topo.txt", "dyn_topo.txt", "task graph (runtime_debug_mode=1)"),
    ("program.json", "program.json", "leaf functions and ops (runtime_debug_mode=1)"),
    ("merged_swimlane.json", "merged_swimlane.json", "swimlane for Perfetto / PyPTO Toolkit"),
    ("perf data", "machine_trace_perf_data_*.json", "AICPU/AICore phases (DUMP_DEVICE_PERF=true)"),
    ("PMU CSV", "tilefwk_prof_pmu.csv",
     "per-task PMU counters: simulate with PYPTO_PROF_PMU_EVENT_TYPE=2, then "
     "ptolab pmu-to-csv -p RUN/PROF_000001/device_0/data -pe 2 --arch ARCH --output RUN"),
]


def run_links(stage_dir: Path, report_dir: Path) -> list[dict]:
    """Each RUN_FILES entry: label, relative links (from the report's folder) or what is absent."""
    run = Path(stage_dir) / "run"
    out = []
    for label, pattern, note in RUN_FILES:
        found = sorted(run.glob(pattern)) if run.is_dir() else []
        if not found and pattern.endswith(".csv") and run.is_dir():
            found = sorted(run.glob("PROF_*/**/" + pattern))
        out.append({"label": label, "note": note, "links": [
            {"name": p.name, "href": Path(os.path.relpath(p, report_dir)).as_posix()}
            for p in found]})
    return out
