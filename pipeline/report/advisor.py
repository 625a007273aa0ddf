"""Bottleneck advisor: the seeds' tuning advice, fired by evidence in a stage's parsed files.

``advise(stage_dir)`` reads only ``<stage_dir>/parsed/`` (metrics.json, tasks, topo,
phases and, when parse writes it, ops.parquet from program.json), so it runs the same
on simulated and on device-captured runs.  Each finding names the rule, a one-line
title, the evidence (numbers and task names), the seed section it follows (its Chinese
heading quoted, with the sentence that gives the advice) and a severity.
Rules whose data the compiler does not emit yet (reduce axes, GM block offsets) read the
fields upstream files carry and stay silent while those fields are empty.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ..parse.swimlane import tasks_with_topology

# --- thresholds (each with the reason for its value) -------------------------------
# Idle time between consecutive dev tasks, as a share of the kernel window, above which
# the swimlane shows the "大量空隙" the Stitch section blames on a small stitch; 20% is
# where the gaps are visible at a glance in the seeds' stitch=1 swimlane.
DEV_GAP_SHARE = 0.20
# "大量空隙" means many gaps: a single gap (two dev tasks) is one hand-over, which the
# first-task rule explains better than "stitch too small".
MIN_GAPS = 2
# The seed's own number: isomorphic groups of subgraphs "耗时在10u以下".
SMALL_TASK_US = 10.0
# "大量的小子图": fewer than this many tasks do not pay for a breadth merge; 8 is the
# smallest group that fills one merge of vecNBuffer's usual factors (2/4/8).
MANY_TASKS = 8
# The seed's own number: "只使用了不到一半的Vector核".
VECTOR_CORE_SHARE = 0.5
# A dependency counts as many-to-many when producers feed more than one consumer AND
# consumers wait on more than one producer on average (the Sqrt->Cast 3-to-2 case);
# one-to-one and pure fan-in (a reduction's combine) stay silent.
FAN = 1.0
# ... and the two fans multiply to at least this: a 3-to-2 TileShape mismatch gives
# 4/3 x 2, while a running state passed from step to step (online softmax) links each
# producer to barely more than one consumer (about 1.03 x 1.03) and is not a tiling issue.
FAN_PRODUCT = 1.5
# Fewer edges than this between two subgraph groups are too few to blame TileShapes.
MIN_EDGES = 4
# One GM block loaded by this many leaf tasks is "冗余L1搬运" that L1Reuse merges away.
REPEAT_LOADS = 2
# First-task latency is "dominated" by the dev-task build when the build is at least
# half of it, and the latency matters when it is at least 10% of end-to-end time.
BUILD_SHARE = 0.5
FIRST_TASK_SHARE = 0.10
# Opcodes that reduce an axis (upstream names and ptolab's); matched as substrings.
REDUCE_WORDS = ("SUM", "MAX", "MIN", "MEAN", "PROD", "REDUCE")

_GUIDE = "PyPTO 性能调优指南"
SEED = {
    "stitch": f"{_GUIDE} › 深度性能调优 › 「Stitch 调优」: “当泳道图中出现大量空隙时，"
              "可能是Stitch配置的值太小导致的。”",
    "stitch_down": f"{_GUIDE} › 深度性能调优 › 「Stitch 调优」: “参数过大会导致调度耗时明显增加，"
                   "进而导致端到端耗时得不偿失。”（定位首任务启动慢：「方式二：AI CPU/AI Core 联合采集」）",
    "vec_nbuffer": f"{_GUIDE} › 合图调优 › 「Vector 广度方向合图」: “当泳道图内有同构子图组具有大量的"
                   "小子图（耗时在10u以下）时，应该使用该功能进行优化，以减少调度开销和kernel的头开销。”",
    "cube_nbuffer": f"{_GUIDE} › 合图调优 › 「Matmul 广度方向合图」: “CubeNBuffer可以在不同分支的"
                    "矩阵乘之间进行合并”（同构Cube子图，配置cube_nbuffer_setting）",
    "tile_smaller": f"{_GUIDE} › TileShape 调优 › 「Vector TileShape 调优」: “当泳道图上某一部分并行的"
                    "核数较少（如只使用了不到一半的Vector核）时，应尝试减小该处Operation的TileShape。”",
    "reduce": f"{_GUIDE} › 开箱性能调优 › 「Vector 初始 Tiling 配置」: “归约类计算(Reduce运算，如："
              "sum、max、min等)尽可能不要在归约轴上进行切分。”",
    "align": f"{_GUIDE} › TileShape 调优 › 「Vector TileShape 调优」: “上下游Operation的TileShape"
             "不对齐时，可能产生多对多依赖，无法正常合图。”",
    "l1reuse": f"{_GUIDE} › 合图调优 › 「Matmul 广度方向合图」: “前者用于合并具有冗余L1搬运的子图…"
               "L1Reuse可以减少L1搬运量”",
}


def _finding(rule: str, title: str, evidence: str, seed: str, severity: str,
             action: str) -> dict:
    return {"rule": rule, "title": title, "evidence": evidence, "seed_section": SEED[seed],
            "severity": severity, "action": action}


class Stage:
    """Lazy access to one stage's parsed tables; absent files read as None."""

    def __init__(self, stage_dir: Path):
        stage_dir = Path(stage_dir)
        self.dir = stage_dir / "parsed" if (stage_dir / "parsed").is_dir() else stage_dir
        self._cache: dict = {}

    def table(self, name: str) -> pl.DataFrame | None:
        if name not in self._cache:
            path = self.dir / f"{name}.parquet"
            self._cache[name] = pl.read_parquet(path) if path.exists() else None
        return self._cache[name]

    @property
    def metrics(self) -> dict:
        path = self.dir / "metrics.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def tasks_with_leaf(self) -> pl.DataFrame | None:
        """Leaf tasks with their leaf-function hash from dyn_topo (isomorphic group key)."""
        tasks, topo = self.table("tasks"), self.table("topo")
        if tasks is None or tasks.height == 0:
            return None
        if topo is None:
            return tasks.with_columns(leaf_hash=pl.col("label"))
        return tasks_with_topology(tasks, topo, ("leaf_hash",)).with_columns(
            leaf_hash=pl.coalesce(pl.col("leaf_hash").cast(pl.Utf8), "label"))


def _examples(names, k: int = 3) -> str:
    names = [str(n) for n in names]
    return ", ".join(names[:k]) + (" …" if len(names) > k else "")


def dev_task_gaps(st: Stage) -> list[dict]:
    tasks = st.table("tasks")
    if tasks is None or tasks.height == 0 or tasks["seq_no"].n_unique() < MIN_GAPS + 1:
        return []
    spans = (tasks.group_by("seq_no").agg(pl.col("start_us").min(), pl.col("end_us").max())
             .sort("start_us"))
    gaps = (spans["start_us"].shift(-1) - spans["end_us"]).head(spans.height - 1).clip(0)
    window = float(tasks["end_us"].max() - tasks["start_us"].min())
    total = float(gaps.sum())
    if window <= 0 or total / window < DEV_GAP_SHARE:
        return []
    worst = int(gaps.arg_max())
    a, b = spans["seq_no"][worst], spans["seq_no"][worst + 1]
    evidence = (f"{spans.height} dev tasks; cores sit idle {total:.2f} us between them, "
                f"{total / window:.0%} of the {window:.2f} us kernel window (threshold "
                f"{DEV_GAP_SHARE:.0%}); the largest gap is {float(gaps[worst]):.2f} us between "
                f"dev task {a} and dev task {b}.")
    return [_finding("dev_task_gaps", "Gaps between dev tasks: raise stitch_function_max_num",
                     evidence, "stitch", "high" if total / window >= 0.5 else "medium",
                     "runtime_options.stitch_function_max_num: try doubling it, watching e2e_us "
                     "and workspace")]


def small_isomorphic(st: Stage) -> list[dict]:
    tasks = st.tasks_with_leaf()
    if tasks is None:
        return []
    groups = (tasks.group_by("leaf_hash", "core_type")
              .agg(pl.len().alias("n"), pl.col("dur_us").median().alias("med"),
                   pl.col("label").first(), pl.col("name").sort().head(3).alias("names"))
              .filter((pl.col("n") >= MANY_TASKS) & (pl.col("med") < SMALL_TASK_US))
              .sort("n", "leaf_hash", descending=[True, False]))
    # one finding per core type: the groups it covers are its evidence, largest first
    return [_small_finding(core, [g for g in groups.iter_rows(named=True)
                                  if g["core_type"] == core])
            for core in ("AIC", "AIV") if (groups["core_type"] == core).any()]


def _small_finding(core: str, found: list[dict]) -> dict:
    cube = core == "AIC"
    knob = "pass_options.cube_nbuffer_setting" if cube else "pass_options.vec_nbuffer_setting"
    shown = "; ".join(f"'{g['label']}' {g['n']} leaf tasks, median {g['med']:.2f} us "
                      f"(e.g. {_examples(g['names'])})" for g in found[:3])
    more = f"; and {len(found) - 3} more group(s)" if len(found) > 3 else ""
    evidence = (f"{len(found)} isomorphic group(s) on {core} with tasks below "
                f"{SMALL_TASK_US:g} us: {shown}{more}.")
    name = "CubeNBuffer" if cube else "vecNBuffer"
    return _finding("small_isomorphic_" + ("cube" if cube else "vec"),
                    f"Many sub-{SMALL_TASK_US:g}-us isomorphic subgraphs: merge them ({name})",
                    evidence, "cube_nbuffer" if cube else "vec_nbuffer", "medium",
                    f"{knob}: merge 2-8 of these per kernel (e.g. {{\"DEFAULT\": 4}})")


def vector_core_count(st: Stage) -> int | None:
    """Vector cores on the chip: PyPTO stamps every AICore block in the phase file."""
    phases = st.table("phases")
    if phases is None:
        return None
    aiv = phases.filter(pl.col("lane_type").str.ends_with("-AIV"))
    return aiv["block"].n_unique() or None


def few_vector_cores(st: Stage) -> list[dict]:
    tasks, total = st.table("tasks"), vector_core_count(st)
    if tasks is None or not total:
        return []
    aiv = tasks.filter(pl.col("core_type") == "AIV")
    used = aiv["core"].n_unique()
    if aiv.height == 0 or used >= VECTOR_CORE_SHARE * total:
        return []
    window = float(tasks["end_us"].max() - tasks["start_us"].min()) or 1.0
    evidence = (f"{aiv.height} vector leaf tasks ran on {used} of {total} AIV cores "
                f"(fewer than {VECTOR_CORE_SHARE:.0%}); on average "
                f"{float(aiv['dur_us'].sum()) / window:.1f} AIV cores were busy over the "
                f"{window:.2f} us kernel window.")
    return [_finding("few_vector_cores", "Fewer than half the vector cores busy: "
                     "try a smaller TileShape", evidence, "tile_smaller",
                     "high" if used < 0.25 * total else "medium",
                     "tiles.<vec tile>: halve a non-tail, non-reduce axis so more tiles run "
                     "in parallel")]


def reduce_axis_split(st: Stage) -> list[dict]:
    ops = st.table("ops")
    if ops is None or ops.height == 0:
        return []
    reduces = ops.filter(pl.col("opcode").str.contains("|".join(REDUCE_WORDS))
                         & pl.col("axis").is_not_null() & pl.col("in_shape").is_not_null()
                         & pl.col("raw_shape").is_not_null())
    hits = []
    for r in reduces.iter_rows(named=True):
        axis, tile, raw = r["axis"], r["in_shape"], r["raw_shape"]
        if len(tile) == len(raw) and -len(raw) <= axis < len(raw) and tile[axis] < raw[axis]:
            hits.append(r)
    if not hits:
        return []
    r = hits[0]
    evidence = (f"{len(hits)} reduce op(s) tile their reduce axis: {r['opcode']} "
                f"(opmagic {r['opmagic']}, label '{r['label']}', function {r['func_name']}) "
                f"reduces axis {r['axis']} of a {r['raw_shape']} tensor in tiles of "
                f"{r['in_shape']}, so partial results go through GM to another subgraph.")
    return [_finding("reduce_axis_split", "Reduce axis is split: do not tile the reduce axis",
                     evidence, "reduce", "high",
                     "tiles.<vec tile>: make the reduce axis's tile span the whole axis "
                     f"({r['raw_shape'][r['axis']]})")]


def _edges(st: Stage) -> pl.DataFrame | None:
    topo = st.table("topo")
    if topo is None or "succ" not in topo.columns:
        return None
    node = topo.select("seq_no", "task_id", pl.col("leaf_hash").cast(pl.Utf8).alias("g"))
    return (topo.select("seq_no", "task_id", "succ").explode("succ").drop_nulls("succ")
            .join(node, on=["seq_no", "task_id"])
            .join(node.rename({"task_id": "succ", "g": "h"}), on=["seq_no", "succ"])
            .filter(pl.col("g") != pl.col("h")))


def many_to_many(st: Stage) -> list[dict]:
    edges = _edges(st)
    if edges is None or edges.height == 0:
        return []
    fan = (edges.group_by("g", "h").agg(
        pl.len().alias("edges"),
        (pl.len() / pl.struct("seq_no", "task_id").n_unique()).alias("fan_out"),
        (pl.len() / pl.struct("seq_no", "succ").n_unique()).alias("fan_in"))
        .filter((pl.col("edges") >= MIN_EDGES) & (pl.col("fan_out") > FAN)
                & (pl.col("fan_in") > FAN)
                & (pl.col("fan_out") * pl.col("fan_in") >= FAN_PRODUCT))
        .sort("edges", "g", "h", descending=[True, False, False]))
    return [_m2m_finding(st, f) for f in fan.iter_rows(named=True)]


def _group_label(st: Stage, leaf: str) -> str:
    tasks = st.tasks_with_leaf()
    if tasks is None:
        return leaf
    hit = tasks.filter(pl.col("leaf_hash") == leaf)
    return f"'{hit['label'][0]}' (leaf {leaf})" if hit.height else f"leaf {leaf}"


def _m2m_finding(st: Stage, f: dict) -> dict:
    evidence = (f"{f['edges']} dependencies from {_group_label(st, f['g'])} to "
                f"{_group_label(st, f['h'])}: each producer feeds {f['fan_out']:.2f} consumers "
                f"and each consumer waits on {f['fan_in']:.2f} producers on average "
                f"(many-to-many, both above {FAN:g}).")
    return _finding("many_to_many", "Many-to-many dependencies between up- and downstream "
                    "tiles: align their TileShapes", evidence, "align", "medium",
                    "tiles.*: give the downstream op the upstream op's output TileShape")


def repeated_gm_loads(st: Stage) -> list[dict]:
    ops = st.table("ops")
    if ops is None or ops.height == 0:
        return []
    loads = ops.filter(pl.col("opcode").str.contains("COPY_IN|LOAD")
                       & pl.col("raw").is_not_null() & pl.col("in_offset").is_not_null()
                       & pl.col("in_shape").is_not_null())
    if loads.height == 0:
        return []
    loads = loads.join(_runs_per_function(st), on="func_hash", how="left") \
                 .with_columns(pl.col("runs").fill_null(1))
    blocks = (loads.group_by("raw", "in_offset", "in_shape")
              .agg(pl.col("runs").sum().alias("loads"), pl.col("func_name").unique().sort())
              .filter(pl.col("loads") >= REPEAT_LOADS)
              .with_columns(key=pl.col("in_offset").cast(pl.List(pl.Utf8)).list.join(","))
              .sort("loads", "raw", "key", descending=[True, False, False]))
    if blocks.height == 0:
        return []
    b = blocks.row(0, named=True)
    evidence = (f"{blocks.height} GM block(s) are loaded by {REPEAT_LOADS} or more leaf tasks; "
                f"the worst, raw tensor {b['raw']} at offset {b['in_offset']} shape "
                f"{b['in_shape']}, is loaded {b['loads']} times by {_examples(b['func_name'])}.")
    return [_finding("repeated_gm_loads", "Repeated GM loads of one block: merge the loaders "
                     "(L1Reuse)", evidence, "l1reuse", "medium",
                     "pass_options.cube_l1_reuse_setting: e.g. {\"DEFAULT\": 4}")]


def _runs_per_function(st: Stage) -> pl.DataFrame:
    topo = st.table("topo")
    if topo is None:
        return pl.DataFrame(schema={"func_hash": pl.UInt64, "runs": pl.UInt32})
    return topo.group_by(pl.col("leaf_hash").alias("func_hash")).agg(pl.len().alias("runs")) \
               .with_columns(pl.col("func_hash").cast(pl.UInt64))


def _round_phases(st: Stage) -> pl.DataFrame | None:
    phases = st.table("phases")
    if phases is None or phases.height == 0:
        return None
    aicpu = phases.filter(pl.col("lane_type").str.starts_with("AICPU"))
    return aicpu.filter(pl.col("round") == aicpu["round"].min()) if aicpu.height else None


def first_task_build(st: Stage) -> list[dict]:
    ph = _round_phases(st)
    if ph is None:
        return []
    ctrl = ph.filter(pl.col("lane_type") == "AICPU-CTRL").sort("end_us")
    begin = ph.filter(pl.col("phase") == "BEGIN")["end_us"].min()
    first = ph.filter(pl.col("phase") == "DEV_TASK_SEND_FIRST_LEAF_TASK")["end_us"].min()
    builds = ctrl.with_columns(dur=pl.col("end_us") - pl.col("end_us").shift(1)) \
                 .filter(pl.col("phase") == "DEV_TASK_BUILD")
    exits = ph.filter(pl.col("phase") == "EXIT")["end_us"].max()
    if begin is None or first is None or builds.height == 0 or exits is None:
        return []
    latency, build, e2e = first - begin, float(builds["dur"][0] or 0.0), exits - begin
    if latency <= 0 or build / latency < BUILD_SHARE or latency / e2e < FIRST_TASK_SHARE:
        return []
    evidence = (f"the first leaf task is sent {latency:.2f} us after the AICPU BEGIN "
                f"({latency / e2e:.0%} of the {e2e:.2f} us end-to-end time); building the "
                f"first dev task (DEV_TASK_BUILD(0)) takes {build:.2f} us of it "
                f"({build / latency:.0%}, threshold {BUILD_SHARE:.0%}) over "
                f"{builds.height} dev-task builds.")
    return [_finding("first_task_build", "First-task latency dominated by the dev-task build: "
                     "lower stitch_function_max_num", evidence, "stitch_down", "medium",
                     "runtime_options.stitch_function_max_num: smaller first dev tasks start "
                     "the cores sooner")]


RULES = (dev_task_gaps, first_task_build, small_isomorphic, few_vector_cores,
         reduce_axis_split, many_to_many, repeated_gm_loads)
_ORDER = {"high": 0, "medium": 1, "low": 2}


def advise(stage_dir: Path) -> list[dict]:
    """Findings for one stage folder (the one holding parsed/), most severe first."""
    st = Stage(Path(stage_dir))
    found = [f for rule in RULES for f in rule(st)]
    return sorted(found, key=lambda f: _ORDER[f["severity"]])
