"""Bottleneck advisor: the tuning advice of PyPTO's performance guide, fired by evidence in a stage's parsed files.

``advise(stage_dir, knobs)`` reads only ``<stage_dir>/parsed/`` (metrics.json, tasks,
topo, phases and, when parse writes it, ops.parquet from program.json), so it runs the
same on simulated and on device-captured runs.  Each finding names the rule, a one-line
title, the evidence (numbers and task names), the guide section it follows (its Chinese
heading quoted, with the sentence that gives the advice), a severity, the time it
explains and, given the stage's kernel (``knobs``), ``--set`` lines to try that run as
printed.  Findings are ranked by the time they explain; one whose cause another one
explains is folded under that one (``folded``, with ``because``), wherever it ranks.
Rules whose data the compiler does not emit yet (reduce axes, GM block offsets) read the
fields upstream files carry and stay silent while those fields are empty.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ..parse.swimlane import tasks_with_topology
from . import suggest
from .knobs import KernelKnobs

# --- thresholds (each with the reason for its value) -------------------------------
# Idle time between consecutive dev tasks, as a share of the kernel window, above which
# the swimlane shows the "大量空隙" the Stitch section blames on a small stitch; 20% is
# where the gaps are visible at a glance in the guide's stitch=1 swimlane.
DEV_GAP_SHARE = 0.20
# "大量空隙" means many gaps: a single gap (two dev tasks) is one hand-over, which the
# first-task rule explains better than "stitch too small".
MIN_GAPS = 2
# The guide's own number: isomorphic groups of subgraphs "耗时在10u以下".
SMALL_TASK_US = 10.0
# "大量的小子图": fewer than this many tasks do not pay for a breadth merge; 8 is the
# smallest group that fills one merge of vecNBuffer's usual factors (2/4/8).
MANY_TASKS = 8
# The guide's own number: "只使用了不到一半的Vector核".
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
# Below this a finding's time shows as "≈ 0.00 us"; in a timed stage it is left out.
NO_TIME_US = 0.005
# A finding on top explaining less than this share of the kernel window names no
# bottleneck worth a knob change (left out, like NO_TIME_US); below LOW_SHARE it is low.
MIN_SHARE = 0.01
LOW_SHARE = 0.05
# Opcodes that reduce an axis (upstream names and ptolab's); matched as substrings.
REDUCE_WORDS = ("SUM", "MAX", "MIN", "MEAN", "PROD", "REDUCE")

GUIDE_NAME = "PyPTO 性能调优指南"
GUIDE = {
    "stitch": f"{GUIDE_NAME} › 深度性能调优 › 「Stitch 调优」: “当泳道图中出现大量空隙时，"
              "可能是Stitch配置的值太小导致的。”",
    "stitch_down": f"{GUIDE_NAME} › 深度性能调优 › 「Stitch 调优」: “参数过大会导致调度耗时明显增加，"
                   "进而导致端到端耗时得不偿失。”（定位首任务启动慢：「方式二：AI CPU/AI Core 联合采集」）",
    "vec_nbuffer": f"{GUIDE_NAME} › 合图调优 › 「Vector 广度方向合图」: “当泳道图内有同构子图组具有大量的"
                   "小子图（耗时在10u以下）时，应该使用该功能进行优化，以减少调度开销和kernel的头开销。”",
    "cube_nbuffer": f"{GUIDE_NAME} › 合图调优 › 「Matmul 广度方向合图」: “CubeNBuffer可以在不同分支的"
                    "矩阵乘之间进行合并”（同构Cube子图，配置cube_nbuffer_setting）",
    "tile_smaller": f"{GUIDE_NAME} › TileShape 调优 › 「Vector TileShape 调优」: “当泳道图上某一部分并行的"
                    "核数较少（如只使用了不到一半的Vector核）时，应尝试减小该处Operation的TileShape。”",
    "reduce": f"{GUIDE_NAME} › 开箱性能调优 › 「Vector 初始 Tiling 配置」: “归约类计算(Reduce运算，如："
              "sum、max、min等)尽可能不要在归约轴上进行切分。”",
    "align": f"{GUIDE_NAME} › TileShape 调优 › 「Vector TileShape 调优」: “上下游Operation的TileShape"
             "不对齐时，可能产生多对多依赖，无法正常合图。”",
    "l1reuse": f"{GUIDE_NAME} › 合图调优 › 「Matmul 广度方向合图」: “前者用于合并具有冗余L1搬运的子图…"
               "L1Reuse可以减少L1搬运量”",
}


def _finding(rule: str, title: str, evidence: str, guide: str, severity: str, action: str,
             explains_us: float, explains: str, tries: list[str] | None = None,
             caused_by: dict[str, str] | None = None) -> dict:
    """One finding; ``caused_by`` maps a rule to why that rule's cause explains this one."""
    return {"rule": rule, "title": title, "evidence": evidence, "guide_section": GUIDE[guide],
            "severity": severity, "action": action, "tries": list(tries or []),
            "explains_us": round(float(explains_us), 2), "explains": explains,
            "caused_by": dict(caused_by or {}), "folded": [], "because": ""}


def fmt(value: float) -> str:
    """A number a reader can use: two decimals, or two significant digits below 0.1."""
    value = float(value)
    return f"{value:.2g}" if 0 < abs(value) < 0.1 else f"{value:.2f}"


class Stage:
    """Lazy access to one stage's parsed tables; absent files read as None."""

    def __init__(self, stage_dir: Path, knobs: KernelKnobs | None = None):
        stage_dir = Path(stage_dir)
        self.dir = stage_dir / "parsed" if (stage_dir / "parsed").is_dir() else stage_dir
        self.knobs = knobs
        self._cache: dict = {}

    def table(self, name: str) -> pl.DataFrame | None:
        if name not in self._cache:
            path = self.dir / f"{name}.parquet"
            self._cache[name] = pl.read_parquet(path) if path.exists() else None
        return self._cache[name]

    @property
    def metrics(self) -> dict:
        path = self.dir / "metrics.json"
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        return data if isinstance(data, dict) else {}

    def tasks_with_leaf(self) -> pl.DataFrame | None:
        """Leaf tasks with their leaf-function hash from dyn_topo (isomorphic group key);
        joined once, as several rules ask for it per group."""
        if "tasks_with_leaf" not in self._cache:
            self._cache["tasks_with_leaf"] = self._join_leaf()
        return self._cache["tasks_with_leaf"]

    def _join_leaf(self) -> pl.DataFrame | None:
        tasks, topo = self.table("tasks"), self.table("topo")
        if tasks is None or tasks.height == 0:
            return None
        if topo is None:
            return tasks.with_columns(leaf_hash=pl.col("label"))
        return tasks_with_topology(tasks, topo, ("leaf_hash",)).with_columns(
            leaf_hash=pl.coalesce(pl.col("leaf_hash").cast(pl.Utf8), "label"))

    def window(self) -> float:
        tasks = self.table("tasks")
        if tasks is None or tasks.height == 0:
            return 0.0
        return float(tasks["end_us"].max() - tasks["start_us"].min())

    def chip_cores(self, core_type: str) -> int | None:
        """Cores of a type on the chip: PyPTO stamps every AICore block in the phase file."""
        phases = self.table("phases")
        if phases is None:
            return None
        lanes = phases.filter(pl.col("lane_type").str.ends_with("-" + core_type))
        return lanes["block"].n_unique() or None

    def used_cores(self, core_type: str) -> int:
        tasks = self.table("tasks")
        if tasks is None:
            return 0
        return tasks.filter(pl.col("core_type") == core_type)["core"].n_unique()

    def per_dev_task(self, core_type: str) -> float:
        """Median leaf tasks of one core type per dev task."""
        tasks = self.table("tasks")
        if tasks is None:
            return 0.0
        mine = tasks.filter(pl.col("core_type") == core_type)
        return float(mine.group_by("seq_no").len()["len"].median() or 0.0) if mine.height else 0.0

    def split_reduce_labels(self) -> set[str]:
        return {r["label"] for r in _split_reduces(self)}


def _examples(names, k: int = 3) -> str:
    names = [str(n) for n in names]
    return ", ".join(names[:k]) + (" …" if len(names) > k else "")


def _share(part: float, st: Stage) -> str:
    window = st.window()
    return (f"≈ {fmt(part)} us, {part / window:.0%} of the {fmt(window)} us kernel window"
            if window > 0 else f"≈ {fmt(part)} us")


def _small_dev_tasks(st: Stage, core_type: str) -> str | None:
    """Why dev-task gaps explain a core-type symptom: the dev tasks hold too few tasks."""
    total = st.chip_cores(core_type)
    per = st.per_dev_task(core_type)
    if not total or per >= total:
        return None
    return (f"each dev task holds {per:g} {core_type} leaf task(s) (median) for {total} "
            f"{core_type} cores, so the cores wait on dev-task hand-overs; raise the stitch "
            f"first, then look again")


def dev_task_gaps(st: Stage) -> list[dict]:
    tasks = st.table("tasks")
    if tasks is None or tasks.height == 0 or tasks["seq_no"].n_unique() < MIN_GAPS + 1:
        return []
    spans = (tasks.group_by("seq_no").agg(pl.col("start_us").min(), pl.col("end_us").max())
             .sort("start_us"))
    gaps = (spans["start_us"].shift(-1) - spans["end_us"]).head(spans.height - 1).clip(0)
    window = st.window()
    total = float(gaps.sum())
    if window <= 0 or total / window < DEV_GAP_SHARE:
        return []
    worst = int(gaps.arg_max())
    a, b = spans["seq_no"][worst], spans["seq_no"][worst + 1]
    evidence = (f"{spans.height} dev tasks; cores sit idle {fmt(total)} us between them, "
                f"{total / window:.0%} of the {fmt(window)} us kernel window (threshold "
                f"{DEV_GAP_SHARE:.0%}); the largest gap is {fmt(gaps[worst])} us between "
                f"dev task {a} and dev task {b}.")
    m = st.metrics
    per_root = (m.get("leaf_tasks") or tasks.height) / max(m.get("root_calls") or 1, 1)
    cores = sum(st.chip_cores(t) or 0 for t in tasks["core_type"].unique().to_list())
    return [_finding("dev_task_gaps", "Gaps between dev tasks: raise stitch_function_max_num",
                     evidence, "stitch", "high" if total / window >= 0.5 else "medium",
                     "runtime_options.stitch_function_max_num: stitch more root calls per dev "
                     "task, at least doubling it and enough "
                     f"to fill the {cores or 'available'} cores ({per_root:g} leaf task(s) per "
                     "root call); watch e2e_us and workspace",
                     total, f"the idle time between dev tasks, {_share(total, st)}",
                     suggest.stitch_up(st.knobs, (cores or 1) / max(per_root, 1e-9)))]


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
    return [_small_finding(st, tasks, core, [g for g in groups.iter_rows(named=True)
                                             if g["core_type"] == core])
            for core in ("AIC", "AIV") if (groups["core_type"] == core).any()]


def _head_overhead(st: Stage, tasks: pl.DataFrame, leaves: list[str]) -> float:
    """Idle time before each task of these groups on its core, inside its own dev task:
    the per-task dispatch and kernel-head cost a breadth merge saves, spread over the cores."""
    ordered = tasks.sort("core_type", "core", "start_us").with_columns(
        gap=(pl.col("start_us") - pl.col("end_us").shift(1).over("core_type", "core")),
        same=(pl.col("seq_no") == pl.col("seq_no").shift(1).over("core_type", "core")))
    mine = ordered.filter(pl.col("leaf_hash").is_in(leaves) & pl.col("same"))
    if mine.height == 0:
        return 0.0
    cores = max(mine["core"].n_unique(), 1)
    return float(mine["gap"].clip(0).sum()) / cores


def _small_finding(st: Stage, tasks: pl.DataFrame, core: str, found: list[dict]) -> dict:
    cube = core == "AIC"
    option = "pass_options.cube_nbuffer_setting" if cube else "pass_options.vec_nbuffer_setting"
    shown = "; ".join(f"'{g['label']}' {g['n']} leaf tasks, median {fmt(g['med'])} us "
                      f"(e.g. {_examples(g['names'])})" for g in found[:3])
    more = f"; and {len(found) - 3} more group(s)" if len(found) > 3 else ""
    evidence = (f"{len(found)} isomorphic group(s) on {core} with tasks below "
                f"{SMALL_TASK_US:g} us: {shown}{more}.")
    name = "CubeNBuffer" if cube else "vecNBuffer"
    overhead = _head_overhead(st, tasks, [g["leaf_hash"] for g in found])
    top = found[0]
    cores = st.chip_cores(core) or st.used_cores(core) or 1
    per_dev = top["n"] / max(tasks["seq_no"].n_unique(), 1)
    # merge as many as keeps one merged task per core in a dev task: 2, 4 or 8
    factor = max(2, min(8, 2 ** int(max(per_dev / cores, 1)).bit_length() // 2))
    # with fewer than two tasks a core, even two to a task leaves cores idle
    idle = (f"; merged, {per_dev / factor:g} tasks a dev task leave some of the {cores} "
            f"{core} cores idle, so it pays only while the heads it saves outweigh the "
            f"parallel work it gives up" if per_dev < factor * cores else "")
    because = {"dev_task_gaps": _small_dev_tasks(st, core)}
    if top["label"] in st.split_reduce_labels():
        because["reduce_axis_split"] = (f"the small '{top['label']}' subgraphs are the partial "
                                        "tiles of a split reduce; whole-axis tiles make fewer, "
                                        "larger ones")
    return _finding("small_isomorphic_" + ("cube" if cube else "vec"),
                    f"Many sub-{SMALL_TASK_US:g}-us isomorphic subgraphs: merge them ({name})",
                    evidence, "cube_nbuffer" if cube else "vec_nbuffer", "medium",
                    f"{option}: merge {factor} of the '{top['label']}' subgraphs per leaf task "
                    f"({top['n']} tasks on {cores} {core} cores){idle}",
                    overhead, "the idle time before these tasks on their cores inside a dev "
                    f"task (dispatch and kernel head), {_share(overhead, st)}",
                    suggest.merge(st.knobs, option, top["label"], factor),
                    {k: v for k, v in because.items() if v})


def few_vector_cores(st: Stage) -> list[dict]:
    tasks, total = st.table("tasks"), st.chip_cores("AIV")
    if tasks is None or not total:
        return []
    aiv = tasks.filter(pl.col("core_type") == "AIV")
    used = aiv["core"].n_unique()
    if aiv.height == 0 or used >= VECTOR_CORE_SHARE * total:
        return []
    window = st.window() or 1.0
    busy = float(aiv["dur_us"].sum())
    peak = _peak_parallel(aiv)
    label = aiv.group_by("label").agg(pl.col("dur_us").sum()).sort(
        "dur_us", "label", descending=[True, False])["label"][0]
    # the AIV work's wall time now, against the same work spread over every AIV core
    wall = _union_us(aiv)
    saved = max(wall - busy / total, 0.0)
    evidence = (f"{aiv.height} vector leaf tasks ran on {used} of {total} AIV cores "
                f"(fewer than {VECTOR_CORE_SHARE:.0%}), at most {peak} at once; they keep "
                f"{fmt(busy / window)} AIV cores busy on average ({fmt(busy)} us of core time "
                f"in the {fmt(window)} us kernel window).")
    because = _small_dev_tasks(st, "AIV")
    return [_finding("few_vector_cores", "Fewer than half the vector cores busy: "
                     "try a smaller TileShape", evidence, "tile_smaller",
                     "high" if used < 0.25 * total else "medium",
                     f"halve a non-reduce axis of the {_tile_name(st, label)} so more tiles run "
                     "in parallel",
                     saved, f"the vector work's {fmt(wall)} us of wall time against "
                     f"{fmt(busy / total)} us on all {total} AIV cores, {_share(saved, st)}",
                     suggest.tile_halved(st.knobs, label),
                     {"dev_task_gaps": because} if because else None)]


def _peak_parallel(tasks: pl.DataFrame) -> int:
    events = pl.concat([tasks.select(t=pl.col("start_us"), d=pl.lit(1)),
                        tasks.select(t=pl.col("end_us"), d=pl.lit(-1))]).sort("t", "d")
    return int(events["d"].cum_sum().max() or 0)


def _union_us(tasks: pl.DataFrame) -> float:
    """Length of the union of the tasks' [start, end) intervals."""
    total, end = 0.0, None
    for s, e in tasks.select("start_us", "end_us").sort("start_us").iter_rows():
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _split_reduces(st: Stage) -> list[dict]:
    """Reduce ops whose input tile is shorter than the tensor along the reduce axis."""
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
    return hits


def _tile_name(st: Stage, label: str) -> str:
    """'tiles.v1 (the 'softmax' ops' TileShape)', or just the latter without the kernel."""
    names = st.knobs.vec_tiles.get(label, []) if st.knobs else []
    own = f"'{label}' ops' vector TileShape"
    return f"{own} (tiles.{names[0]})" if len(names) == 1 else own


def _running_us(st: Stage, label: str | None) -> float:
    """Wall time during which at least one subgraph with this label runs."""
    tasks = st.table("tasks")
    if tasks is None or not label:
        return 0.0
    return _union_us(tasks.filter(pl.col("label") == label))


def reduce_axis_split(st: Stage) -> list[dict]:
    hits = _split_reduces(st)
    if not hits:
        return []
    r = hits[0]
    full = r["raw_shape"][r["axis"]]
    evidence = (f"{len(hits)} reduce op(s) tile their reduce axis: {r['opcode']} "
                f"(opmagic {r['opmagic']}, label '{r['label']}', function {r['func_name']}) "
                f"reduces axis {r['axis']} of a {r['raw_shape']} tensor in tiles of "
                f"{r['in_shape']}, so partial results go through GM to another subgraph.")
    part = _running_us(st, r["label"])
    return [_finding("reduce_axis_split", "Reduce axis is split: do not tile the reduce axis",
                     evidence, "reduce", "high",
                     f"make the {_tile_name(st, r['label'])} span the whole reduce axis ({full})",
                     part, f"at most the time '{r['label']}' subgraphs run, {_share(part, st)}",
                     suggest.tile_whole_axis(st.knobs, r["label"], r["axis"], full))]


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
    # one finding per consumer label: its producer groups share the time it explains, and
    # so do the leaf functions one label is split over
    by_consumer: dict[str, list[dict]] = {}
    for f in fan.iter_rows(named=True):
        by_consumer.setdefault(_group(st, f["h"])[1] or f["h"], []).append(f)
    found = [_m2m_finding(st, rows) for rows in by_consumer.values()]
    return [f for f in found if f is not None]


def _group(st: Stage, leaf: str) -> tuple[str, str, pl.DataFrame | None]:
    """(display name, semantic label, its tasks) of one leaf-function group."""
    tasks = st.tasks_with_leaf()
    if tasks is None:
        return f"leaf {leaf}", "", None
    hit = tasks.filter(pl.col("leaf_hash") == leaf)
    if not hit.height:
        return f"leaf {leaf}", "", None
    return f"'{hit['label'][0]}' (leaf {leaf})", hit["label"][0], hit


def _m2m_finding(st: Stage, rows: list[dict]) -> dict | None:
    """The many-to-many finding of one consumer group, from its largest producer group;
    None when producer and consumer are the same ops (one label split into several leaf
    functions: no TileShape of one to give the other)."""
    down, down_label, _ = _group(st, rows[0]["h"])
    rows = [f for f in rows if not down_label or _group(st, f["g"])[1] != down_label]
    if not rows:
        return None
    f = rows[0]
    up, up_label, up_tasks = _group(st, f["g"])
    more = len({r["g"] for r in rows} - {f["g"]})
    others = f"; {more} other producer group(s) feed it so too" if more else ""
    evidence = (f"{f['edges']} dependencies from {up} to {down}: each producer feeds "
                f"{f['fan_out']:.2f} consumers and each consumer waits on {f['fan_in']:.2f} "
                f"producers on average (many-to-many, both above {FAN:g}){others}.")
    part = _running_us(st, down_label)
    cube = up_tasks is not None and (up_tasks["core_type"] == "AIC").all()
    written = suggest.output_tile(st.knobs, up_label)
    source = (" (its cube TileShape's m and n)" if cube else
              f", ({', '.join(map(str, written))})" if written else f" ({_tile_name(st, up_label)})")
    return _finding("many_to_many", "Many-to-many dependencies between up- and downstream "
                    "tiles: align their TileShapes", evidence, "align", "medium",
                    f"give the {_tile_name(st, down_label)} the shape of the tiles the "
                    f"'{up_label}' {'matmul writes' if cube else 'ops write'}{source}",
                    part, f"at most the time '{down_label}' subgraphs run, {_share(part, st)}",
                    # a vector tile to copy is the producer's only when it is vector work
                    [] if cube else suggest.tile_like(st.knobs, down_label, up_label))


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
    if "l1_hash_order" not in loads.columns:
        loads = loads.with_columns(l1_hash_order=pl.lit(None, pl.Utf8))
    blocks = (loads.group_by("raw", "in_offset", "in_shape")
              .agg(pl.col("runs").sum().alias("loads"), pl.col("func_name").unique().sort(),
                   pl.col("label").drop_nulls().first(),
                   pl.col("l1_hash_order").drop_nulls().first().alias("order"))
              .filter(pl.col("loads") >= REPEAT_LOADS)
              .with_columns(key=pl.col("in_offset").cast(pl.List(pl.Utf8)).list.join(","))
              .sort("loads", "raw", "key", descending=[True, False, False]))
    if blocks.height == 0:
        return []
    b = blocks.row(0, named=True)
    evidence = (f"{blocks.height} GM block(s) are loaded by {REPEAT_LOADS} or more leaf tasks; "
                f"the worst, raw tensor {b['raw']} at offset {b['in_offset']} shape "
                f"{b['in_shape']}, is loaded {b['loads']} times by {_examples(b['func_name'])}.")
    part = _running_us(st, b["label"])
    key = b["order"] if b["order"] not in (None, "") else (b["label"] or "DEFAULT")
    factor = max(2, min(8, 2 ** (int(b["loads"]).bit_length() - 1)))
    return [_finding("repeated_gm_loads", "Repeated GM loads of one block: merge the loaders "
                     "(L1Reuse)", evidence, "l1reuse", "medium",
                     f"pass_options.cube_l1_reuse_setting: merge {factor} of the subgraphs that "
                     "load the block so it stays in L1",
                     part, f"at most the time the loading subgraphs run, {_share(part, st)}",
                     suggest.merge(st.knobs, "pass_options.cube_l1_reuse_setting",
                                   str(key), factor))]


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


def _loop_bodies(st: Stage) -> tuple[int | None, int | None]:
    """The loop bodies (what the stitch counts; root calls when the run does not say) and
    the dev tasks of a stage, None where its metrics do not give them."""
    m = st.metrics
    return (m.get("loop_bodies") or m.get("root_calls") or None), (m.get("dev_tasks") or None)


def first_task_build(st: Stage) -> list[dict]:
    bodies, dev_tasks = _loop_bodies(st)
    if bodies is not None and dev_tasks is not None and bodies <= dev_tasks:
        return []       # each dev task holds one loop body: no stitch makes the first smaller
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
    evidence = (f"the first leaf task is sent {fmt(latency)} us after the AICPU BEGIN "
                f"({latency / e2e:.0%} of the {fmt(e2e)} us end-to-end time); building the "
                f"first dev task (DEV_TASK_BUILD(0)) takes {fmt(build)} us of it "
                f"({build / latency:.0%}, threshold {BUILD_SHARE:.0%}) over "
                f"{builds.height} dev-task builds.")
    return [_finding("first_task_build", "First-task latency dominated by the dev-task build: "
                     "lower stitch_function_max_num", evidence, "stitch_down", "medium",
                     "runtime_options.stitch_function_max_num: a smaller first dev task starts "
                     "the cores sooner",
                     build, f"the first dev task's build, ≈ {fmt(build)} us of the "
                     f"{fmt(e2e)} us end-to-end time ({build / e2e:.0%})",
                     suggest.stitch_down(st.knobs, bodies))]


RULES = (dev_task_gaps, first_task_build, small_isomorphic, few_vector_cores,
         reduce_axis_split, many_to_many, repeated_gm_loads)
_ORDER = {"high": 0, "medium": 1, "low": 2}


def rank(found: list[dict], min_parent_us: float = 0.0) -> list[dict]:
    """Most time explained first; a finding whose cause another one explains is folded
    under that one (``folded``), with the reason in ``because``, wherever the cause ranks:
    a symptom that explains more time than its cause is still the cause's to fix.  A cause
    explaining under ``min_parent_us`` (left out of the report) folds nothing."""
    ordered = sorted(found, key=lambda f: (-f["explains_us"], _ORDER[f["severity"]], f["rule"]))
    top: list[dict] = []
    for f in ordered:
        parent = next((t for t in ordered if t is not f and t["rule"] in f["caused_by"]
                       and f["rule"] not in t["caused_by"]
                       and t["explains_us"] >= min_parent_us), None)
        if parent is None:
            top.append(f)
        else:
            f["because"] = f["caused_by"][parent["rule"]]
            parent["folded"].append(f)
    return top


def advise(stage_dir: Path, knobs: KernelKnobs | None = None) -> list[dict]:
    """Findings for one stage folder (the one holding parsed/), most time explained first.

    ``knobs``: the stage's kernel as it ran; without it no ``--set`` line is suggested.
    """
    st = Stage(Path(stage_dir), knobs)
    found = [f for rule in RULES for f in rule(st)]
    if any(f["rule"] == "dev_task_gaps" for f in found):
        # idle hand-overs between dev tasks ask for a larger stitch; a smaller one would
        # add hand-overs to speed up one build, so the first-task advice would contradict it
        found = [f for f in found if f["rule"] != "first_task_build"]
    window = st.window()
    if window > 0:
        for f in found:
            if f["explains_us"] < LOW_SHARE * window:
                f["severity"] = "low"
    shown = max(NO_TIME_US, MIN_SHARE * window) if window > 0 else 0.0
    ranked = rank(found, shown)
    if window > 0:
        # with the stage's task times at hand, a finding on top bounded to no measurable
        # time ("explains ≈ 0.00 us", or under 1 % of the window) names no bottleneck;
        # folded under another, it still says what to look at once that one is fixed
        ranked = [f for f in ranked if f["explains_us"] >= shown]
    return ranked


def all_findings(found: list[dict]) -> list[dict]:
    """Every finding, folded ones after their parent."""
    return [g for f in found for g in [f] + all_findings(f["folded"])]
