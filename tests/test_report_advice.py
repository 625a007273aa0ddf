"""The report's reading of a stage: the knobs it ran, the advisor's ranking, folding and
--set lines, the task-graph diff, the run-file links and the phase-table reading.

Kernels are the shipped ones (configs/kernels); stages are hand-made parsed tables.
"""
from __future__ import annotations

import shlex
import json
from pathlib import Path

import pytest

from pipeline.report import advisor, graph, knobs, stages, suggest
from simcore.spec.errors import ConfigError
from simcore.spec.overrides import parse_assignment

from test_report import ops_df, phases_df, tasks_df, topo_df, write_stage

KERNELS = Path(__file__).resolve().parents[1] / "configs" / "kernels"
STITCH = "runtime_options.stitch_function_max_num"


@pytest.fixture
def msa():
    return knobs.resolve(KERNELS / "multi_stitch_add.yaml", {STITCH: 1})


@pytest.fixture
def glm():
    return knobs.resolve(KERNELS / "glm_attention.yaml",
                         {"tiles.v1": [16, 128], "tiles.v2": [16, 128]})


# ---------------------------------------------------------------- knobs and --set lines
def test_resolve_fills_defaults_and_overrides(msa):
    assert msa.value(STITCH) == 1                             # the stage's override
    assert msa.value("tiles.vec") == [64]                     # the kernel's own tile
    assert msa.value("pass_options.vec_nbuffer_setting") == {}   # the option's default
    assert knobs.resolve(KERNELS / "no_such_kernel.yaml", {}) is None


def test_set_lines_parse_back_to_the_key_and_value(msa):
    for key, value in ((STITCH, 64), ("tiles.vec", [32]),
                       ("pass_options.vec_nbuffer_setting", {"add_one": 2})):
        line = knobs.set_line(key, value)
        flag, assignment = shlex.split(line)
        assert flag == "--set" and parse_assignment(assignment) == (key, value)
        msa.check(line)


@pytest.mark.parametrize("line", [
    "--set 'tiles.<vec tile>=[32]'",                  # a placeholder
    "--set 'tiles.nope=[32]'",                        # no such tile in this kernel
    "--set runtime_options.no_such_option=1",         # no such option
    f"--set {STITCH}=0",                              # out of the option's range
    "--set 'tiles.vec=[32]' --set x=1",               # two assignments
    "tiles.vec=[32]",                                 # not a --set line
])
def test_check_rejects_what_would_not_run(msa, line):
    with pytest.raises(ConfigError):
        msa.check(line)


def test_suggestions_are_concrete_for_the_kernel(msa, glm):
    assert suggest.tile_halved(msa, "add_one") == ["--set 'tiles.vec=[32]'"]
    assert suggest.stitch_up(msa, 48) == [f"--set {STITCH}=64"]    # fills 48 cores
    assert suggest.stitch_up(msa, 1) == [f"--set {STITCH}=2"]      # at least doubles
    assert suggest.stitch_down(msa) == []                          # 1 cannot go lower
    wide = knobs.resolve(KERNELS / "multi_stitch_add.yaml", {STITCH: 128})
    assert suggest.stitch_down(wide) == [f"--set {STITCH}=64"]
    # 32 loop bodies in all: 64 would still hold all 32, so half of 32
    assert suggest.stitch_down(wide, 32) == [f"--set {STITCH}=16"]
    # 130: the first dev task holds 128 (the last 2), so half of 128
    assert suggest.stitch_down(wide, 130) == [f"--set {STITCH}=64"]
    assert suggest.stitch_down(wide, 1) == []
    # the softmax reduces axis -1 of tile v1: whole-axis tile, and halving spares that axis
    assert suggest.tile_whole_axis(glm, "softmax", 1, 512) == ["--set 'tiles.v1=[16,512]'"]
    wide = knobs.resolve(KERNELS / "glm_attention.yaml", {"tiles.v1": [128, 512]})
    assert suggest.tile_halved(wide, "softmax") == ["--set 'tiles.v1=[64,512]'"]
    assert suggest.merge(glm, "pass_options.cube_nbuffer_setting", "MM2", 4) == [
        "--set 'pass_options.cube_nbuffer_setting={\"-1\":1,\"MM2\":4}'"]
    assert suggest.tile_halved(msa, "no_such_label") == []
    assert suggest.tile_halved(None, "add_one") == []


def test_stage_names_that_contradict_their_knob():
    assert knobs.name_conflicts("stitch_64", {STITCH: 32}) == [
        f"the name says stitch 64 but the stage ran {STITCH}=32"]
    assert knobs.name_conflicts("stitch_64", {STITCH: 64}) == []
    assert knobs.name_conflicts("vec_32", {"tiles.vec": [32]}) == []
    assert len(knobs.name_conflicts("vec_32", {"tiles.vec": [64]})) == 1
    assert knobs.name_conflicts("sched_mode_1", {"runtime_options.device_sched_mode": 0})
    # words no knob carries, and knobs that are not numbers, say nothing
    assert knobs.name_conflicts("out_of_box", {STITCH: 32}) == []
    assert knobs.name_conflicts("m128_k64x256_n256", {"tiles.cube": {"m": [128, 128]}}) == []


# ---------------------------------------------------------------- advisor
def _stitch_one_stage(root: Path) -> Path:
    """128 dev tasks of one 0.68 us add each, all on AIV_25, 15 us apart; 48 AIV cores."""
    rows = [("AIV", 25, 16.0 * i, 0.68, i, 0, "add_one") for i in range(128)]
    topo = topo_df([(i, 0, 7, 0, []) for i in range(128)])
    lanes = [("SCHED1-AIV", b, "BEGIN", 0, None, 0.0) for b in range(25, 73)]
    return write_stage(root, {"leaf_tasks": 128, "root_calls": 128},
                       tasks=tasks_df(rows), topo=topo, phases=phases_df(lanes))


def test_advisor_ranks_by_time_and_folds_what_the_stitch_explains(tmp_path, msa):
    found = advisor.advise(_stitch_one_stage(tmp_path / "s1"), msa)
    assert [f["rule"] for f in found] == ["dev_task_gaps"]       # one finding on top
    top = found[0]
    assert top["tries"] == [f"--set {STITCH}=64"]
    folded = {f["rule"]: f for f in top["folded"]}
    assert set(folded) == {"few_vector_cores", "small_isomorphic_vec"}
    for f in folded.values():
        assert f["explains_us"] <= top["explains_us"] and "dev task" in f["because"]
    few = folded["few_vector_cores"]
    assert "0.043 AIV cores busy" in few["evidence"] and "0.0 AIV" not in few["evidence"]
    assert few["tries"] == ["--set 'tiles.vec=[32]'"]
    every = advisor.all_findings(found)
    assert [f["rule"] for f in every][0] == "dev_task_gaps" and len(every) == 3
    for f in every:                                   # usable without the kernel too
        assert "<" not in f["action"] and f["explains_us"] >= 0


def test_without_the_kernel_no_try_is_invented(tmp_path):
    for f in advisor.all_findings(advisor.advise(_stitch_one_stage(tmp_path / "s1"))):
        assert f["tries"] == []


def test_ranking_follows_the_time_explained():
    def f(rule, us, caused_by=None):
        return advisor._finding(rule, rule, "", "stitch", "medium", "", us, "", [], caused_by)
    ranked = advisor.rank([f("a", 5.0), f("b", 50.0), f("c", 20.0, {"b": "b explains c"}),
                           f("d", 30.0, {"z": "not present"})])
    assert [x["rule"] for x in ranked] == ["b", "d", "a"]
    assert [x["rule"] for x in ranked[0]["folded"]] == ["c"]
    assert ranked[0]["folded"][0]["because"] == "b explains c"


# ---------------------------------------------------------------- task graph
def _graph_stage(root: Path, funcs: dict[int, tuple[list[tuple[str, str]], int]]) -> Path:
    """funcs: leaf hash -> ([(label, opcode), ...], leaf tasks); all in one dev task."""
    ops, topo, t = [], [], 0
    for h, (seq, n) in funcs.items():
        ops += [{"func_hash": h, "func_name": f"f{h}", "opmagic": i, "opcode": op, "label": lb}
                for i, (lb, op) in enumerate(seq)]
        topo += [(0, t + i, h, 0, []) for i in range(n)]
        t += n
    return write_stage(root, ops=ops_df(ops), topo=topo_df(topo))


def test_graph_diff_names_merges_and_task_counts(tmp_path):
    before = _graph_stage(tmp_path / "a", {1: ([("sm", "MUL"), ("sm", "AMAX")], 8),
                                           2: ([("sm", "SUM")], 8), 3: ([("mm", "MATMUL")], 8)})
    after = _graph_stage(tmp_path / "b", {4: ([("sm", "MUL"), ("sm", "AMAX"), ("sm", "SUM")], 4),
                                          5: ([("mm", "MATMUL")], 2)})
    d = graph.diff(graph.read(before / "parsed"), graph.read(after / "parsed"))
    assert d["leaf_tasks"] == (24, 6) and d["leaf_functions"] == (3, 2)
    assert d["merged"] == [{"into": "sm: MUL AMAX SUM", "from": ["sm: MUL AMAX", "sm: SUM"]}]
    notes = {r["signature"]: r["note"] for r in d["rows"]}
    assert notes["mm: MATMUL"] == "4 leaf tasks merged into one"
    assert notes["sm: SUM"] == "merged into 'sm: MUL AMAX SUM'"
    assert notes["sm: MUL AMAX SUM"].startswith("new: 2 functions merged")
    back = graph.diff(graph.read(after / "parsed"), graph.read(before / "parsed"))
    assert back["split"] and back["split"][0]["from"] == "sm: MUL AMAX SUM"
    assert graph.diff(None, graph.read(after / "parsed")) is None


# ---------------------------------------------------------------- links and phases
def test_run_links_are_relative_and_name_what_is_missing(tmp_path):
    run = tmp_path / "study" / "s1" / "run"
    run.mkdir(parents=True)
    for name in ("bubble_analysis.log", "dyn_topo.txt", "machine_trace_perf_data_0.json"):
        (run / name).write_text("x", encoding="utf-8")
    links = {e["label"]: e for e in stages.run_links(run.parent, tmp_path / "study")}
    assert [x["href"] for x in links["perf data"]["links"]] == [
        "s1/run/machine_trace_perf_data_0.json"]
    for entry in links.values():
        for x in entry["links"]:
            assert (tmp_path / "study" / x["href"]).exists()
    assert links["program.json"]["links"] == [] and "runtime_debug_mode" in \
        links["program.json"]["note"]
    assert links["PMU CSV"]["links"] == [] and "pmu-to-csv" in links["PMU CSV"]["note"]
    (run / "PROF_000001").mkdir()
    (run / "PROF_000001" / "tilefwk_prof_pmu.csv").write_text("x", encoding="utf-8")
    links = {e["label"]: e for e in stages.run_links(run.parent, tmp_path / "study")}
    assert links["PMU CSV"]["links"][0]["href"] == "s1/run/PROF_000001/tilefwk_prof_pmu.csv"


def test_phase_reading_adds_up_the_aicore_row():
    header = ["Compute Units", "DEV_TASK_BUILD(us)", "ALLOC_THREAD_ID(us)", "INIT(us)",
              "CORE_HAND_SHAKE(us)", "DEV_TASK_RCV(us)", "Post-process(us)",
              "End-to-End time(us)", "Total run time(us)"]
    rnd = {"name": "round1", "header": header, "rows": [
        ["AICPU-CTRL-0", "85.08", "-", "-", "-", "-", "24.76", "-", "114.84"],
        ["AICore", "-", "-", "47.80", "-", "-", "1.04", "47.22", "96.06"]]}
    text = stages.phase_reading(rnd)
    assert "INIT 47.80" in text and "End-to-End 47.22" in text and "= Total 96.06" in text
    assert "do not overlap" in text and "DEV_TASK_BUILD 85.08" in text
    assert stages.phase_reading({"header": header, "rows": [["AICore"] + ["-"] * 8]}) is None
    assert {name for name, _ in stages.PHASE_COLUMNS} >= {"INIT", "End-to-End time"}



def test_report_shows_the_knobs_run_and_flags_a_stale_name(tmp_path):
    """README's tour: stitch_64 edited to 32 keeps its name; the report says so."""
    from pipeline.report.render import render_study
    study = tmp_path / "ms.yaml"
    study.write_text(f"""name: ms
kernel: multi_stitch_add
stages:
  - name: stitch_1
    description: one root call per dev task
    set: {{{STITCH}: 1}}
  - name: stitch_64
    description: edited to 32
    set: {{{STITCH}: 32}}
""", encoding="utf-8")
    for name in ("stitch_1", "stitch_64"):
        _stitch_one_stage(tmp_path / "results" / "ms" / name)
    out = tmp_path / "results" / "ms" / "report.html"
    render_study(study, out.parent, out, KERNELS / "multi_stitch_add.yaml")
    html = out.read_text(encoding="utf-8")
    assert html.count("name ≠ knob") == 1
    assert f"the name says stitch 64 but the stage ran {STITCH}=32" in html
    assert f'data-key="{STITCH}">{STITCH}=32</code>' in html
    assert "--set runtime_options.stitch_function_max_num=64" in html   # stitch_1's Try


def test_report_renders_when_metrics_lack_keys(tmp_path):
    """metrics.json may carry only what the files give (and a sources map): every metric
    is read by key, and a missing one shows as a dash, not an error."""
    from pipeline.report.render import render_index, render_study
    study = tmp_path / "ms.yaml"
    study.write_text(f"""name: ms
kernel: multi_stitch_add
stages:
  - name: a
    description: one
    set: {{{STITCH}: 1}}
  - name: b
    description: two
    set: {{{STITCH}: 2}}
""", encoding="utf-8")
    for name in ("a", "b"):
        stage = _stitch_one_stage(tmp_path / "results" / "ms" / name)
        (stage / "parsed" / "metrics.json").write_text(
            '{"kernel_us": 10.0, "sources": {"kernel_us": "merged_swimlane.json"}}')
    out = tmp_path / "results" / "ms" / "report.html"
    render_study(study, out.parent, out, KERNELS / "multi_stitch_add.yaml")
    html = out.read_text(encoding="utf-8")
    assert 'data-series="kernel_us" data-value="10.00"' in html
    assert 'data-series="e2e_us"' not in html and "n/a" in html      # no bar, not a zero
    assert "Knob sweeps" not in html
    render_index(tmp_path / "results", [study], tmp_path / "results" / "index.html")
    assert 'href="ms/report.html"' in (tmp_path / "results" / "index.html").read_text()


def test_after_a_transpose_the_advisor_suggests_the_swapped_tile(tmp_path):
    """The guide's example: a (64, 128) Transpose writes (128, 64) tiles, so the Add it
    feeds should take (128, 64), not the Transpose's own setting; the advisor reads the
    many-to-many dependency from a real stage and gives that --set line."""
    from pipeline.cli import main
    stage = tmp_path / "same_tile"
    assert main(["stage", str(KERNELS / "transpose_add.yaml"), "--set", "tiles.add=[64,128]",
                 "--out", str(stage)]) == 0
    k = knobs.resolve(KERNELS / "transpose_add.yaml", {"tiles.add": [64, 128]})
    assert suggest.output_tile(k, "transpose") == [128, 64]
    (m2m,) = [f for f in advisor.advise(stage, k) if f["rule"] == "many_to_many"]
    assert m2m["tries"] == ["--set 'tiles.add=[128,64]'"]
    assert "(128, 64)" in m2m["action"]
    # an elementwise producer's tiles are its setting: Sqrt -> Cast keeps the plain rule
    sc = knobs.resolve(KERNELS / "sqrt_cast.yaml", {})
    assert suggest.tile_like(sc, "cast", "sqrt") == ["--set 'tiles.cast=[32,256]'"]


def test_the_vec_merge_advice_merges_independent_tasks_when_applied(tmp_path, msa):
    """Small isomorphic add tasks that share no producer or consumer: a label key alone
    would merge nothing (upstream merges only such siblings then, merge.vec_merge_mode), so
    the suggestion carries DEFAULT 1 beside it, which merges over the whole function, and
    only that function.  The same form on tiling_add (2048 independent adds in one root
    call, label 'add') merges them; the label alone does not."""
    from pipeline.runner import resolve_kernel
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    found = advisor.all_findings(advisor.advise(_stitch_one_stage(tmp_path / "s1"), msa))
    (small,) = [f for f in found if f["rule"] == "small_isomorphic_vec"]
    (tried,) = small["tries"]
    setting = json.loads(tried.split("=", 1)[1].strip("'"))
    assert setting["DEFAULT"] == 1 and setting["add_one"] > 1
    hw = load_hardware("dav_2201")

    def tasks(vec_nbuffer):
        k = resolve_kernel(KERNELS / "tiling_add.yaml",
                           {"pass_options.vec_nbuffer_setting": vec_nbuffer})
        return compile_kernel(k, hw).leaf_tasks
    assert tasks({"add": 2}) == tasks({}) == 2048
    assert tasks({"DEFAULT": 1, "add": 2}) == 1024
