"""Fast unit tests of the report: embedding, charts, stage tables, advisor rules, rendering.

Every input is a small hand-made parsed/ folder, so the tests need neither the compiler
nor the simulator, and the advisor rules whose data the compiler does not emit yet
(reduce axes, GM block offsets) are exercised against the fields they read.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from pipeline.report import advisor, charts, lanes, stages
from pipeline.report.embed import script_json
from pipeline.report.render import render_index, render_study


# ---------------------------------------------------------------- hand-made tables
def tasks_df(rows: list[tuple]) -> pl.DataFrame:
    """rows: (core_type, core, start, dur, seq_no, task_id, label)."""
    return pl.DataFrame(
        [(1000 + 2 * c, f"{s}-0-{t}-0-0({lb})", st, d, s, t, lb, "", ct, c)
         for ct, c, st, d, s, t, lb in rows], orient="row",
        schema={"tid": pl.Int64, "name": pl.Utf8, "start_us": pl.Float64, "dur_us": pl.Float64,
                "seq_no": pl.Int64, "task_id": pl.Int64, "label": pl.Utf8,
                "hash_order": pl.Utf8, "core_type": pl.Utf8, "core": pl.Int64},
    ).with_columns(end_us=pl.col("start_us") + pl.col("dur_us"))


def topo_df(rows: list[tuple]) -> pl.DataFrame:
    """rows: (seq_no, task_id, leaf_hash, core_type, [successor task ids])."""
    return pl.DataFrame(rows, orient="row", schema={
        "seq_no": pl.Int64, "task_id": pl.Int64, "leaf_hash": pl.UInt64, "core_type": pl.Int64,
        "succ": pl.List(pl.Int64)})


def phases_df(rows: list[tuple]) -> pl.DataFrame:
    """rows: (lane_type, block, phase, round, idx, end_us)."""
    return pl.DataFrame([(lt, b, p, r, i, int(e * 50), e) for lt, b, p, r, i, e in rows],
                        orient="row", schema={
                            "lane_type": pl.Utf8, "block": pl.Int64, "phase": pl.Utf8,
                            "round": pl.Int64, "idx": pl.Int64, "end_cycles": pl.Int64,
                            "end_us": pl.Float64})


def ops_df(rows: list[dict]) -> pl.DataFrame:
    base = {"func_hash": 1, "func_name": "f", "opmagic": 0, "opcode": "", "label": "",
            "axis": None, "in_shape": None, "in_offset": None, "raw": None, "raw_shape": None,
            "l1_hash_order": ""}
    return pl.DataFrame([{**base, **r} for r in rows], schema={
        "func_hash": pl.UInt64, "func_name": pl.Utf8, "opmagic": pl.Int64, "opcode": pl.Utf8,
        "label": pl.Utf8, "axis": pl.Int64, "in_shape": pl.List(pl.Int64),
        "in_offset": pl.List(pl.Int64), "raw": pl.Int64, "raw_shape": pl.List(pl.Int64),
        "l1_hash_order": pl.Utf8})


def write_stage(stage_dir: Path, metrics: dict | None = None, **tables) -> Path:
    parsed = stage_dir / "parsed"
    parsed.mkdir(parents=True, exist_ok=True)
    (parsed / "metrics.json").write_text(json.dumps(metrics or {}), encoding="utf-8")
    for name, df in tables.items():
        if isinstance(df, pl.DataFrame):
            df.write_parquet(parsed / f"{name}.parquet")
        else:
            (parsed / f"{name}.json").write_text(json.dumps(df), encoding="utf-8")
    return stage_dir


def aiv_lanes(n: int) -> list[tuple]:
    return [("SCHED1-AIV", b, "BEGIN", 0, None, 0.0) for b in range(1, n + 1)]


def rules(found: list[dict]) -> set[str]:
    return {f["rule"] for f in found}


# ---------------------------------------------------------------- embedding
def test_script_json_cannot_close_the_script_element():
    value = {"label": "</script><script>alert(1)</script>", "amp": "a&b", "sep": "\u2028"}
    text = str(script_json(value))
    assert "</" not in text and "<" not in text and "&" not in text
    assert json.loads(text) == value


def test_script_json_is_byte_stable():
    assert str(script_json({"b": 1, "a": [1.5, "x"]})) == str(script_json({"a": [1.5, "x"],
                                                                            "b": 1}))


# ---------------------------------------------------------------- charts
def test_stage_bars_draw_values_from_zero_and_changes_as_text():
    svg = str(charts.stage_bars(["<b>s1</b>", "s2"], [10.0, 4.0], [20.0, 25.0]))
    assert svg.startswith("<svg") and "time (us)" in svg
    assert "<b>" not in svg and "&lt;b&gt;s1&lt;/b&gt;" in svg
    zero = float(re.search(r'data-zero="([\d.]+)"', svg).group(1))
    top = float(re.search(r'data-top="([\d.]+)"', svg).group(1))
    vmax = float(re.search(r'data-vmax="([\d.]+)"', svg).group(1))
    bars = re.findall(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)" '
                      r'fill="#[0-9a-f]+" data-stage="[^"]*" data-series="(\w+)" '
                      r'data-value="([\d.]+)"', svg)
    assert [float(b[3]) for b in bars] == [10.0, 20.0, 4.0, 25.0]
    for y, height, _, value in bars:        # each bar runs from zero up to its value
        assert abs(float(height) - (zero - top) * float(value) / vmax) < 0.01
        assert abs(float(y) + float(height) - zero) < 0.01
    # the change is text under the second stage: kernel gained, e2e regressed
    assert "kernel −60.0 %" in svg and "e2e +25.0 %" in svg
    assert f'fill="{charts.BETTER}" class="change"' in svg
    assert f'fill="{charts.WORSE}" class="change"' in svg


def test_stage_bars_draw_a_racing_stage_range_as_a_whisker_on_the_scale_of_its_bar():
    """A raced stage's (smallest, largest) run is a whisker across its bar; the axis grows to
    hold the largest run, and a stage that did not race has none."""
    svg = str(charts.stage_bars(["s1", "s2"], [10.0, 4.0], [20.0, 25.0],
                                {"kernel_us": [(9.0, 31.0), None], "e2e_us": [None, None]}))
    zero = float(re.search(r'data-zero="([\d.]+)"', svg).group(1))
    top = float(re.search(r'data-top="([\d.]+)"', svg).group(1))
    vmax = float(re.search(r'data-vmax="([\d.]+)"', svg).group(1))
    assert vmax >= 31.0
    whiskers = re.findall(r'<g class="race" data-stage="(\w+)" data-series="(\w+)" '
                          r'data-min="([\d.]+)" data-max="([\d.]+)"[^>]*>.*?'
                          r'<line x1="[\d.]+" y1="([\d.]+)" x2="[\d.]+" y2="([\d.]+)"/>', svg)
    assert [(w[0], w[1], float(w[2]), float(w[3])) for w in whiskers] == \
        [("s1", "kernel_us", 9.0, 31.0)]
    hi_y, lo_y = float(whiskers[0][4]), float(whiskers[0][5])
    assert abs(zero - lo_y - (zero - top) * 9.0 / vmax) < 0.01
    assert abs(zero - hi_y - (zero - top) * 31.0 / vmax) < 0.01


def test_sweep_chart_overlays_documented_points():
    sweep = charts.Sweep("runtime_options.stitch_function_max_num", ["a", "b", "c"],
                         [1, 128, 512], [1200.0, 190.0, 140.0], [1600.0, 800.0, 990.0],
                         [{"kernel_us": 1230.0, "e2e_us": 1590.0}, {}, {"e2e_us": 977.0}])
    svg = str(charts.sweep_chart(sweep))
    assert svg.count("<polyline") == 2
    assert svg.count("documented") >= 3 and "log scale" in svg
    assert "stitch_function_max_num" in svg and "time (us)" in svg


def test_sweep_chart_draws_race_ranges_of_the_stages_that_raced():
    sweep = charts.Sweep("runtime_options.stitch_function_max_num", ["a", "b", "c"],
                         [1, 128, 512], [1200.0, 250.0, 210.0], [1600.0, 800.0, 990.0],
                         [{}, {}, {}], {"kernel_us": [None, (240.0, 350.0), (190.0, 260.0)],
                                        "e2e_us": [None, None, None]})
    svg = str(charts.sweep_chart(sweep))
    found = re.findall(r'<g class="race" data-stage="(\w)" data-series="(\w+)" '
                       r'data-min="([\d.]+)" data-max="([\d.]+)"', svg)
    assert found == [("b", "kernel_us", "240.00", "350.00"), ("c", "kernel_us", "190.00", "260.00")]
    assert "whiskers: race range" in svg
    plain = str(charts.sweep_chart(charts.Sweep("k", ["a", "b"], [1, 2], [1.0, 2.0], [3.0, 4.0],
                                                [{}, {}])))
    assert 'class="race"' not in plain and "whiskers" not in plain


def test_core_bars_show_busy_and_idle():
    svg = str(charts.core_bars([("AIV_25", 3.0), ("AIV_26", 1.0)], 4.0))
    assert "busy 3.00 us, idle 1.00 us" in svg and "time within the kernel window (us)" in svg


def test_nice_max():
    assert charts.nice_max(0) == 1.0
    assert charts.nice_max(470.76) == 500
    assert charts.nice_max(1590) == 2000


# ---------------------------------------------------------------- stage helpers
def _row(name, knobs, k, e, documented=None):
    return {"name": name, "knobs": knobs, "metrics": {"kernel_us": k, "e2e_us": e},
            "documented": documented or {}}


def test_sweeps_need_one_numeric_knob_changing():
    s = "runtime_options.stitch_function_max_num"
    rows = [_row("s1", {s: 1}, 10, 20, {"kernel_us": 12}), _row("s128", {s: 128}, 5, 9),
            _row("s512", {s: 512}, 4, 11), _row("tile", {s: 512, "tiles.vec": [16]}, 3, 8)]
    found = stages.sweeps(rows)
    assert len(found) == 1
    assert found[0].knob == s and found[0].x == [1.0, 128.0, 512.0]
    assert found[0].documented[0] == {"kernel_us": 12}
    assert stages.sweeps(rows[2:]) == []          # a list-valued knob is no curve


def test_changed_knobs():
    assert stages.changed(None, {"a": 1}) == {"a": 1}
    assert stages.changed({"a": 1, "b": 2}, {"a": 3}) == {"a": 3, "b": "(default)"}


def test_pmu_summary_by_core_type():
    pmu = pl.DataFrame({"core_type": ["AIV", "AIV", "AIC"], "total_cycles": [100, 100, 50],
                        "pipe_vector": [50, 30, 0], "pipe_mte2": [20, 20, 25]})
    summary = {r["core_type"]: r for r in stages.pmu_summary(pmu)}
    assert summary["AIV"]["pipes"]["vector"] == pytest.approx(0.4)
    assert summary["AIC"]["pipes"]["mte2"] == pytest.approx(0.5)
    assert stages.pmu_summary(None) == [] and stages.pmu_summary(pmu.drop("pipe_vector",
                                                                          "pipe_mte2")) == []


def test_analyze_rounds_shared_or_per_round_header(tmp_path):
    (tmp_path / "analyze.json").write_text(json.dumps(
        {"header": ["Compute Units", "X"], "rounds": [{"name": "round1", "rows": [["A", "1"]]}]}))
    assert stages.analyze_rounds(tmp_path) == [{"name": "round1", "header": ["Compute Units", "X"],
                                                "rows": [["A", "1"]]}]
    (tmp_path / "analyze.json").write_text(json.dumps([{"header": ["H"], "rows": [["v"]]}]))
    assert stages.analyze_rounds(tmp_path)[0]["name"] == "round1"
    assert stages.analyze_rounds(tmp_path / "missing") == []


# ---------------------------------------------------------------- swimlane payload
def test_payload_lanes_edges_and_aicpu():
    tasks = tasks_df([("AIV", 26, 10.0, 1.0, 0, 1, "b"), ("AIV", 25, 10.0, 2.0, 0, 0, "a"),
                      ("AIC", 1, 13.0, 1.0, 0, 2, "c")])
    topo = topo_df([(0, 0, 1, 0, [2]), (0, 1, 1, 0, [2]), (0, 2, 2, 1, [])])
    phases = phases_df([("AICPU-CTRL", 0, "BEGIN", 0, None, 5.0),
                        ("AICPU-CTRL", 0, "DEV_TASK_BUILD", 0, 0, 9.0),
                        ("AICPU-CTRL", 0, "EXIT", 0, None, 20.0),
                        ("AICPU-CTRL", 0, "BEGIN", 1, None, 500.0)])    # a later round: left out
    p = lanes.payload(tasks, topo, phases)
    assert p["lanes"] == ["AIC_1", "AIV_25", "AIV_26", "AICPU-CTRL-0"]
    assert p["coreLanes"] == 3 and p["n"] == 6
    names = p["names"].split("\n")
    assert names[:3] == ["0-0-2-0-0(c)", "0-0-0-0-0(a)", "0-0-1-0-0(b)"]
    assert names[3:] == ["BEGIN_0", "DEV_TASK_BUILD_0(0)", "EXIT_0"]
    import base64
    import numpy as np
    src = np.frombuffer(base64.b64decode(p["src"]["b64"]), "<u4").tolist()
    dst = np.frombuffer(base64.b64decode(p["dst"]["b64"]), "<u4").tolist()
    assert sorted(zip(src, dst)) == [(1, 0), (2, 0)]          # a -> c and b -> c


# ---------------------------------------------------------------- advisor
def test_dev_task_gaps_fire_on_idle_hand_overs(tmp_path):
    gappy = [("AIV", 25, 10.0 * s, 2.0, s, 0, "x") for s in range(4)]      # 8 us idle of 32
    found = advisor.advise(write_stage(tmp_path / "a", tasks=tasks_df(gappy)))
    f = next(f for f in found if f["rule"] == "dev_task_gaps")
    assert "4 dev tasks" in f["evidence"] and "Stitch 调优" in f["guide_section"]
    assert set(advisor.advise(tmp_path / "a")[0]) >= {"rule", "title", "evidence",
                                                       "guide_section", "severity"}
    tight = [("AIV", 25, 2.0 * s, 2.0, s, 0, "x") for s in range(4)]
    assert "dev_task_gaps" not in rules(advisor.advise(write_stage(tmp_path / "b",
                                                                   tasks=tasks_df(tight))))


def test_a_finding_on_top_that_explains_no_time_is_left_out(tmp_path):
    """Twelve short isomorphic tasks back to back on four cores: the small-subgraph rule
    fires but the idle time it blames is none, so a timed stage lists nothing."""
    rows = [("AIV", 25 + c, 1.5 * j, 1.5, 0, 3 * c + j, "add") for c in range(4)
            for j in range(3)]
    topo = topo_df([(0, i, 7, 0, []) for i in range(12)])
    st = advisor.Stage(write_stage(tmp_path / "tight", tasks=tasks_df(rows), topo=topo))
    assert [f["explains_us"] for f in advisor.small_isomorphic(st)] == [0.0]
    assert advisor.advise(tmp_path / "tight") == []


def test_small_isomorphic_groups_pick_vec_or_cube(tmp_path):
    rows = [("AIV", 25 + i % 4, float(i), 1.5, 0, i, "add") for i in range(12)]
    rows += [("AIC", 1 + i % 4, float(i), 3.0, 0, 100 + i, "mm") for i in range(9)]
    topo = topo_df([(0, i, 7, 0, []) for i in range(12)] +
                   [(0, 100 + i, 9, 1, []) for i in range(9)])
    found = advisor.advise(write_stage(tmp_path / "s", tasks=tasks_df(rows), topo=topo))
    vec = next(f for f in found if f["rule"] == "small_isomorphic_vec")
    cube = next(f for f in found if f["rule"] == "small_isomorphic_cube")
    assert "12 leaf tasks" in vec["evidence"] and "Vector 广度方向合图" in vec["guide_section"]
    assert "vec_nbuffer_setting" in vec["action"]
    assert "Matmul 广度方向合图" in cube["guide_section"] and "cube_nbuffer" in cube["action"]
    long_ = [("AIV", 25, 20.0 * i, 15.0, 0, i, "big") for i in range(12)]
    assert not {"small_isomorphic_vec"} & rules(advisor.advise(
        write_stage(tmp_path / "l", tasks=tasks_df(long_))))


def test_few_vector_cores(tmp_path):
    rows = [("AIV", 25 + i % 3, float(i), 1.0, 0, i, "x") for i in range(6)]
    st = write_stage(tmp_path / "f", tasks=tasks_df(rows), phases=phases_df(aiv_lanes(48)))
    f = next(f for f in advisor.advise(st) if f["rule"] == "few_vector_cores")
    assert "3 of 48 AIV cores" in f["evidence"] and "不到一半的Vector核" in f["guide_section"]
    st = write_stage(tmp_path / "g", tasks=tasks_df(rows), phases=phases_df(aiv_lanes(4)))
    assert "few_vector_cores" not in rules(advisor.advise(st))


def test_reduce_axis_split_reads_program_fields(tmp_path):
    split = ops_df([{"opcode": "ROWSUM", "axis": 1, "in_shape": [56, 256],
                     "raw_shape": [56, 1024], "label": "rms", "func_name": "rms_leaf"}])
    f = next(f for f in advisor.advise(write_stage(tmp_path / "r", ops=split))
             if f["rule"] == "reduce_axis_split")
    assert "[56, 1024]" in f["evidence"] and "[56, 256]" in f["evidence"]
    assert "Vector 初始 Tiling 配置" in f["guide_section"] and f["severity"] == "high"
    whole = ops_df([{"opcode": "ROWSUM", "axis": -1, "in_shape": [8, 1024],
                     "raw_shape": [56, 1024]}])
    assert advisor.advise(write_stage(tmp_path / "w", ops=whole)) == []
    assert advisor.advise(write_stage(tmp_path / "n", ops=ops_df([{"opcode": "ADDS"}]))) == []


def test_many_to_many_fires_on_misaligned_tiles_only(tmp_path):
    # Sqrt tiles 0..2 feed Cast tiles 10, 11 three-to-two: every link crosses
    m2m = topo_df([(0, 0, 1, 0, [10]), (0, 1, 1, 0, [10, 11]), (0, 2, 1, 0, [11]),
                   (0, 3, 1, 0, [10, 11]), (0, 10, 2, 0, []), (0, 11, 2, 0, [])])
    f = next(f for f in advisor.advise(write_stage(tmp_path / "m", topo=m2m))
             if f["rule"] == "many_to_many")
    assert "6 dependencies" in f["evidence"] and "多对多依赖" in f["guide_section"]
    one = topo_df([(0, i, 1, 0, [10 + i]) for i in range(6)] +
                  [(0, 10 + i, 2, 0, []) for i in range(6)])
    fan_in = topo_df([(0, i, 1, 0, [10]) for i in range(6)] + [(0, 10, 2, 0, [])])
    # a running state: step i's producer feeds consumer i, and producer 0 also consumer 1
    state = topo_df([(0, 0, 1, 0, [10, 11])] + [(0, i, 1, 0, [10 + i]) for i in range(1, 8)]
                    + [(0, 10 + i, 2, 0, []) for i in range(8)])
    for name, topo in (("one", one), ("fan_in", fan_in), ("state", state)):
        assert "many_to_many" not in rules(advisor.advise(write_stage(tmp_path / name,
                                                                      topo=topo)))


def test_many_to_many_is_one_finding_per_consumer_and_names_a_cube_producer(tmp_path):
    """Two producer groups feeding one consumer group many-to-many share the time the
    consumer runs: one finding, which names the other producer; a matmul producer's tiles
    are its cube TileShape's, not a vector TileShape; the same ops split over two leaf
    functions are no pair to align."""
    links = [(0, 0, 1, 0, [10]), (0, 1, 1, 0, [10, 11]), (0, 2, 1, 0, [11]),
             (0, 3, 1, 0, [10, 11])]
    twice = topo_df(links + [(s, t + 4, 3, 0, succ) for s, t, _, _, succ in links]
                    + [(0, 10, 2, 0, []), (0, 11, 2, 0, [])])
    tasks = tasks_df([("AIC", c, 0.0, 1.0, 0, t, "mm") for c, t in enumerate(range(4))]
                     + [("AIV", c, 0.0, 1.0, 0, t + 4, "dq") for c, t in enumerate(range(4))]
                     + [("AIV", 9, 2.0, 1.0, 0, 10, "rope"), ("AIV", 9, 3.0, 1.0, 0, 11, "rope")])
    found = [f for f in advisor.advise(write_stage(tmp_path / "two", topo=twice, tasks=tasks))
             if f["rule"] == "many_to_many"]
    assert len(found) == 1 and "1 other producer group" in found[0]["evidence"]
    # the larger producer group, the first on a tie (leaf 1, the matmul), is named
    action = found[0]["action"]
    assert "'rope'" in action and "'mm' matmul writes" in action and "cube TileShape" in action
    same = tasks.with_columns(label=pl.lit("dq"))
    assert "many_to_many" not in rules(advisor.advise(
        write_stage(tmp_path / "same", topo=twice, tasks=same)))


def test_a_cause_folds_its_symptom_even_when_the_symptom_explains_more():
    """rank: the few-cores symptom explains more time than the dev-task gaps that cause
    it, yet it is the gaps' finding that comes first, with the symptom under it."""
    gaps = advisor._finding("dev_task_gaps", "gaps", "e", "stitch", "high", "a", 400.0, "x")
    few = advisor._finding("few_vector_cores", "few", "e", "tile_smaller", "high", "a", 500.0,
                           "x", caused_by={"dev_task_gaps": "small dev tasks"})
    (top,) = advisor.rank([few, gaps])
    assert top["rule"] == "dev_task_gaps"
    assert [f["rule"] for f in top["folded"]] == ["few_vector_cores"]
    assert top["folded"][0]["because"] == "small dev tasks"
    # a cause too small to show (advise leaves it out) folds nothing: the symptom stays
    small = advisor._finding("dev_task_gaps", "gaps", "e", "stitch", "low", "a", 0.1, "x")
    few["folded"], few["because"] = [], ""
    assert [f["rule"] for f in advisor.rank([few, small], 1.0)] == [
        "few_vector_cores", "dev_task_gaps"]


def test_repeated_gm_loads_count_loading_tasks(tmp_path):
    ops = ops_df([{"func_hash": 5, "func_name": "mm_a", "opcode": "COPY_IN", "raw": 3,
                   "in_offset": [0, 0], "in_shape": [128, 64]},
                  {"func_hash": 6, "func_name": "mm_b", "opcode": "COPY_IN", "raw": 3,
                   "in_offset": [0, 0], "in_shape": [128, 64]},
                  {"func_hash": 6, "func_name": "mm_b", "opcode": "COPY_IN", "raw": 4,
                   "in_offset": [0, 64], "in_shape": [64, 64]}])
    topo = topo_df([(0, 0, 5, 1, []), (0, 1, 6, 1, [])])
    f = next(f for f in advisor.advise(write_stage(tmp_path / "g", ops=ops, topo=topo))
             if f["rule"] == "repeated_gm_loads")
    assert "loaded 2 times" in f["evidence"] and "mm_a, mm_b" in f["evidence"]
    assert "L1Reuse" in f["guide_section"] and "cube_l1_reuse_setting" in f["action"]
    symbolic = ops_df([{"opcode": "COPY_IN", "raw": 3, "in_shape": [128, 64]}] * 3)
    assert advisor.advise(write_stage(tmp_path / "s", ops=symbolic)) == []


def _ctrl(build_end: float, exit_: float = 100.0) -> pl.DataFrame:
    return phases_df([("AICPU-CTRL", 0, "BEGIN", 0, None, 0.0),
                      ("AICPU-CTRL", 0, "INIT", 0, None, 2.0),
                      ("AICPU-CTRL", 0, "DEV_TASK_BUILD", 0, 0, build_end),
                      ("AICPU-SCHED", 1, "DEV_TASK_SEND_FIRST_LEAF_TASK", 0, None,
                       build_end + 1), ("AICPU-CTRL", 0, "EXIT", 0, None, exit_)])


def test_first_task_latency_dominated_by_build(tmp_path):
    f = next(f for f in advisor.advise(write_stage(tmp_path / "b", phases=_ctrl(40.0)))
             if f["rule"] == "first_task_build")
    assert "38.00 us" in f["evidence"] and "DEV_TASK_BUILD(0)" in f["evidence"]
    assert "Stitch 调优" in f["guide_section"]
    assert advisor.advise(write_stage(tmp_path / "q", phases=_ctrl(3.0))) == []


def test_first_task_advice_only_where_a_lower_stitch_changes_something(tmp_path):
    """Lowering the stitch shortens the first build only when the first dev task holds
    more than one loop body; and where idle hand-overs already ask for a larger stitch,
    the smaller one the first-task rule would ask for is not offered beside it."""
    def first(stage_dir):
        return [f for f in advisor.advise(stage_dir) if f["rule"] == "first_task_build"]
    one_each = {"loop_bodies": 8, "root_calls": 8, "dev_tasks": 8}
    assert first(write_stage(tmp_path / "one", one_each, phases=_ctrl(40.0))) == []
    several = {"loop_bodies": 32, "root_calls": 32, "dev_tasks": 1}
    assert len(first(write_stage(tmp_path / "many", several, phases=_ctrl(40.0)))) == 1
    gappy = tasks_df([("AIV", 25, 10.0 * s, 2.0, s, 0, "x") for s in range(4)])
    found = advisor.advise(write_stage(tmp_path / "both", {**several, "dev_tasks": 4},
                                       phases=_ctrl(40.0), tasks=gappy))
    assert "dev_task_gaps" in rules(found) and "first_task_build" not in rules(found)


def test_advise_tolerates_an_empty_stage(tmp_path):
    assert advisor.advise(write_stage(tmp_path / "e")) == []
    assert advisor.advise(tmp_path / "nothing") == []


# ---------------------------------------------------------------- rendering
STUDY = """name: demo
description: a <demo> study
kernel: k
stages:
  - name: s1
    description: out of box
    set: {runtime_options.stitch_function_max_num: 1}
    documented: {kernel_us: 30.0, e2e_us: 45.0, l2_hit_rate: 0.75, aic_mac_ratio: 0.8}
  - name: s2
    description: stitch 2
    set: {runtime_options.stitch_function_max_num: 2}
  - name: s4
    description: stitch 4
    set: {runtime_options.stitch_function_max_num: 4}
"""


@pytest.fixture
def study(tmp_path) -> tuple[Path, Path]:
    path = tmp_path / "demo.yaml"
    path.write_text(STUDY, encoding="utf-8")
    results = tmp_path / "results"
    for i, name in enumerate(["s1", "s2", "s4"]):
        k = 2 ** i
        rows = [("AIV", 25 + t % 2, 5.0 * t / k, 1.0, t // k, t,
                 "<script>evil()</script>" if t == 0 else "add") for t in range(8)]
        metrics = {"kernel_us": 40.0 / k, "e2e_us": 50.0 / k,
                   "aicore_utilization": 0.5, "root_calls": 8, "dev_tasks": 8 // k,
                   "leaf_tasks": 8, "hbm_read_bytes": 1024, "hbm_write_bytes": 1024,
                   "l2_hit_rate": 0.25, "aic_mac_ratio": 0.6 / k, "aiv_vec_ratio": 0.1}
        extra = {"analyze": {"header": ["Compute Units", "Total"],
                             "rounds": [{"name": "round1", "rows": [["AICore", "9.00"]]}]},
                 "pmu": pl.DataFrame({"core_type": ["AIV"], "total_cycles": [100],
                                      "pipe_vector": [40]}),
                 "pipe_timeline": pl.DataFrame({"core": [0, 0], "pipe": ["MTE2", "VECTOR"],
                                                "start_us": [0.0, 1.0],
                                                "dur_us": [1.0, 2.0]})} if i == 2 else {}
        write_stage(results / "demo" / name, metrics, tasks=tasks_df(rows),
                    topo=topo_df([(r[4], r[5], 1, 0, []) for r in rows]),
                    phases=phases_df([("AICPU-CTRL", 0, "BEGIN", 0, None, 0.0),
                                      ("AICPU-CTRL", 0, "EXIT", 0, None, 60.0)]), **extra)
    return path, results


def test_render_study_sections_and_escaping(study):
    path, results = study
    out = results / "demo" / "report.html"
    render_study(path, results / "demo", out)
    html = out.read_text(encoding="utf-8")
    assert "<script>evil()" not in html and "&lt;script&gt;evil()&lt;/script&gt;" in html
    assert "a &lt;demo&gt; study" in html
    assert html.count('class="swimlane"') == 4            # three stages + one pipe timeline
    assert html.count("<svg") >= 1 + 1 + 3                 # waterfall, sweep, per-core bars
    assert "Knob sweeps" in html and "documented" in html
    assert "s1/run/merged_swimlane.json" in html and "ui.perfetto.dev" in html
    assert html.count("machine_perf_trace.py analyze") == 1     # only s4 has analyze.json
    assert "pipe utilisation by core type" in html and "40.0%" in html
    assert "2.00×" in html and "4.00×" in html             # speed-ups vs first stage
    # s1 documents its times: the stage table gives them and the model's error beside its own
    table = html.split('id="stage-table"')[1].split("</table>")[0]
    s1, s2 = table.split('data-stage="s1"')[1].split('data-stage="s2"')
    assert "doc 30 (+33.3 %)" in s1 and "doc 45 (+11.1 %)" in s1
    # a documented share (the L2 hit rate) beside the simulated one, apart in points
    assert "doc 75.0% (-50.0 points)" in s1
    assert "doc " not in s2
    # the pipe busy shares of every stage, a documented one beside the model's in points
    pipes = html.split('id="pipe-table"')[1].split("</table>")[0]
    assert pipes.count("<tr>") == 4                        # a header and three stages
    assert "60.0%" in pipes and "30.0%" in pipes and "15.0%" in pipes
    assert "doc 80.0% (-20.0 points)" in pipes and pipes.count("doc ") == 1
    # the only URLs: the SVG namespace (an identifier, never fetched) and the Perfetto hint
    assert re.search(r"https?://(?!ui\.perfetto\.dev|www\.w3\.org/2000/svg)", html) is None
    assert "<script src" not in html and "<link" not in html


def test_a_racing_stage_shows_its_median_and_range_beside_the_single_run(study):
    """A stage that ran the chip's race variants gives, under each time, the range and the
    median with the median's error against a documented figure; the table says what the
    race is once; stages without a race show nothing of it."""
    path, results = study

    def race(stage, kernel, e2e):
        """Give ``stage`` race metrics: (median, min, max) per time."""
        metrics_path = results / "demo" / stage / "parsed" / "metrics.json"
        m = json.loads(metrics_path.read_text())
        m["race_runs"] = 7
        for key, values in (("kernel_us", kernel), ("e2e_us", e2e)):
            m.update(zip((f"{key}_race_median", f"{key}_race_min", f"{key}_race_max"), values))
        metrics_path.write_text(json.dumps(m))

    race("s1", (33.0, 31.5, 52.25), (47.0, 46.0, 60.0))
    # s2 (kernel 20, e2e 25) raced too: its kernel range meets s1's, its e2e range does not
    race("s2", (20.0, 19.0, 32.0), (25.0, 24.0, 27.0))
    out = results / "demo" / "report.html"
    render_study(path, results / "demo", out)
    html = out.read_text(encoding="utf-8")
    table = html.split('id="stage-table"')[1].split("</table>")[0]
    s1, rest = table.split('data-stage="s1"')[1].split('data-stage="s2"')
    s2, s4 = rest.split('data-stage="s4"')
    assert "race 31.5–52.2, median 33.0 (+10.0 %)" in s1      # documented 30
    assert "race 46.0–60.0, median 47.0 (+4.4 %)" in s1       # documented 45
    assert "race 19.0–32.0, median 20.0" in s2
    assert "race " not in s4
    # s2's kernel change against s1 (first and previous) may be the race; its e2e change not
    assert s2.count("within race") == 2 and "within race" not in s1 + s4
    assert "The study races" in html
    bars = html.split('class="stage-bars"')[1].split("</svg>")[0]
    assert bars.count('<g class="race"') == 4       # both times of s1 and s2
    sweep = html.split("Knob sweeps")[1].split("</svg>")[0]
    assert sweep.count('<g class="race"') == 4      # the stitch sweep s1, s2, s4


def test_render_is_deterministic(study):
    path, results = study
    render_study(path, results / "demo", results / "a.html")
    render_study(path, results / "demo", results / "b.html")
    assert (results / "a.html").read_bytes() == (results / "b.html").read_bytes()


def test_render_index_headlines(study):
    path, results = study
    render_study(path, results / "demo", results / "demo" / "report.html")
    render_index(results, [path], results / "index.html")
    html = (results / "index.html").read_text(encoding="utf-8")
    assert 'href="demo/report.html"' in html and "demo/report.html#stage-s4" in html
    assert "4.00×" in html and "40.00" in html and "12.50" in html and "10.00" in html


def test_stages_of_another_workload_are_not_compared(study):
    """s1 runs one problem, s2 and s4 another: s2 starts its workload (no speed-up against
    s1, whose problem it does not run), s4 compares with s2; the index's best stage is the
    first workload's, and it still counts every stage."""
    path, results = study
    text = path.read_text()
    for stage, load in (("s1", "small"), ("s2", "big"), ("s4", "big")):
        text = text.replace(f"  - name: {stage}\n", f"  - name: {stage}\n    workload: {load}\n")
    path.write_text(text)
    render_study(path, results / "demo", results / "demo" / "report.html")
    html = (results / "demo" / "report.html").read_text(encoding="utf-8")
    rows = {name: html.split(f'<tr data-stage="{name}">')[1].split("</tr>")[0]
            for name in ("s1", "s2", "s4")}
    assert "workload big (first)" in rows["s2"] and "(first)" not in rows["s4"]
    assert rows["s2"].count("2.00×") == 0 and rows["s4"].count("2.00×") == 4   # s4 vs s2
    render_index(results, [path], results / "index.html")
    index = (results / "index.html").read_text(encoding="utf-8")
    row = index.split('<tr data-study="demo">')[1].split("</tr>")[0]
    assert "#stage-s1" in row and "<td>3</td>" in row
    from simcore.spec.study import load_study
    path.write_text(text.replace("    workload: small\n", ""))
    with pytest.raises(Exception, match="names no workload"):
        load_study(path)


def test_the_index_compares_racing_stages_by_their_race_medians(study):
    """When every stage of a study raced, the index picks the best stage and gives the
    times and speed-ups by race median (a single run is one draw), and marks a speed-up
    whose two race ranges overlap as within the race."""
    path, results = study
    medians = {"s1": ((36.0, 18.0, 45.0), (48.0, 45.0, 60.0)),
               "s2": ((19.0, 18.0, 25.0), (21.0, 20.0, 23.0)),
               "s4": ((21.0, 17.0, 26.0), (24.0, 22.0, 30.0))}
    for stage, times in medians.items():
        metrics_path = results / "demo" / stage / "parsed" / "metrics.json"
        m = json.loads(metrics_path.read_text())
        m["race_runs"] = 7
        for key, values in zip(("kernel_us", "e2e_us"), times):
            m.update(zip((f"{key}_race_median", f"{key}_race_min", f"{key}_race_max"), values))
        metrics_path.write_text(json.dumps(m))
    render_study(path, results / "demo", results / "demo" / "report.html")
    render_index(results, [path], results / "index.html")
    html = (results / "index.html").read_text(encoding="utf-8")
    row = html.split('<tr data-study="demo">')[1].split("</tr>")[0]
    assert "#stage-s2" in row            # best e2e median (21), though s4's single run is faster
    cells = re.findall(r"<td>([^<]*)(?:<span[^>]*>([^<]*)</span>)?</td>", row)
    assert [c[0].strip() for c in cells[1:]] == ["36.00", "48.00", "19.00", "21.00", "1.89×",
                                                 "2.29×"]
    # kernel: s1's range 18-45 meets s2's 18-25; e2e: 45-60 against 20-23 does not
    assert [c[1] for c in cells[-2:]] == ["within race", ""]
    assert "median over the chip's race variants" in html


def test_index_says_which_target_builds_an_unbuilt_study(tmp_path):
    """A study only configs/nightly.yaml names is built by `snakemake nightly`, not by the
    default target: the index says so rather than 'run snakemake'."""
    configs = tmp_path / "configs"
    (configs / "studies").mkdir(parents=True)
    (configs / "workflow.yaml").write_text("studies: [demo]\n", encoding="utf-8")
    (configs / "nightly.yaml").write_text("studies: [late]\n", encoding="utf-8")
    paths = []
    for name in ("demo", "late", "stray"):
        p = configs / "studies" / f"{name}.yaml"
        p.write_text(STUDY.replace("name: demo", f"name: {name}"), encoding="utf-8")
        paths.append(p)
    results = tmp_path / "results"
    results.mkdir()
    render_index(results, paths, results / "index.html")
    html = (results / "index.html").read_text(encoding="utf-8")
    rows = {name: html.split(f'<tr data-study="{name}">')[1].split("</tr>")[0]
            for name in ("demo", "late", "stray")}
    assert "<code>snakemake</code>" in rows["demo"]
    assert "<code>snakemake nightly</code>" in rows["late"]
    # a study neither file names: no target builds it until it is listed
    assert "nightly" not in rows["stray"] and "configs/workflow.yaml" in rows["stray"]


def test_the_report_says_how_far_the_models_times_go(study, tmp_path, monkeypatch):
    """The model's validation figures for the study's chip (docs/fidelity.json) head the
    report: fitted and held-out documented figures with their ratios; a quick validation or
    another chip's says nothing."""
    from pipeline.report import fidelity
    path, results = study
    figures = {"hardware": "dav_2201", "procedure": "cal.yaml", "quick": False,
               "in_fit": [{"case": "a/x", "metric": "kernel_us", "documented": 100.0,
                           "predicted": 104.0},
                          {"case": "a/y", "metric": "e2e_us", "documented": 50.0,
                           "predicted": 45.0}],
               "held_out": [{"case": "b/z", "metric": "kernel_us", "documented": 40.0,
                             "predicted": 10.0}],
               "rms_log": {"in_fit": 0.07, "held_out": 1.39, "leave_one_out": 0.1}}
    file = tmp_path / "fidelity.json"
    monkeypatch.setattr(fidelity, "FIDELITY_FILE", file)
    out = results / "demo" / "report.html"

    def section(data) -> str:
        file.write_text(json.dumps(data), encoding="utf-8")
        render_study(path, results / "demo", out)
        html = out.read_text(encoding="utf-8")
        return html.split('id="model-fidelity"')[1].split("</details>")[0] \
            if 'id="model-fidelity"' in html else ""
    text = section(figures)
    assert "2 fitted figures within -10.0 % at worst" in text      # a/y, the larger error
    assert "1 figure it never saw at 0.25–0.25× the chip's" in text
    assert "b/z" in text and "0.25×" in text and "no (held out)" in text
    assert "over every fit" not in text          # a file from before the spans says nothing
    spans = [{"case": "b/z", "metric": "kernel_us", "documented": 40.0, "low": 9.6,
              "high": 10.4, "fits": 9}]
    text = section({**figures, "held_out_refit_spread": spans})
    assert "over every fit" in text and "0.24–0.26× (9 fits)" in text
    assert section({**figures, "quick": True}) == ""
    assert section({**figures, "hardware": "dav_3510"}) == ""


def test_index_keeps_the_given_order_and_marks_unbuilt_studies(study, tmp_path):
    path, results = study
    render_study(path, results / "demo", results / "demo" / "report.html")
    other = tmp_path / "aaa.yaml"          # sorts first by name, listed second
    other.write_text(STUDY.replace("name: demo", "name: aaa"), encoding="utf-8")
    render_index(results, [path, other, path], results / "index.html")
    html = (results / "index.html").read_text(encoding="utf-8")
    order = re.findall(r'<tr data-study="(\w+)">', html)
    assert order == ["demo", "aaa"]                       # given order, each study once
    assert 'href="aaa/report.html"' not in html and "not built yet" in html
    assert "nightly/report.html" not in html
    (results / "nightly").mkdir()
    (results / "nightly" / "report.html").write_text("x", encoding="utf-8")
    render_index(results, [path], results / "index.html")
    assert 'href="nightly/report.html"' in (results / "index.html").read_text(encoding="utf-8")


def test_core_busy_draws_cores_that_ran_and_counts_the_chip():
    tasks = tasks_df([("AIV", 26, 0.0, 3.0, 0, 0, "x"), ("AIV", 26, 3.0, 1.0, 0, 1, "x")])
    phases = phases_df(aiv_lanes(2) + [("SCHED1-AIC", 3, "BEGIN", 0, None, 0.0)])
    busy, span, chip = stages.core_busy(tasks, phases)
    assert busy == [("AIV_26", 4.0)]
    assert span == 4.0
    assert chip == {"AIC": 1, "AIV": 3}       # the phase file's two AIV blocks + the one that ran
    assert stages.core_busy(None) == ([], 0.0, {})


def test_legend_palette_matches_the_viewer():
    js = (Path(__file__).resolve().parents[1] / "reports" / "static" / "swimlane.js").read_text()
    block = js[js.index("PALETTE = ["):js.index("];", js.index("PALETTE = ["))]
    assert re.findall(r'"(#[0-9a-f]{6})"', block) == lanes.PALETTE
    assert "</script" not in js.lower()
