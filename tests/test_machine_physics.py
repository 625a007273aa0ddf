"""Physical sanity of the modeled NPU: rooflines, bandwidth, cores, L2, scheduling modes."""
import numpy as np
import pytest

from pipeline.emit.metrics import metrics
from pipeline.runner import resolve_kernel
from simcore.compiler import compile_kernel
from simcore.machine import simulate
from simcore.spec.hardware import load_hardware, race_variants, with_values
from simcore.spec.kernel import Kernel

from conftest import KERNELS, exp_sqrt_chain

HW = load_hardware("dav_2201")


def run(kernel, hw=HW, **sets):
    if not isinstance(kernel, Kernel):
        kernel = resolve_kernel(KERNELS / f"{kernel}.yaml", sets)
    program = compile_kernel(kernel, hw)
    timeline = simulate(hw, program, kernel.options.runtime_options)
    return program, timeline, metrics(program, timeline, hw)


def gemm(m, k, n, dtype="fp32"):
    return Kernel.model_validate({
        "name": "gemm",
        "tensors": {"a": {"shape": [m, k], "dtype": dtype, "role": "input"},
                    "b": {"shape": [k, n], "dtype": dtype, "role": "input"},
                    "c": {"shape": [m, n], "dtype": "fp32", "role": "output"}},
        "body": [{"set_cube_tile_shapes": {"m": [128, 128], "k": [64, 256], "n": [256, 256],
                                           "enable_multi_data_load": True}},
                 {"op": "matmul", "inputs": ["a", "b"], "out": "o"},
                 {"op": "assemble", "inputs": ["o"], "out": "c", "offsets": [0, 0]}]})


def stream(n=1 << 24, tile=16384, merge=1):
    """y = x + 1 over 64 MiB of FP32: pure data movement; ``merge`` tiles a task
    (vec_nbuffer_setting)."""
    return Kernel.model_validate({
        "name": "stream",
        "tensors": {"x": {"shape": [n], "role": "input"}, "y": {"shape": [n], "role": "output"}},
        "body": [{"set_vec_tile_shapes": [tile]},
                 {"op": "add", "inputs": ["x"], "scalar": 1.0, "out": "s"},
                 {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0]}],
        "options": {"pass_options": {"vec_nbuffer_setting": {"DEFAULT": merge}}}})


def peak_cube_flops_per_us(hw, dtype):
    per_fractal = hw.pipes.cube.cycles_per_fractal.get(dtype, hw.pipes.cube.cycles_per_fractal["default"])
    return hw.cores.aic * hw.cores.clock_mhz * 2 * 16 ** 3 / per_fractal


@pytest.mark.parametrize("name", ["multi_stitch_add", "rmsnorm", "sqrt_cast", "tiling_bmm",
                                  "tiling_add", "blockdiag_matmul", "glm_attention"])
def test_no_kernel_beats_its_roofline(name):
    _, tl, m = run(name)
    hbm_floor = m["hbm_read_bytes"] / (HW.memory.hbm_gbps * 1e3)
    compute_floor = m["flops"] / peak_cube_flops_per_us(HW, "default")
    assert m["kernel_us"] >= hbm_floor and m["kernel_us"] >= compute_floor


def test_flops_and_bytes_agree_with_the_arithmetic():
    _, _, m = run(gemm(512, 1024, 1024))
    assert m["flops"] == 2 * 512 * 1024 * 1024
    p, tl, s = run(stream(1 << 20))
    assert s["hbm_read_bytes"] == 4 << 20 and s["hbm_write_bytes"] == 4 << 20
    assert s["l2_hit_rate"] == 0.0 and s["flops"] == 1 << 20
    # every byte a task reads comes from HBM or L2, never both, never neither
    assert np.allclose(tl.task_hbm_bytes + tl.task_l2_bytes, p.work.mte2_bytes)


def test_doubling_hbm_bandwidth_speeds_memory_bound_not_compute_bound():
    # the stream is not purely HBM-bound: each task also pays the GM latency and its
    # dispatch, so twice the bandwidth buys it about a fifth, and the GEMM almost nothing.
    # 96 KB tiles (the largest whose input and output fit UB), eight to a task: one a task,
    # the schedule threads' per-task cost exceeds the time HBM needs per task, and the
    # stream is dispatch-bound whatever the bandwidth
    fast = with_values(HW, {"memory.hbm_gbps": 2 * HW.memory.hbm_gbps})
    slow_stream = run(stream(tile=24576, merge=8))[2]["kernel_us"]
    fast_stream = run(stream(tile=24576, merge=8), fast)[2]["kernel_us"]
    assert fast_stream < 0.85 * slow_stream
    slow_gemm = run(gemm(2048, 4096, 2048))[2]["kernel_us"]
    fast_gemm = run(gemm(2048, 4096, 2048), fast)[2]["kernel_us"]
    assert fast_gemm > 0.95 * slow_gemm
    assert (slow_stream - fast_stream) / slow_stream > 5 * (slow_gemm - fast_gemm) / slow_gemm


def test_reads_and_writes_share_one_hbm():
    """A stream's writes leave through the HBM its reads come in by: with cores that could
    each pull a tenth of HBM, the stream cannot beat its read plus write bytes over HBM."""
    greedy = with_values(HW, {"pipes.mte2.aiv_hbm_gbps": HW.memory.hbm_gbps / 10})
    _, _, m = run(stream(tile=24576), greedy)
    assert m["hbm_write_bytes"] == m["hbm_read_bytes"] > 0
    both = (m["hbm_read_bytes"] + m["hbm_write_bytes"]) / (HW.memory.hbm_gbps * 1e3)
    assert both <= m["kernel_us"] < 1.3 * both


def test_more_cores_never_slow_a_run():
    more = with_values(HW, {"cores.aiv": 2 * HW.cores.aiv, "cores.aic": 2 * HW.cores.aic})
    for kernel in ("tiling_add", "softmax"):
        assert run(kernel, more)[2]["kernel_us"] <= run(kernel)[2]["kernel_us"] * 1.02
    # glm_attention is bound by its schedule threads (its softmax chains stay on the thread
    # that started them): more cores only move where the chains land, a race one run draws
    # from, which may land a little faster or slower.  The runs with doubled cores stay at
    # or below the range the race gives the chip as it is, widened by the largest of the
    # race's cost factors (1.03)
    glm = resolve_kernel(KERNELS / "glm_attention.yaml", {})

    def times(hw):
        program = compile_kernel(glm, hw)    # the race varies AICPU costs: one compile
        return sorted(simulate(v, program, glm.options.runtime_options).kernel_us
                      for _, v in race_variants(hw))
    base, doubled = times(HW), times(more)
    assert doubled[len(doubled) // 2] <= max(HW.race.factors) * base[-1], (base, doubled)


def test_l2_keeps_written_data_for_consumers_until_evicted():
    split = run("rmsnorm")[2]                         # partial sums go through GM and L2
    assert split["l2_hit_rate"] > 0
    tiny = with_values(HW, {"memory.l2_bytes": 4096})
    assert run("rmsnorm", tiny)[2]["l2_hit_rate"] < split["l2_hit_rate"]


def test_cache_bypass_keeps_streamed_data_out_of_l2():
    def twice(policy):
        return Kernel.model_validate({
            "name": "twice",
            "tensors": {"x": {"shape": [1 << 20], "cache_policy": policy},
                        "y": {"shape": [1 << 20]}, "z": {"shape": [1 << 20]}},
            "body": [{"set_vec_tile_shapes": [8192]},
                     {"op": "exp", "inputs": ["x"], "out": "e"},
                     {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0]},
                     {"set_vec_tile_shapes": [4096]},
                     {"op": "sqrt", "inputs": ["x"], "out": "s"},
                     {"op": "assemble", "inputs": ["s"], "out": "z", "offsets": [0]}]})
    kept, bypassed = run(twice("default"))[2], run(twice("bypass"))[2]
    assert kept["l2_hit_rate"] > 0 and bypassed["l2_hit_rate"] == 0
    assert bypassed["hbm_read_bytes"] > kept["hbm_read_bytes"]


def _chain(n_tiles=512, tile=65536):
    """Producer -> consumer over a working set of twice the L2: affinity decides hits."""
    n = n_tiles * tile
    return exp_sqrt_chain(n, tile)


def test_sched_mode_1_keeps_consumers_near_their_producers_in_l2():
    """x, e and y are 16 MiB each, more than a 32 MiB L2 keeps: sent straight to the core its
    producer freed, a consumer reads e while it is still in L2; from the queue it comes too
    late (at a 16 MiB L2 neither mode finds anything left)."""
    small_l2 = with_values(HW, {"memory.l2_bytes": 32 << 20})
    k = _chain(n_tiles=256, tile=16384)
    fifo = k.model_copy(update={"options": k.options.model_copy(update={
        "runtime_options": k.options.runtime_options.model_copy(update={"device_sched_mode": 0})})})
    lifo = k.model_copy(update={"options": k.options.model_copy(update={
        "runtime_options": k.options.runtime_options.model_copy(update={"device_sched_mode": 1})})})
    m0, m1 = run(fifo, small_l2)[2], run(lifo, small_l2)[2]
    assert m1["l2_hit_rate"] > m0["l2_hit_rate"] + 0.1, (m0["l2_hit_rate"], m1["l2_hit_rate"])


def _serial_chain(steps, mode, background_tiles=0):
    """exp applied ``steps`` times, each op in its own scope: a chain of one-task subgraphs
    (tasks 0 .. steps - 1).  ``background_tiles``: an independent exp after it, one task
    per tile, that keeps the ready queue full while the chain runs."""
    body = [{"set_vec_tile_shapes": [4096]}]
    prev = "x"
    for i in range(steps):
        body += [{"sg_set_scope": i + 1}, {"op": "exp", "inputs": [prev], "out": f"e{i}"}]
        prev = f"e{i}"
    body += [{"sg_set_scope": -1}, {"op": "assemble", "inputs": [prev], "out": "y", "offsets": [0]}]
    tensors = {"x": {"shape": [4096], "role": "input"}, "y": {"shape": [4096], "role": "output"}}
    if background_tiles:
        wide = 4096 * background_tiles
        body += [{"op": "exp", "inputs": ["z"], "out": "w"},
                 {"op": "assemble", "inputs": ["w"], "out": "v", "offsets": [0]}]
        tensors |= {"z": {"shape": [wide], "role": "input"},
                    "v": {"shape": [wide], "role": "output"}}
    return Kernel.model_validate({
        "name": "serial_chain", "tensors": tensors, "body": body,
        "options": {"runtime_options": {"device_sched_mode": mode}}})


def test_a_lone_chain_goes_straight_to_the_freed_core_in_modes_0_and_1():
    """With nothing else queued the resolving thread sends a readied consumer to its own
    idle core, the one its producer just left, in mode 0 as in mode 1 (upstream
    BatchPushReadyQueue before the shared queue): no link pays the queue hand-off."""
    steps = 12
    p0, t0, m0 = run(_serial_chain(steps, 0))
    p1, t1, m1 = run(_serial_chain(steps, 1))
    assert p0.leaf_tasks == steps and p0.edge_src.size == steps - 1
    assert len(set(t0.task_core.tolist())) == len(set(t1.task_core.tolist())) == 1
    assert m0["kernel_us"] == pytest.approx(m1["kernel_us"], abs=1e-9)
    # each link: notice the completion, resolve its one edge (the consumer's only
    # predecessor: a read of the count, no atomic), send; no hand-off
    a = HW.aicpu.scaled_actions()      # the costs as the chip runs them
    gaps = t0.task_start[1:] - t0.task_end[:-1]
    assert gaps.tolist() == pytest.approx(
        [a.completion_us + a.ready_edge_us + a.dispatch_us] * (steps - 1), abs=1e-9)


def test_sched_mode_1_sends_a_readied_consumer_to_its_producers_core_past_a_full_queue():
    """While independent tiles fill the ready queue, mode 0 gives a freed core the queue's
    head and the readied consumer waits its turn at the tail; mode 1 sends the consumer
    to its thread's most recently freed core at once (TrySendTaskDirectly), else a pending
    slot, and pops the queue newest first, so the chain jumps the queue and ends sooner
    (it may change cores when its producer's core was refilled before its thread noticed)."""
    steps, tiles = 12, 600
    p0, t0, _ = run(_serial_chain(steps, 0, tiles))
    _, t1, _ = run(_serial_chain(steps, 1, tiles))
    assert p0.leaf_tasks == steps + tiles
    chain0, chain1 = t0.task_core[:steps].tolist(), t1.task_core[:steps].tolist()
    assert chain1[1] == chain1[0]                   # mode 1: the first consumer takes its producer's core
    # mode 0: the producer's core went on with the queue's head, a background tile
    on_core = np.flatnonzero(t0.task_core == chain0[0])
    after = on_core[t0.task_start[on_core] >= t0.task_end[0]]
    assert after[np.argmin(t0.task_start[after])] >= steps
    # mode 0's first consumer starts after background tiles queued behind its producer
    assert t0.task_start[1] > t1.task_start[1]
    assert t1.task_end[steps - 1] < t0.task_end[steps - 1]


def test_a_copy_in_served_from_l2_waits_only_the_l2_round_trip():
    """A consumer of data just written finds it in L2 and skips the HBM latency; one
    byte from HBM brings the whole HBM round trip back."""
    from simcore.machine.costs import Mte2Model
    mte2 = Mte2Model(HW)
    clock = HW.cores.clock_mhz
    assert HW.pipes.mte2.l2_hit_fixed_cycles < HW.pipes.mte2.fixed_cycles
    from_l2 = mte2.us(loads=1, bursts=0, hbm_bytes=0, l2_bytes=24576, loaders=1)
    mixed = mte2.us(loads=2, bursts=0, hbm_bytes=64, l2_bytes=24576, loaders=1)
    assert from_l2 == pytest.approx(HW.pipes.mte2.l2_hit_fixed_cycles / clock
                                    + 24576 / min(mte2.core_rate, mte2.l2_rate))
    assert mixed - from_l2 > (HW.pipes.mte2.fixed_cycles - HW.pipes.mte2.l2_hit_fixed_cycles) / clock


def test_values_the_control_flow_reads_delay_the_build_unless_ready_on_host():
    """glm_attention's control flow reads block_table and actual_seqs: the control thread
    fetches them before building, unless the launch passes them as ready_on_host_tensors.
    Only the start moves; the kernel itself is untouched."""
    fetch = HW.aicpu.host_value_fetch_us
    _, tl0, plain = run("glm_attention")
    _, tl1, ready = run("glm_attention", **{
        "runtime_options.ready_on_host_tensors": ["block_table", "actual_seqs"]})
    _, _, half = run("glm_attention", **{"runtime_options.ready_on_host_tensors": ["block_table"]})
    assert ready["kernel_us"] == plain["kernel_us"]
    assert plain["e2e_us"] - ready["e2e_us"] == pytest.approx(fetch, abs=1e-3)
    assert tl0.dev_build_end[0] - tl1.dev_build_end[0] == pytest.approx(fetch)
    assert half["e2e_us"] == plain["e2e_us"]     # one value still missing: still fetched
    # a kernel whose control flow reads no tensor values never waits for them
    assert run("rmsnorm")[2]["e2e_us"] < fetch


def test_fair_scheduling_costs_dispatch_time():
    base = run("tiling_add")[2]
    fair = run("tiling_add", **{"runtime_options.device_sched_mode": 2})[2]
    assert fair["kernel_us"] > base["kernel_us"]


def test_same_input_same_timeline_on_both_chips():
    for hw in (HW, load_hardware("dav_3510")):
        a, b = run("glm_attention", hw)[1], run("glm_attention", hw)[1]
        assert np.array_equal(a.task_start, b.task_start) and np.array_equal(a.task_core, b.task_core)


@pytest.mark.parametrize("name", sorted(p.stem for p in KERNELS.glob("*.yaml") if p.stem != "bench_1m"))
def test_every_shipped_kernel_runs_on_both_chips(name):
    for hw in (HW, load_hardware("dav_3510")):
        p, tl, m = run(name, hw)
        assert m["leaf_tasks"] == p.leaf_tasks > 0 and m["kernel_us"] > 0
        assert m["e2e_us"] >= m["kernel_us"]


def test_run_setups_bound_a_copy_in_from_below_and_hide_behind_long_runs():
    """The DMA issues the next contiguous run's descriptor while earlier runs stream, so
    per-run setup costs nothing while the runs are long and sets the pace when they are
    short: one MiB in four long runs takes its bandwidth time, the same MiB in 32 B runs
    (a 16-column fp16 strip of a wide matrix) takes its setups."""
    from simcore.machine.costs import Mte2Model
    m = Mte2Model(HW)
    mib = float(1 << 20)
    cap = m.caps[0]
    long_runs = m.us(loads=1, bursts=4, hbm_bytes=mib, l2_bytes=0, loaders=1)
    assert long_runs == pytest.approx(m.fixed_us + mib / cap)
    short = mib / 32
    assert m.setups_us(short, 1) > mib / cap          # the setups outlast the bytes
    short_runs = m.us(loads=1, bursts=short, hbm_bytes=mib, l2_bytes=0, loaders=1)
    assert short_runs == pytest.approx(m.fixed_us + m.setups_us(short, 1))


def test_small_copy_ins_of_one_task_wait_for_each_other_and_large_ones_hide_it():
    """A task's copy-ins run one after another on its MTE2 pipe, each paying its fixed
    time (pto-isa's on-device fit: 115.5 ns into UB, 36 ns into L1): thirty 256-byte rows
    take thirty setups, far more than their bytes, while the same count of 64 KiB tiles
    takes its bandwidth time, the setups hidden behind the data.  The first copy-in's
    setup hides in the GM round trip."""
    from simcore.machine.costs import Mte2Model
    m = Mte2Model(HW)
    cap = m.caps[0]
    assert m.setups_us(0, 1) == 0.0
    assert m.setups_us(0, 30) == pytest.approx(29 * HW.pipes.mte2.aiv_copy_cycles
                                               / HW.cores.clock_mhz)
    assert m.setups_us(0, 30, aic=True) < m.setups_us(0, 30) / 3   # L1 copies set up faster
    rows = m.us(loads=30, bursts=30, hbm_bytes=30 * 256.0, l2_bytes=0, loaders=1)
    assert rows == pytest.approx(m.fixed_us + m.setups_us(30, 30))
    assert rows - m.fixed_us > 10 * (30 * 256.0 / cap)
    tiles = m.us(loads=30, bursts=30 * 64, hbm_bytes=30 * 65536.0, l2_bytes=0, loaders=1)
    assert tiles == pytest.approx(m.fixed_us + 30 * 65536.0 / cap)



def strip():
    """y = x + 1 over a [64, 256] fp16 slice of a [64, 4096] matrix: one task, whose
    copy-in is 64 runs of 512 B (whole L2 lines, so it fetches just what it asks)."""
    return Kernel.model_validate({
        "name": "strip",
        "tensors": {"x": {"shape": [64, 4096], "dtype": "fp16", "role": "input"},
                    "y": {"shape": [64, 256], "dtype": "fp16", "role": "output"}},
        "body": [{"set_vec_tile_shapes": [64, 256]},
                 {"op": "view", "inputs": ["x"], "out": "xs", "shape": [64, 256],
                  "offsets": [0, 0]},
                 {"op": "add", "inputs": ["xs"], "scalar": 1.0, "out": "s"},
                 {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}]})


def test_run_setups_hide_behind_a_stream_until_they_outlast_it():
    """A lone core loading 32 KiB in 64 runs: at 4 cycles a run the setups (0.14 us) hide
    behind the 0.3 us stream and cost nothing; at 40 cycles a run they outlast it, and the
    task ends when they do."""
    def kernel_us(cycles):
        hw = with_values(HW, {"pipes.mte2.burst_setup_cycles": cycles})
        return run(strip(), hw)[1].kernel_us
    from simcore.machine.costs import Mte2Model
    m = Mte2Model(HW)
    stream = 32768 / m.caps[0]
    base = kernel_us(0.0)
    assert kernel_us(4.0) == pytest.approx(base, abs=1e-9)
    setups = 64 * 40 / HW.cores.clock_mhz
    assert setups > stream
    assert kernel_us(40.0) - base == pytest.approx(setups - stream, rel=0.05)


def pipe_shares(size):
    """The busy shares metrics.json gives (msprof's PipeUtilization ratios) for pto-isa's
    GEMM partition at m = k = n = size (configs/kernels/matmul_bt_blocks.yaml)."""
    _, _, m = run("matmul_bt_blocks", **{"params.M": size, "params.K": size, "params.N": size})
    return {key: m[key] for key in m if key.endswith("_ratio")}


def test_a_tuned_gemm_keeps_its_pipes_as_busy_as_the_chip_did():
    """CANN pto-isa's GEMM example, measured with msprof on an Atlas A3 (docs/cases.md M2),
    spent a growing share of its time in the Cube as the matrices grew (54.5 % at 1536^3,
    79.0 % at 3072^3, 86.7 % at 6144^3), a shrinking one storing its output (7.7, 5.8,
    3.1 %), and always less moving L1 -> L0 than multiplying.  The model runs the same
    partition; its pipes must follow the same trends and land near the chip's shares."""
    small, mid, large = (pipe_shares(n) for n in (1536, 3072, 6144))
    assert small["aic_mac_ratio"] < mid["aic_mac_ratio"] < large["aic_mac_ratio"]
    assert small["aic_fixpipe_ratio"] > mid["aic_fixpipe_ratio"] > large["aic_fixpipe_ratio"]
    for shares in (small, mid, large):
        assert shares["aic_mte1_ratio"] < shares["aic_mac_ratio"]
        # a Cube-only kernel keeps every AIV pipe idle
        assert all(v == 0.0 for k, v in shares.items() if k.startswith("aiv_"))
    # within ten points of the measured Cube shares at the two larger sizes
    assert abs(mid["aic_mac_ratio"] - 0.790) < 0.10 and abs(large["aic_mac_ratio"] - 0.867) < 0.10


def test_pipe_shares_say_which_pipe_a_stream_waits_on():
    """y = x + 1 over 64 MiB runs on the AIVs alone and waits on its loads: metrics.json's
    busy shares (msprof's PipeUtilization ratios) leave every AIC pipe idle, put the AIV's
    MTE2 above its Vector pipe, and stay within the cores' time."""
    _, _, m = run(stream())
    assert all(m[k] == 0.0 for k in m if k.startswith("aic_") and k.endswith("_ratio"))
    assert m["aiv_mte2_ratio"] > m["aiv_vec_ratio"] > 0.0
    assert all(0.0 <= m[k] <= 1.0 for k in m if k.endswith("_ratio"))


def test_an_aic_streams_its_l2_hits_at_its_own_rate_and_leaves_the_aivs_alone():
    """An AIC's copy-ins go GM -> L1 through the ND -> NZ reorder, an AIV's GM -> UB; the
    hardware file gives the AIC's L2 hits their own rate (pto-isa's measured GEMM loads).
    Slowing it slows a GEMM whose B columns every row of tiles rereads from L2, and leaves a
    vector kernel that rereads its partial sums from L2 exactly as it was.  Unset, an AIC
    streams at the AIV's rate, as a chip file without a measurement of its own says."""
    from simcore.machine.costs import Mte2Model
    unset = Mte2Model(with_values(HW, {"pipes.mte2.aic_l2_bytes_per_cycle": None}))
    assert unset.aic_core_rate == unset.core_rate
    assert unset.caps[1] == HW.pipes.mte2.aic_hbm_gbps * 1e3        # its own HBM cap stays
    m = Mte2Model(HW)
    # the reference the engine inlines: an all-L2 AIC copy-in waits the L2 round trip, then
    # streams at the AIC's rate (the L2's share is far above it for one reader)
    assert m.aic_core_rate < m.core_rate
    assert m.latency_us(0.0, 1e6, 1, aic=True) == pytest.approx(m.l2_fixed_us
                                                               + 1e6 / m.aic_core_rate)
    assert m.latency_us(0.0, 1e6, 1) == pytest.approx(m.l2_fixed_us + 1e6 / m.core_rate)
    hw = with_values(HW, {"pipes.mte2.aic_l2_bytes_per_cycle": HW.pipes.mte2.bytes_per_cycle})
    slow = with_values(hw, {"pipes.mte2.aic_l2_bytes_per_cycle": HW.pipes.mte2.bytes_per_cycle / 4})
    g = gemm(1024, 1024, 1024, "fp16")
    fast_g, slow_g = run(g, hw)[1], run(g, slow)[1]
    hits = fast_g.task_l2_bytes.sum()
    assert hits > 0 and np.array_equal(slow_g.task_l2_bytes, fast_g.task_l2_bytes)
    assert slow_g.kernel_us > fast_g.kernel_us
    # the AIC's MTE2 phases grow by about the extra time its hits take at a quarter rate
    clock = HW.cores.clock_mhz
    extra = hits * 3 / (HW.pipes.mte2.bytes_per_cycle * clock)
    grown = slow_g.task_pipe_cycles["mte2"].sum() - fast_g.task_pipe_cycles["mte2"].sum()
    assert grown / clock == pytest.approx(extra, rel=0.05)
    vec_fast, vec_slow = run("rmsnorm", hw)[1], run("rmsnorm", slow)[1]
    assert vec_fast.task_l2_bytes.sum() > 0
    assert np.array_equal(vec_fast.task_end, vec_slow.task_end)
