"""The study catalogue: every study of configs/workflow.yaml, built once by the real
`snakemake` on a scratch copy of configs/, each checked for the direction the performance guide documents.

Figures come only from results/<study>/<stage>/parsed/metrics.json (what a user's report
shows) and from the studies' own `documented` fields (the performance guide's numbers).  A direction the
model does not reproduce yet is an xfail(strict=True) whose reason gives the mechanism; it
turns into a failure as soon as the model gets it right, so the mark gets removed then.
"""
import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import REPO
from simcore.spec.hardware import load_hardware
from simcore.spec.study import load_study, load_workflow

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None or shutil.which("ptolab") is None,
                                reason="needs the installed ptolab and snakemake commands")

STUDIES = REPO / "configs" / "studies"


@pytest.fixture(scope="module")
def built(default_build) -> Path:
    """The default workflow, built once for the whole test run (conftest)."""
    return default_build


def metrics(work: Path, study: str) -> dict[str, dict]:
    """{stage: parsed metrics} in the study's stage order."""
    spec = load_study(work / "configs" / "studies" / f"{study}.yaml")
    return {s.name: json.loads((work / "results" / study / s.name / "parsed" / "metrics.json")
                               .read_text()) for s in spec.stages}


def documented(study: str) -> dict[str, dict[str, float]]:
    return {s.name: s.documented for s in load_study(STUDIES / f"{study}.yaml").stages}


def column(stages: dict[str, dict], key: str) -> list[float]:
    return [m[key] for m in stages.values()]


def non_increasing(values) -> bool:
    return all(b <= a for a, b in zip(values, values[1:]))


def strictly_decreasing(values) -> bool:
    return all(b < a for a, b in zip(values, values[1:]))


# -- the catalogue itself ------------------------------------------------------------------
def test_every_study_file_is_in_the_default_workflow_and_builds(built):
    listed = load_workflow(REPO / "configs" / "workflow.yaml").studies
    on_disk = sorted(p.stem for p in STUDIES.glob("*.yaml"))
    assert sorted(listed) == on_disk
    for study in listed:
        assert (built / "results" / study / "report.html").exists(), study
    assert (built / "results" / "index.html").exists()


def test_every_merge_setting_key_of_the_catalogue_selects_something(built):
    """A label or function key of a breadth-merge setting that matches nothing is a note
    in the stage's log (pipeline/merge_keys.py); no shipped stage has one."""
    logs = sorted((built / "results").glob("*/logs/*.log"))
    assert logs
    noted = [p.relative_to(built) for p in logs if "ptolab: note:" in p.read_text()]
    assert noted == []


def test_every_stage_says_in_one_sentence_what_changed_and_why():
    for path in STUDIES.glob("*.yaml"):
        for stage in load_study(path).stages:
            text = stage.description.strip()
            first = text.split()[0]
            # a sentence: a capital, or a knob name such as enable_split_k, first
            assert (text[0].isupper() or "_" in first) and text.endswith("."), \
                (path.name, stage.name)
            assert text.count(". ") == 0, (path.name, stage.name)     # one sentence
            assert len(text.split()) >= 8, (path.name, stage.name)


# -- stitch -------------------------------------------------------------------------------
def test_multi_stitch_gives_exactly_two_dev_tasks_at_stitch_64(built):
    m = metrics(built, "multi_stitch")
    assert m["stitch_1"]["dev_tasks"] == 128 and m["stitch_64"]["dev_tasks"] == 2
    assert m["stitch_64"]["e2e_us"] < m["stitch_1"]["e2e_us"]


def test_glm_attention_stitch_kernel_time_falls_monotonically(built):
    m = metrics(built, "glm_attention_stitch")
    kernel = column(m, "kernel_us")                 # stitch 1 -> 128 -> 512
    assert strictly_decreasing(kernel), kernel
    assert strictly_decreasing(column(m, "dev_tasks"))
    # the performance guide's warning: workspace grows with the stitch
    assert m["stitch_512"]["workspace_bytes"] > m["stitch_128"]["workspace_bytes"] \
        > m["stitch_1"]["workspace_bytes"]


def test_glm_attention_stitch_e2e_is_lowest_at_128(built):
    m = metrics(built, "glm_attention_stitch")
    e2e = {stage: v["e2e_us"] for stage, v in m.items()}
    assert min(e2e, key=e2e.get) == "stitch_128", e2e


# figures the calibrated model misses by more than the 10 % target, with the error it may
# not exceed: since a root call's eight softmax steps form one leaf task (rename and the
# scope union), stitch 512's kernel comes out about 17 % short (docs/cases.md S1 says what
# is known of the mechanism missing there)
KNOWN_MISSES = {("stitch_512", "kernel_us"): 0.20}


def test_glm_attention_stitch_matches_the_documented_figures(built):
    """The calibrated study: its prediction for each stage, the median of its race runs
    (one run is one draw of which schedule AICPU owns which softmax chain), within 10 % of
    each documented figure but the known misses."""
    m = metrics(built, "glm_attention_stitch")
    for stage, figures in documented("glm_attention_stitch").items():
        assert figures, stage
        for key, want in figures.items():
            got = m[stage][f"{key}_race_median"]
            assert m[stage][f"{key}_race_min"] <= got <= m[stage][f"{key}_race_max"]
            tolerance = KNOWN_MISSES.get((stage, key), 0.10)
            assert abs(got - want) <= tolerance * want, f"{stage} {key}: {got:.0f} vs {want:.0f}"


def test_glm_attention_stitch_sweep_kernel_time_never_rises_with_stitch(built):
    m = metrics(built, "glm_attention_stitch_sweep")
    assert non_increasing(column(m, "kernel_us")), column(m, "kernel_us")
    assert non_increasing(column(m, "dev_tasks"))
    assert m["stitch_1"]["dev_tasks"] > m["stitch_1024"]["dev_tasks"] == 1
    # the two stitch studies run the same model on the same kernel
    same = metrics(built, "glm_attention_stitch")
    for stage in same:
        assert m[stage]["kernel_us"] == pytest.approx(same[stage]["kernel_us"], rel=1e-6)


def test_glm_attention_stitch_sweep_e2e_has_one_interior_minimum(built):
    e2e = column(metrics(built, "glm_attention_stitch_sweep"), "e2e_us")
    best = e2e.index(min(e2e))
    assert 0 < best < len(e2e) - 1, e2e
    assert non_increasing(e2e[:best + 1]) and non_increasing(e2e[best:][::-1]), e2e
    assert e2e[-1] > 1.05 * e2e[best], e2e


# -- the glm_attention tuning path ------------------------------------------------------------
GLM_PATH = ["out_of_box", "stitch_128", "tileshape", "l1_reuse", "nbuffer"]


def test_glm_attention_tuning_every_step_up_to_l1_reuse_improves(built):
    m = metrics(built, "glm_attention_tuning")
    kernel = [m[s]["kernel_us"] for s in GLM_PATH[:-1]]
    e2e = [m[s]["e2e_us"] for s in GLM_PATH]
    assert strictly_decreasing(kernel), dict(zip(GLM_PATH, kernel))
    assert strictly_decreasing(e2e), dict(zip(GLM_PATH, e2e))
    assert m["nbuffer"]["kernel_us"] < 0.5 * m["out_of_box"]["kernel_us"]
    # the stitch stage cuts dev tasks; the merge stages cut subgraphs
    assert m["stitch_128"]["dev_tasks"] < m["out_of_box"]["dev_tasks"]
    assert m["nbuffer"]["leaf_tasks"] < m["l1_reuse"]["leaf_tasks"] < m["tileshape"]["leaf_tasks"]


def test_glm_attention_tuning_nbuffer_shortens_the_launch_at_no_kernel_cost(built):
    """CubeNBuffer merges four MM2s of different s2 blocks (none waits on another); the
    isomorphic vector subgraphs are successive steps of one softmax chain, which wait on each
    other, so vecNBuffer could not merge them (simcore/compiler/mergeorder.py).  Fewer tasks
    shorten the launch.  A merged MM2 starts only once its four blocks' probabilities are
    ready, but a root call's probabilities come out of one merged softmax task (its scope-1
    steps united), so the kernel does not lengthen (while each step's softmax was a task of
    its own, the update chain started later and the kernel took longer)."""
    m = metrics(built, "glm_attention_tuning")
    before, after = m["l1_reuse"], m["nbuffer"]
    assert after["leaf_tasks"] < before["leaf_tasks"]
    assert after["e2e_us"] < 0.95 * before["e2e_us"]
    # a racing study predicts its median; one run is a draw of the race
    assert after["kernel_us_race_median"] <= 1.01 * before["kernel_us_race_median"]


def test_glm_attention_tuning_l2_affinity_scheduling_does_not_pay_on_glm(built):
    """The performance guide recommends device_sched_mode 1 when a consumer's L2 hits matter and tells
    the user to weigh it against load balance by measuring.  glm streams K/V once and its
    intermediates already hit L2 in mode 0 (a readied consumer goes to its thread's freed
    cores there too), so mode 1 gains no L2 hits; it only changes which cores and threads
    the chains land on, and the model finds no gain (upstream runs glm on 910 with mode 2).
    sched_l2_affinity is the study where mode 1 wins."""
    m = metrics(built, "glm_attention_tuning")
    before, after = m["nbuffer"], m["sched_mode_1"]
    assert after["leaf_tasks"] == before["leaf_tasks"]     # same graph, another order
    assert after["l2_hit_rate"] <= before["l2_hit_rate"] + 0.02
    assert after["kernel_us_race_median"] > 0.97 * before["kernel_us_race_median"]


def test_glm_attention_tuning_values_ready_on_host_shorten_the_launch_only(built):
    m = metrics(built, "glm_attention_tuning")
    before, after = m["sched_mode_1"], m["ready_on_host"]
    assert after["kernel_us"] == before["kernel_us"]
    assert after["e2e_us"] < before["e2e_us"] - 100


def test_glm_attention_tuning_tileshape_step_stops_splitting_the_softmax_reduce(built):
    """(16, 128) tiles cut the 512-long reduce axis in four: inside the softmax scope (int
    form, no parallel merge) that leaves partial subgraphs and combines meeting through GM.
    The (128, 512) tile keeps each step's softmax one subgraph."""
    m = metrics(built, "glm_attention_tuning")
    split, whole = m["stitch_128"], m["tileshape"]
    assert whole["leaf_tasks"] < split["leaf_tasks"]
    assert whole["workspace_bytes"] < split["workspace_bytes"]
    assert whole["kernel_us"] < 0.9 * split["kernel_us"]


# -- loop style ---------------------------------------------------------------------------------
def test_loop_static_axis_python_for_beats_pypto_loop(built):
    m = metrics(built, "loop_static_axis")
    loop, py_for = m["pypto_loop"], m["python_for"]
    assert py_for["root_calls"] == 1 < loop["root_calls"]
    assert py_for["leaf_tasks"] < loop["leaf_tasks"]       # merged across the batch items
    assert py_for["kernel_us"] < loop["kernel_us"] and py_for["e2e_us"] < loop["e2e_us"]


def test_loop_merge_halves_root_calls_and_end_to_end_time_falls(built):
    m = metrics(built, "loop_merge")
    sib, merged = m["sibling_loops"], m["merged_loop"]
    assert 2 * merged["root_calls"] == sib["root_calls"]
    assert merged["e2e_us"] < sib["e2e_us"]


def test_loop_merge_keeps_the_two_operations_apart(built):
    """They only share their input y: no producer-consumer edge for a partitioner to merge
    along, so the same leaf tasks run, in no more kernel time."""
    m = metrics(built, "loop_merge")
    sib, merged = m["sibling_loops"], m["merged_loop"]
    assert merged["leaf_tasks"] == sib["leaf_tasks"]
    assert merged["kernel_us"] <= sib["kernel_us"]


def test_loop_unroll_avoids_empty_tasks_and_too_many_iterations(built):
    m = metrics(built, "loop_unroll")
    # small shape: the large view runs empty tasks, the unrolled loop does not
    assert m["small_unroll"]["leaf_tasks"] < m["small_loop_4096"]["leaf_tasks"]
    assert m["small_unroll"]["e2e_us"] < m["small_loop_4096"]["e2e_us"]
    # large shape: the small view makes a root call per block, the unrolled loop few
    assert m["large_unroll"]["root_calls"] < m["large_loop_64"]["root_calls"]
    assert m["large_unroll"]["e2e_us"] < m["large_loop_64"]["e2e_us"]
    # one loop_unroll is never the bad choice: on either shape it lands within a quarter of
    # the way from the better single loop to the worse one (on the small shape its (16, 64)
    # chunk tile, the performance guide's per-gear TileShape, costs a few more dispatches than 64 rows)
    for size in ("small", "large"):
        loops = (m[f"{size}_loop_64"]["e2e_us"], m[f"{size}_loop_4096"]["e2e_us"])
        best, worst = min(loops), max(loops)
        assert m[f"{size}_unroll"]["e2e_us"] <= best + 0.25 * (worst - best), size


# -- vector TileShape and vecNBuffer --------------------------------------------------------------
def test_rmsnorm_unsplit_reduce_axis_is_faster_and_skips_gm(built):
    m = metrics(built, "rmsnorm_tile")
    split, whole = m["split_reduce_axis"], m["tile_1024"]
    assert whole["kernel_us"] < split["kernel_us"] and whole["e2e_us"] < split["e2e_us"]
    assert whole["leaf_tasks"] < split["leaf_tasks"]
    assert whole["workspace_bytes"] == 0 < split["workspace_bytes"]


def test_the_advisor_sees_a_split_reduce_axis_in_our_own_files(built):
    """program.json carries each reduce's axis, tile and full shape, so the advisor flags
    the split stages from the simulated files alone and stays quiet once the tile spans
    the axis."""
    from pipeline.report.advisor import advise

    def flagged(study, stage):
        found = advise(built / "results" / study / stage)
        return "reduce_axis_split" in {f["rule"] for f in found}
    assert flagged("rmsnorm_tile", "split_reduce_axis")
    assert not flagged("rmsnorm_tile", "tile_1024")
    assert flagged("glm_attention_tuning", "stitch_128")
    assert not flagged("glm_attention_tuning", "tileshape")


def test_softmax_16_to_64_kb_tiles_beat_1_kb_tiles(built):
    m = metrics(built, "softmax_tile")
    assert non_increasing(column(m, "kernel_us")) and non_increasing(column(m, "e2e_us"))
    for stage in ("tile_16kb", "tile_32kb"):
        assert m[stage]["kernel_us"] < 0.5 * m["tile_1kb"]["kernel_us"]
        assert m[stage]["workspace_bytes"] == 0 < m["tile_1kb"]["workspace_bytes"]


def test_sqrt_cast_aligned_tiles_fuse(built):
    m = metrics(built, "sqrt_cast_tile")
    mis, aligned = m["misaligned"], m["aligned"]
    assert aligned["leaf_tasks"] < mis["leaf_tasks"]
    assert aligned["workspace_bytes"] == 0 < mis["workspace_bytes"]
    assert aligned["kernel_us"] < mis["kernel_us"]


def test_transpose_tile_the_swapped_consumer_tile_fuses(built):
    m = metrics(built, "transpose_tile")
    same, swapped = m["same_tile"], m["swapped_tile"]
    assert swapped["workspace_bytes"] == 0 < same["workspace_bytes"]
    assert 2 * swapped["leaf_tasks"] == same["leaf_tasks"]      # each Add tile joins one
    assert swapped["kernel_us"] < same["kernel_us"]


def test_reshape_inplace_drops_the_copy_and_its_time(built):
    """The copy rides in its consumer's leaf task, so dropping it shortens the kernel; the
    launch around it (the AICPU's build and dispatch of the same tasks) stays within a
    race's width of the same."""
    m = metrics(built, "reshape_inplace")
    copying, inplace = m["copying"], m["inplace"]
    assert inplace["kernel_us"] < copying["kernel_us"]
    assert inplace["e2e_us"] < copying["e2e_us"] * 1.005
    # the same bytes from and to HBM: the copy moved data inside UB only
    assert inplace["hbm_read_bytes"] == copying["hbm_read_bytes"]
    # each task's own Vector work loses the copy (its simulated duration also carries its
    # share of HBM at the moment, which moves with where the other tasks land)
    from pipeline.runner import resolve_kernel
    from simcore.compiler import compile_kernel
    from simcore.machine.costs import static_pipe_us
    hw = load_hardware("dav_2201")
    vector = {stage.name: static_pipe_us(hw, compile_kernel(resolve_kernel(
        REPO / "configs" / "kernels" / "reshape_inplace.yaml", stage.set), hw))["vector"].sum()
        for stage in load_study(REPO / "configs" / "studies" / "reshape_inplace.yaml").stages}
    assert vector["inplace"] < vector["copying"]


def test_a_longer_tail_axis_moves_the_same_values_faster(built):
    """The guide's advice against short tail axes: the same values as (N, 1) and as
    (N / 64, 64).  Same bytes from HBM; the column pays a repeat and a burst per value."""
    m = metrics(built, "tail_axis")
    column, rows = m["column"], m["rows"]
    assert rows["hbm_read_bytes"] == column["hbm_read_bytes"]
    assert rows["leaf_tasks"] == column["leaf_tasks"]
    assert rows["kernel_us"] < column["kernel_us"] / 2


def test_matmul_l2_split_blocks_share_l2_and_gain(built):
    """The matmul guide's 6144^3 example: the same 1152 output tiles and flops, but the
    view-split rounds keep their A rows and B columns in L2, so fewer bytes come from HBM."""
    m = metrics(built, "matmul_l2_split")
    native, split = m["native"], m["l2_split"]
    assert native["leaf_tasks"] == split["leaf_tasks"] == (6144 // 128) * (6144 // 256)
    assert native["flops"] == split["flops"]
    assert split["root_calls"] == 8 * 6 and native["root_calls"] == 1
    assert split["l2_hit_rate"] > native["l2_hit_rate"] + 0.1
    assert split["hbm_read_bytes"] < 0.6 * native["hbm_read_bytes"]
    assert split["kernel_us"] < 0.85 * native["kernel_us"]


def test_quant_indexer_prolog_l1_reuse_merges_the_query_projection(built):
    """A case the calibration never sees: L1Reuse 4 turns the query projection's 64 tasks
    into 16 (the step before left them to the automatic count, which pairs them: 32), and
    that last documented step gains."""
    m = metrics(built, "quant_indexer_prolog")
    assert m["cube_tiles"]["leaf_tasks"] - m["l1_reuse"]["leaf_tasks"] == 32 - 16
    # the same bytes: merging shares the resident q_norm block in L1, not the weights in HBM
    assert m["l1_reuse"]["hbm_read_bytes"] <= m["cube_tiles"]["hbm_read_bytes"]
    assert m["l1_reuse"]["kernel_us"] < m["cube_tiles"]["kernel_us"]


def test_quant_indexer_prolog_each_documented_step_is_faster(built):
    """Each tuning step the case measured gains, in the order it documents.  The cube-tile
    step gains about a quarter of the chip's 20 us (docs/fidelity.md)."""
    m = metrics(built, "quant_indexer_prolog")
    doc = documented("quant_indexer_prolog")
    assert strictly_decreasing([d["kernel_us"] for d in doc.values()])
    assert strictly_decreasing(column(m, "kernel_us"))


def test_vec_nbuffer_cuts_overhead_of_many_short_subgraphs(built):
    m = metrics(built, "vec_nbuffer")
    assert m["nbuffer_1"]["leaf_tasks"] == 2 * m["nbuffer_2"]["leaf_tasks"] \
        == 4 * m["nbuffer_4"]["leaf_tasks"] == 8 * m["nbuffer_8"]["leaf_tasks"]
    # the performance guide's trigger: the unmerged subgraphs each take well under 10 us (swimlane durations)
    tasks = pl.read_parquet(built / "results" / "vec_nbuffer" / "nbuffer_1" / "parsed"
                            / "tasks.parquet")
    assert tasks.height == m["nbuffer_1"]["leaf_tasks"] and tasks["dur_us"].max() < 10
    # merging cuts head and scheduling overhead until the add runs at HBM speed: from then
    # on every stage sits on the bandwidth floor (its HBM bytes at the chip's bandwidth);
    # how many merges that takes depends on what a dispatch costs, but eight do
    kernel = column(m, "kernel_us")
    hbm = load_hardware("dav_2201").memory.hbm_gbps * 1e3          # bytes per us
    floor = [(v["hbm_read_bytes"] + v["hbm_write_bytes"]) / hbm for v in m.values()]
    assert kernel[0] > 1.25 * floor[0], (kernel, floor)           # out of box: overhead-bound
    at_floor = [f <= k <= 1.15 * f for k, f in zip(kernel, floor)]
    first = at_floor.index(True)
    assert 0 < first < len(kernel) - 1 and all(at_floor[first:]), (kernel, floor)
    assert strictly_decreasing(kernel[:first + 1]), kernel
    assert column(m, "e2e_us")[0] > max(column(m, "e2e_us")[1:])


# -- matmul ---------------------------------------------------------------------------------
def test_recommended_cube_tiles_beat_the_small_first_guess(built):
    m = metrics(built, "matmul_cube_tiles")
    for stage in ("m128_k64x256_n256", "m256_k64x256_n128", "m128_k128x512_n128"):
        assert m[stage]["kernel_us"] < m["tile_64"]["kernel_us"], stage
        assert m[stage]["e2e_us"] < m["tile_64"]["e2e_us"], stage


def test_split_k_helps_small_m_n_with_long_k(built):
    m = metrics(built, "matmul_split_k")
    assert m["split_k"]["kernel_us"] < m["no_split"]["kernel_us"]


def test_split_k_spreads_long_k_over_more_tasks(built):
    m = metrics(built, "matmul_split_k")
    assert m["split_k"]["leaf_tasks"] > m["no_split"]["leaf_tasks"]


def test_l1_reuse_counts_2_4_8_cut_loads_and_time(built):
    m = metrics(built, "matmul_l1_reuse")
    counts = ["l1_reuse_1", "l1_reuse_2", "l1_reuse_4", "l1_reuse_8"]
    assert [m[s]["leaf_tasks"] for s in counts] == [512, 256, 128, 64]
    assert strictly_decreasing([m[s]["kernel_us"] for s in counts])
    assert strictly_decreasing([m[s]["e2e_us"] for s in counts])
    assert m["auto"]["leaf_tasks"] < m["l1_reuse_1"]["leaf_tasks"]     # on by default


def test_cube_nbuffer_merges_isomorphic_batch_matmuls(built):
    """Every merge beats none, and each halving of the subgraphs cuts the launch's
    scheduling (e2e).  The guide asks to pick the count by measurement: the kernel time need
    not fall at every step (32 merged tasks on 24 cube cores leave a second round of 8, each
    storing four outputs one after another)."""
    m = metrics(built, "matmul_cube_nbuffer")
    assert column(m, "leaf_tasks") == [128, 64, 32, 16]
    kernel = column(m, "kernel_us")
    assert all(k < kernel[0] for k in kernel[1:])
    assert strictly_decreasing(column(m, "e2e_us"))


def test_block_diagonal_rewrite_is_faster(built):
    """The documented direction holds; its size does not: the chip gains 12.5x, the model
    about 1.6x, because upstream's automatic L1Reuse merges the plain form's 6912 matmuls
    144 to a task and the model prices each merged one at a seventh of the chip's time
    (held out of the calibration, docs/cases.md X1 and docs/fidelity.md)."""
    m = metrics(built, "skinny_matmul_rewrite")
    doc = documented("skinny_matmul_rewrite")
    plain, rewrite = m["l1_reuse_only"], m["block_diagonal"]
    assert doc["l1_reuse_only"]["kernel_us"] > doc["block_diagonal"]["kernel_us"]
    assert plain["kernel_us"] > 1.2 * rewrite["kernel_us"], (plain["kernel_us"],
                                                             rewrite["kernel_us"])
    assert plain["leaf_tasks"] == 6912 // 144


# -- depth merge and scheduling ----------------------------------------------------------------
def test_sg_set_scope_forces_and_splits_a_vector_chain(built):
    m = metrics(built, "scope_chain")
    auto, forced = m["misaligned_auto"], m["misaligned_forced"]
    assert forced["leaf_tasks"] < auto["leaf_tasks"]
    assert forced["workspace_bytes"] == 0 < auto["workspace_bytes"]
    assert forced["kernel_us"] < auto["kernel_us"]
    aligned, split = m["aligned_auto"], m["aligned_split"]
    assert split["workspace_bytes"] > 0 == aligned["workspace_bytes"]
    assert split["kernel_us"] > aligned["kernel_us"]


def test_l2_affinity_scheduling_pays_off_when_the_working_set_exceeds_l2(built):
    m = metrics(built, "sched_l2_affinity")
    fifo, affinity = m["exceeds_l2_fifo"], m["exceeds_l2_affinity"]
    assert affinity["l2_hit_rate"] > fifo["l2_hit_rate"] + 0.2
    assert affinity["hbm_read_bytes"] < fifo["hbm_read_bytes"]
    assert affinity["kernel_us"] < fifo["kernel_us"]
    # when everything fits L2 the order wins no hits
    small_fifo, small_affinity = m["fits_l2_fifo"], m["fits_l2_affinity"]
    assert math.isclose(small_fifo["l2_hit_rate"], small_affinity["l2_hit_rate"], abs_tol=0.02)
    assert small_affinity["hbm_read_bytes"] == small_fifo["hbm_read_bytes"]
