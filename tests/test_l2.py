"""The L2 model: line bitmaps per region, hits by line, LRU by region counted in lines,
and the directions it must give on compiled kernels (column-tile reuse, write-allocate,
capacity, L2-locality traversal of a GEMM)."""
import numpy as np
import pytest

from pipeline.calibrate import with_values
from simcore.compiler import CoreType, compile_kernel
from simcore.compiler.program import L2_LINE_BYTES
from simcore.machine import simulate
from simcore.machine.l2 import L2Cache, TaskRegions
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

from conftest import exp_sqrt_chain

HW = load_hardware("dav_2201")
LINE = L2_LINE_BYTES


def run(kernel, hw=HW):
    program = compile_kernel(kernel, hw)
    return program, simulate(hw, program, kernel.options.runtime_options)


# -- L2Cache on its own ----------------------------------------------------------------
def _cache(capacity, per_task, replacement="lru"):
    """An L2Cache over ``per_task``: for each task, its (region, bytes, lines, write, bypass)
    accesses."""
    rows = [a for accesses in per_task for a in accesses]
    ptr = np.cumsum([0] + [len(a) for a in per_task]).tolist()
    cols = list(zip(*rows))
    return L2Cache(capacity, TaskRegions(
        ptr=ptr, region=list(cols[0]), nbytes=list(cols[1]), lines=list(cols[2]),
        nlines=[m.bit_count() for m in cols[2]], write=list(cols[3]), bypass=list(cols[4])),
        replacement)


def test_l2_a_read_hits_the_lines_held_and_misses_whole_lines():
    cache = _cache(1 << 20, [
        [(1, 2 * LINE, 0b0011, False, False)],     # lines 0, 1: both missed
        [(1, 2 * LINE, 0b0110, False, False)],     # line 1 held, line 2 missed
        [(1, 100.0, 0b1000, False, False)],        # 100 B of line 3: the whole line comes
        [(1, 100.0, 0b1000, False, False)]])       # the rest of that line: a hit
    assert [cache.access(t) for t in range(4)] == [
        (0.0, 2 * LINE), (LINE, LINE), (0.0, LINE), (100.0, 0.0)]
    assert cache.used == 4 * LINE


def test_l2_writes_fill_and_bypassed_accesses_are_not_kept():
    full = 2 ** 64 - 1
    r = 64 * LINE
    cache = _cache(1 << 20, [
        [(1, r, full, True, False)],                             # write region 1: no read bytes
        [(1, r, full, False, False), (2, r, full, False, True)],  # 1 hits; 2 bypassed: miss
        [(2, r, full, False, False)],                            # 2 was not kept: miss again
        [(1, LINE, 0b1, True, True)],                            # bypassed write drops line 0
        [(1, r, full, False, False)]])                           # 63 of 64 lines still held
    assert [cache.access(t) for t in range(5)] == [
        (0.0, 0.0), (r, r), (0.0, r), (0.0, 0.0), (r - LINE, LINE)]
    assert cache.used == 2 * r                                   # regions 2 and 1, whole


def test_l2_evicts_the_least_recently_used_region_once_its_lines_exceed_capacity():
    three = 0b111
    cache = _cache(6 * LINE, [
        [(1, 3 * LINE, three, False, False)], [(2, 3 * LINE, three, False, False)],
        [(1, 3 * LINE, three, False, False)],       # hit: 1 is now the newest
        [(3, LINE, 0b1, False, False)],             # 7 lines > 6: region 2 goes
        [(1, 3 * LINE, three, False, False), (2, 3 * LINE, three, False, False)]])
    assert [cache.access(t) for t in range(5)] == [
        (0.0, 3 * LINE), (0.0, 3 * LINE), (3 * LINE, 0.0), (0.0, LINE), (3 * LINE, 3 * LINE)]


def _scan(replacement, regions=30, capacity_regions=20, passes=4):
    """A cyclic scan: one task per region, whole regions, ``passes`` times over
    ``regions`` regions with room for ``capacity_regions``; (hit bytes per pass, cache)."""
    full = 2 ** 64 - 1
    r = 64 * LINE
    per_task = [[(k, r, full, False, False)] for _ in range(passes) for k in range(regions)]
    cache = _cache(capacity_regions * r, per_task, replacement)
    hits = []
    for p in range(passes):
        got = [cache.access(p * regions + k) for k in range(regions)]
        hits.append(sum(h for h, _ in got))
        assert cache.used <= capacity_regions * r
    return hits, cache


def test_l2_random_replacement_keeps_part_of_a_scan_lru_loses_whole():
    """A scan a half larger than the cache: LRU evicts every region just before its reuse
    and never hits again; random eviction keeps a share of the scan and hits on every later
    pass, less than everything."""
    lru, _ = _scan("lru")
    rand, _ = _scan("random")
    r = 64 * LINE
    assert lru == [0.0, 0.0, 0.0, 0.0]
    assert rand[0] == 0.0
    assert all(0.25 * 30 * r < h < 30 * r for h in rand[1:])


def test_l2_random_replacement_is_reproducible_and_fits_its_capacity():
    """The victims come from a generator with a fixed seed: two caches over the same
    accesses hit the same bytes; a scan that fits is all hits after its first pass, as
    under LRU."""
    assert _scan("random")[0] == _scan("random")[0]
    fits, _ = _scan("random", regions=10)
    assert fits[1:] == [10 * 64 * LINE] * 3


def test_l2_refuses_an_unknown_replacement_policy():
    with pytest.raises(ValueError, match="lru, random"):
        _cache(LINE, [[(1, LINE, 0b1, False, False)]], "fifo")


# -- what the compiler lists ------------------------------------------------------------
def _column_tile_twice(rows=64, cols=4096, width=64, at=128):
    """Two root calls each read the same [rows, width] FP32 column tile of a row-major
    [rows, cols] matrix (a row is 16 KiB, the tile 256 B of it) on their own cores."""
    return Kernel.model_validate({
        "name": "column_tile",
        "tensors": {"x": {"shape": [rows, cols], "role": "input"},
                    "y": {"shape": [2 * rows, width], "role": "output"}},
        "body": [{"set_vec_tile_shapes": [rows, width]},
                 {"loop": {"name": "twice", "idx": "i", "trip": 2}, "body": [
                     {"op": "view", "inputs": ["x"], "out": "xi", "shape": [rows, width],
                      "offsets": [0, at]},
                     {"op": "exp", "inputs": ["xi"], "out": "e"},
                     {"op": "assemble", "inputs": ["e"], "out": "y",
                      "offsets": [f"i*{rows}", 0]}]}]})


def test_a_column_tile_marks_one_line_per_row_in_each_region(consecutive_regions):
    """Columns 128..191 of FP32 rows of 16 KiB are bytes 512..767 of each row: line 1 of
    the row.  A 32 KiB region of consecutive lines holds two rows, so each region gets
    lines 1 and 33, 512 B."""
    p = compile_kernel(_column_tile_twice(), HW)
    r = p.regions
    reads = (r.task == 0) & ~r.write
    assert reads.sum() == 32
    assert r.bytes[reads].tolist() == [512.0] * 32
    assert [int(m) for m in r.lines[reads]] == [(1 << 1) | (1 << 33)] * 32
    assert r.bytes[reads].sum() == p.work.mte2_bytes[0]          # rows add up to the box


def test_a_tensor_read_in_column_tiles_is_cut_into_regions_of_its_tiles():
    """The same column tile with the regions the compiler gives that tensor: blocks shaped
    like its boxes, 64 rows x 1 line (the tile is half a line wide), so the tile's lines,
    one a row, fill one region that holds no other tile's lines: it is as recent as they
    are, however other column tiles of those rows are read."""
    p = compile_kernel(_column_tile_twice(), HW)
    r = p.regions
    reads = (r.task == 0) & ~r.write
    assert reads.sum() == 1
    assert [int(m) for m in r.lines[reads]] == [(1 << 64) - 1]
    assert r.bytes[reads].sum() == p.work.mte2_bytes[0] == 64 * 64 * 4


def test_region_shapes_follow_the_boxes_and_keep_consecutive_lines_otherwise():
    """Blocks of at most 64 lines shaped like a tensor's most frequent box, its rows as long
    as the boxes' stride; consecutive lines for a vector, for rows that are no whole lines,
    and for views that disagree on the row."""
    from simcore.compiler.accesses import GmBuffer
    from simcore.compiler.build import region_shapes

    def shape_of(buffers, boxes, storage=None):
        storage = np.arange(len(buffers)) if storage is None else np.asarray(storage)
        return region_shapes(tuple(buffers), storage, np.asarray(boxes, np.int64)).tolist()
    m = GmBuffer("m", (6144, 6144), 2)                       # 24 lines a row
    # column tiles 256 wide (one line) x all rows: 64 rows x 1 line
    assert shape_of([m], [[0, 0, 256, 6144, 512]]) == [[24, 64, 1]]
    # row blocks 128 x whole rows: 24 lines -> 8 lines a block row, 8 rows
    assert shape_of([m], [[0, 128, 0, 256, 6144]]) == [[24, 8, 8]]
    # a (R, 12, 1024) view of a (R, 12288) matrix read [64, 1, 1024]: rows of 24 KiB
    v = GmBuffer("v", (256, 12, 1024), 2, storage="m2")
    assert shape_of([v], [[0, 0, 3, 0, 64, 4, 1024]]) == [[48, 16, 4]]
    # a vector, and rows of 256 bytes: consecutive lines
    assert shape_of([GmBuffer("x", (4096,), 4)], [[0, 0, 1024]]) == [[0, 0, 0]]
    assert shape_of([GmBuffer("k", (64, 128), 2)], [[0, 0, 0, 32, 128]]) == [[0, 0, 0]]
    # two views of one storage read as rectangles in rows of 24 KiB and of 2 KiB: both keep
    # consecutive lines, where their bytes meet
    flat = GmBuffer("f", (3072, 1024), 2, storage="m2")
    assert shape_of([v, flat], [[0, 0, 3, 0, 64, 4, 1024], [1, 0, 0, 0, 64, 1024, 1]],
                    storage=[0, 0]) == [[0, 0, 0], [0, 0, 0]]
    # tensors of two storages in one call, each cut by its own boxes; m's column tile and
    # row block tie on width (1 and 24 lines, once each), and the narrower wins
    n = GmBuffer("n", (6144, 6144), 2)
    assert shape_of([m, n], [[0, 0, 0, 6144, 256], [0, 0, 0, 128, 6144],
                             [1, 0, 0, 128, 6144]]) == [[24, 64, 1], [24, 8, 8]]


def test_a_second_core_reading_the_same_column_tile_hits_l2():
    p, tl = run(_column_tile_twice())
    assert tl.task_core[0] != tl.task_core[1]
    tile = 64 * 64 * 4
    assert tl.task_l2_bytes.tolist() == [0.0, tile]
    # the first loads whole lines: 64 rows x one 512 B line for 256 B asked of each
    assert tl.task_hbm_bytes.tolist() == [64.0 * LINE, 0.0]


def _weight_columns(fmt):
    """Four cube tasks, each multiplying the same rows by its own 32-column tile of one
    [512, 128] int8 weight (a row is 128 B, a quarter of a line)."""
    return Kernel.model_validate({
        "name": "weight_columns",
        "tensors": {"a": {"shape": [16, 512], "dtype": "int8", "role": "input"},
                    "w": {"shape": [512, 128], "dtype": "int8", "role": "input",
                          "format": fmt},
                    "c": {"shape": [16, 128], "dtype": "int32", "role": "output"}},
        "body": [{"set_cube_tile_shapes": {"m": [16, 16], "k": [512, 512], "n": [32, 32]}},
                 {"op": "matmul", "inputs": ["a", "w"], "dtype": "int32", "out": "ci"},
                 {"op": "assemble", "inputs": ["ci"], "out": "c", "offsets": [0, 0]}],
        "options": {"pass_options": {"cube_l1_reuse_setting": {"DEFAULT": 1}}}})


def test_a_column_tile_of_an_nz_weight_takes_only_its_own_lines():
    """Row-major, a 32-column int8 tile takes 32 B of every 128 B row, so the first task
    to load it fetches whole lines holding its three neighbours' columns too, and they hit.
    NZ stores each 32-byte column block's 16-row fractals (one line each) down the rows:
    every task fetches exactly its own tile and none shares a line."""
    weight = 512 * 128
    tile = weight // 4
    for fmt in ("ND", "NZ"):
        p, tl = run(_weight_columns(fmt))
        cube = np.flatnonzero(p.task_core == int(CoreType.AIC))
        assert cube.size == 4
        r = p.regions
        w_rows = ~r.write & np.isin(r.task, cube) & (r.bytes > 0)
        lines = np.asarray([int(m).bit_count() for m in r.lines[w_rows]])
        per_task = np.bincount(r.task[w_rows], weights=lines * LINE, minlength=p.leaf_tasks)
        a_bytes = 16 * 512
        if fmt == "ND":
            # each task's box crosses every line of the weight
            assert (per_task[cube] >= weight).all()
        else:
            # its own 32 lines of the weight, plus the rows of a
            assert per_task[cube].tolist() == [tile + a_bytes] * 4
        # HBM brings the weight once either way; only row-major makes a task fetch the
        # others' columns
        fetched = tl.task_hbm_bytes[cube]
        assert fetched.sum() >= weight
        assert (fetched.max() > tile + a_bytes) == (fmt == "ND")


def _chain(n=1 << 16, tile=16384):
    """exp over x, then sqrt over its result with half the tile: the intermediate goes
    through GM (and L2) between the two."""
    return exp_sqrt_chain(n, tile)


def test_a_consumer_of_data_just_written_hits_l2():
    n = 1 << 16
    p, tl = run(_chain(n))
    producers = np.flatnonzero(p.task_leaf == p.task_leaf[0])
    consumers = np.flatnonzero(p.task_leaf != p.task_leaf[0])
    assert tl.task_hbm_bytes[producers].sum() == n * 4            # x comes from HBM
    assert tl.task_l2_bytes[consumers].sum() == n * 4             # e is read back from L2
    assert tl.task_hbm_bytes[consumers].sum() == 0


def _twice(n):
    """Two passes over x (exp, then sqrt with another tile), each writing its own output."""
    return Kernel.model_validate({
        "name": "twice",
        "tensors": {"x": {"shape": [n]}, "y": {"shape": [n]}, "z": {"shape": [n]}},
        "body": [{"set_vec_tile_shapes": [8192]},
                 {"op": "exp", "inputs": ["x"], "out": "e"},
                 {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0]},
                 {"set_vec_tile_shapes": [4096]},
                 {"op": "sqrt", "inputs": ["x"], "out": "s"},
                 {"op": "assemble", "inputs": ["s"], "out": "z", "offsets": [0]}]})


def _second_pass_hit_share(hw, n):
    p, tl = run(_twice(n), hw)
    second = p.task_leaf != p.task_leaf[0]
    return tl.task_l2_bytes[second].sum() / p.work.mte2_bytes[second].sum()


def test_a_stream_larger_than_l2_misses_when_read_again():
    n = 1 << 20                                   # x: 4 MiB of FP32, y another 4 MiB
    big = with_values(HW, {"memory.l2_bytes": 64 << 20})
    small = with_values(HW, {"memory.l2_bytes": 4 << 20})
    assert _second_pass_hit_share(big, n) == 1.0
    assert _second_pass_hit_share(small, n) < 0.05


def test_only_the_usable_share_of_l2_holds_a_working_set():
    """x and the y written over it take 8 MiB: a 16 MiB L2 keeps them, a quarter of it not."""
    n = 1 << 20
    whole = with_values(HW, {"memory.l2_bytes": 16 << 20, "memory.l2_usable_fraction": 1.0})
    quarter = with_values(HW, {"memory.l2_bytes": 16 << 20, "memory.l2_usable_fraction": 0.25})
    assert _second_pass_hit_share(whole, n) == 1.0
    assert _second_pass_hit_share(quarter, n) < 0.05


# -- L2-locality traversal of a GEMM ----------------------------------------------------
def gemm_blocks(m, k, n, mb, nb):
    """C = A @ B in FP16 as mb x nb output blocks, one root call per block, block row by
    block row (the output view-split of PyPTO's matmul guide, section on the L2 hit rate)."""
    bm, bn = m // mb, n // nb
    return Kernel.model_validate({
        "name": "gemm_blocks",
        "tensors": {"a": {"shape": [m, k], "dtype": "fp16", "role": "input"},
                    "b": {"shape": [k, n], "dtype": "fp16", "role": "input"},
                    "c": {"shape": [m, n], "dtype": "fp16", "role": "output"}},
        "body": [{"set_cube_tile_shapes": {"m": [128, 128], "k": [128, 512], "n": [128, 128]}},
                 {"loop": {"name": "mi", "idx": "i", "trip": mb, "style": "for"}, "body": [
                     {"loop": {"name": "nj", "idx": "j", "trip": nb, "style": "for"}, "body": [
                         {"op": "view", "inputs": ["a"], "out": "ai", "shape": [bm, k],
                          "offsets": [f"i*{bm}", 0]},
                         {"op": "view", "inputs": ["b"], "out": "bj", "shape": [k, bn],
                          "offsets": [0, f"j*{bn}"]},
                         {"op": "matmul", "inputs": ["ai", "bj"], "out": "o"},
                         {"op": "assemble", "inputs": ["o"], "out": "c",
                          "offsets": [f"i*{bm}", f"j*{bn}"]}]}]}],
        "options": {"pass_options": {"cube_l1_reuse_setting": {"DEFAULT": 1}}}})


def test_blocked_gemm_traversal_gains_l2_hits_when_the_gemm_exceeds_l2():
    """A, B 4 MiB each and C 8 MiB against 4 MiB of usable L2: walking the whole output row
    by row streams B through L2 once per row of tiles, while 2 x 2 blocks keep a block's
    share of A and B resident: a block's 32 output tiles are about one wave of the 24 cube
    cores, so the cores running together cover a square of the output, which PyPTO's matmul
    guide names as the best case for the per-round L2 hit rate."""
    hw = with_values(HW, {"memory.l2_bytes": 8 << 20})
    _, naive = run(gemm_blocks(2048, 1024, 2048, 1, 1), hw)
    _, blocked = run(gemm_blocks(2048, 1024, 2048, 2, 2), hw)

    def hit_rate(tl):
        return tl.task_l2_bytes.sum() / (tl.task_l2_bytes.sum() + tl.task_hbm_bytes.sum())
    # the margins leave room for where the schedule threads' batches put each tile
    assert hit_rate(blocked) > hit_rate(naive) + 0.03
    assert blocked.task_hbm_bytes.sum() < 0.85 * naive.task_hbm_bytes.sum()
    assert blocked.kernel_us < naive.kernel_us


@pytest.mark.parametrize("mb, nb", [(1, 1), (4, 4)])
def test_a_gemm_that_fits_l2_reads_each_input_byte_from_hbm_once(mb, nb):
    """With L2 large enough, traversal cannot matter: HBM delivers A and B once."""
    m, k, n = 1024, 512, 1024
    _, tl = run(gemm_blocks(m, k, n, mb, nb))
    assert tl.task_hbm_bytes.sum() == (m * k + k * n) * 2


# -- the DataCopy sample's reread (configs/kernels/l2_reread.yaml, docs/cases.md C1) ------
def _reread(slices: int, rows: int, hw=HW):
    """As the study runs it: a pass's tiles merged into one task per vector core, as the
    sample's 48 blocks each loop over their share."""
    from pipeline.runner import resolve_kernel
    from simcore.spec.study import find_config
    from conftest import REPO
    per_core = max(1, rows // 64 * 12 // slices // hw.cores.aiv)
    kernel = resolve_kernel(find_config(REPO / "configs" / "kernels", "l2_reread", "kernel"),
                            {"params.SLICES": slices, "params.R": rows,
                             "pass_options.vec_nbuffer_setting": {"DEFAULT": per_core}})
    program, tl = run(kernel, hw)
    l2, hbm = tl.task_l2_bytes.sum(), tl.task_hbm_bytes.sum()
    return program, tl, l2 / (l2 + hbm), l2 + hbm


def test_a_reread_slice_that_fits_l2_hits_and_a_whole_matrix_that_does_not_misses():
    """The sample's two traversals on a matrix sized against the model's usable L2: read
    whole four times, each pass evicts what the next needs (no hits); read by quarters, a
    quarter fits, so every reread after the first hits (3 of 4 reads), the same bytes read,
    and the quarters finish sooner."""
    usable = HW.memory.l2_bytes * HW.memory.l2_usable_fraction
    # the matrix about 2.2x, a quarter 0.55x; rows in whole 64-row tiles that every pass
    # splits evenly over the 48 vector cores
    rows = int(2.2 * usable / (12288 * 2)) // 1024 * 1024
    whole_p, whole, whole_hits, whole_read = _reread(1, rows)
    parts_p, parts, parts_hits, parts_read = _reread(4, rows)
    # 4 passes of the whole matrix or 16 of a quarter, each one task per vector core
    assert whole_p.leaf_tasks == 4 * HW.cores.aiv and parts_p.leaf_tasks == 16 * HW.cores.aiv
    assert whole_read == parts_read == pytest.approx(4 * rows * 12288 * 2, rel=1e-3)
    # a merged task looks up all its tiles when it starts, so a few of the whole matrix's
    # tiles meet tasks of the next pass that start early: a little more than none
    assert whole_hits < 0.1
    assert 0.70 < parts_hits <= 0.75 + 1e-6
    assert parts.kernel_us < 0.9 * whole.kernel_us


# -- stitch and the L2 -------------------------------------------------------------------
def _blocks_under_pypto_loop(blocks, rows=4, cols=4096):
    """y = exp(x), z = sqrt(y) on (blocks x rows, cols) FP32, one pypto.loop root call per
    block of rows, producer and consumer in separate scopes: each consumer reads through
    GM what its own root call's producer wrote."""
    r = blocks * rows
    return Kernel.model_validate({
        "name": "stitched_blocks",
        "tensors": {"x": {"shape": [r, cols], "role": "input"},
                    "z": {"shape": [r, cols], "role": "output"}},
        "body": [{"set_vec_tile_shapes": [rows, cols]},
                 {"loop": {"name": "blocks", "idx": "i", "trip": blocks, "style": "pypto"},
                  "body": [{"op": "view", "inputs": ["x"], "out": "xi", "shape": [rows, cols],
                            "offsets": [f"i*{rows}", 0]},
                           {"sg_set_scope": 1},
                           {"op": "exp", "inputs": ["xi"], "out": "yi"},
                           {"sg_set_scope": 2},
                           {"op": "sqrt", "inputs": ["yi"], "out": "zi"},
                           {"sg_set_scope": -1},
                           {"op": "assemble", "inputs": ["zi"], "out": "z",
                            "offsets": [f"i*{rows}", 0]}]}]})


def test_a_larger_stitch_runs_more_producers_before_their_consumers_and_loses_l2_hits():
    """The performance guide's warning on stitch: with many root calls in one dev task,
    many tasks run side by side and the L2 hit rate can fall.  Each root call's consumer
    rereads 64 KiB its producer just wrote; in a dev task of 8 root calls the producers
    ahead of a consumer have written 0.5 MiB, in one of all 256 they have written 16 MiB
    (and streamed as much of x), more than this 8 MiB L2 holds."""
    kernel = _blocks_under_pypto_loop(256)
    small_l2 = with_values(HW, {"memory.l2_bytes": 8 << 20, "memory.l2_usable_fraction": 1.0})

    def consumer_hit_share(stitch):
        k = kernel.model_copy(update={"options": kernel.options.model_copy(update={
            "runtime_options": kernel.options.runtime_options.model_copy(
                update={"stitch_function_max_num": stitch})})})
        p, tl = run(k, small_l2)
        consumers = p.task_leaf != p.task_leaf[0]
        return tl.dev_start.size, tl.task_l2_bytes[consumers].sum() / p.work.mte2_bytes[consumers].sum()

    (few, narrow), (one, wide) = consumer_hit_share(8), consumer_hit_share(256)
    assert (few, one) == (32, 1)
    assert narrow > 0.9
    assert wide < 0.5 * narrow
