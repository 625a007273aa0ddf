"""Every compiler mechanism of the seeds, each shown moving the task graph its way."""
import numpy as np
import pytest

from simcore.compiler import CoreType, compile_kernel
from simcore.compiler.build import auto_nbuffer_starts
from simcore.compiler.stitch import MAX_STITCH_LEAF_TASKS, MAX_STITCH_ROOT_CALLS, stitch
from simcore.compiler.trace import unroll_chunks
from simcore.machine.costs import static_pipe_us
from simcore.spec.errors import ConfigError, OoOError
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

from conftest import KERNELS
from pipeline.runner import resolve_kernel

HW = load_hardware("dav_2201")


def build(name, **sets):
    return compile_kernel(resolve_kernel(KERNELS / f"{name}.yaml", sets), HW)


def kernel(body, tensors, tiles=None, params=None, options=None):
    return Kernel.model_validate({"name": "k", "params": params or {}, "tensors": tensors,
                                  "tiles": tiles or {}, "body": body,
                                  "options": options or {}})


def store(name, out="y"):
    """The op that keeps ``name`` alive: its assemble into the kernel's output."""
    return {"op": "assemble", "inputs": [name], "out": out, "offsets": [0, 0]}


def leaf_ops(program):
    return [program.leaf_functions[i].ops for i in program.task_leaf]


# 1. tiling ---------------------------------------------------------------------------
def test_tails_and_empty_tasks_past_the_valid_region():
    t = {"x": {"shape": [256], "role": "input"}, "y": {"shape": [256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [64]},
            {"op": "view", "inputs": ["x"], "out": "v", "shape": [256], "offsets": [0],
             "valid_shape": [100]},
            {"op": "exp", "inputs": ["v"], "out": "e"},
            {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0]}]
    p = compile_kernel(kernel(body, t), HW)
    assert p.leaf_tasks == 4
    # tiles 0 and 1 hold data (64 + 36 valid elements); tiles 2 and 3 are empty tasks
    v = p.work.vector
    tiles = np.bincount(v.task, weights=v.tiles, minlength=4)
    assert np.allclose(tiles, [1.0, 36 / 64, 0.0, 0.0])
    assert np.allclose(np.bincount(v.task, weights=v.bytes, minlength=4), [256, 144, 0, 0])
    vector = static_pipe_us(HW, p)["vector"]    # a partial tile pays part of the fixed cost
    assert vector[0] > vector[1] > 0 and vector[2] == vector[3] == 0
    assert p.work.mte2_bytes[2] == 0


def test_unroll_list_decomposes_greedily():
    assert unroll_chunks(13, [8, 4, 2]) == [8, 4, 1]
    assert unroll_chunks(100, [64, 16, 4]) == [64, 16, 16, 4]
    p = build("glm_attention")
    assert p.root_calls == 32 and p.loop_bodies == 256


def test_glm_paged_copy_form_copies_each_block_through_an_aiv():
    """Upstream's glm_attention copies each s2 step's four K and four V blocks one by one
    into a GM tile the matmuls read: eight AIV copy tasks a step (2048 over the 256 steps),
    none merged (a root call's 64 copies are too few for the automatic vecNBuffer to keep
    48 cores busy), every other task as in the gather form, and each matmul waits for the
    copies of its own step."""
    gather, copies = build("glm_attention"), build("glm_attention_paged_copy")
    moves = [t for t, ops in enumerate(leaf_ops(copies)) if ops == ("move",)]
    assert len(moves) == 2048 == copies.counts()["leaf_tasks"] - gather.counts()["leaf_tasks"]
    assert {copies.leaf_functions[copies.task_leaf[t]].core_type for t in moves} == {CoreType.AIV}
    assert copies.work.mte3_bytes[moves].min() == 128 * 128 * 2      # one block out a task
    fed = {}
    for s, d in zip(copies.edge_src.tolist(), copies.edge_dst.tolist()):
        if s in set(moves):
            fed.setdefault(d, set()).add(s)
    cube = [d for d in fed if copies.leaf_functions[copies.task_leaf[d]].core_type == CoreType.AIC]
    assert cube and all(len(fed[d]) >= 4 for d in cube)      # a step's blocks, at least


# 2. buffers --------------------------------------------------------------------------
@pytest.mark.parametrize("tile, buffer", [
    ({"m": [256, 256], "k": [256, 256], "n": [64, 64]}, "L0A"),
    ({"m": [64, 64], "k": [256, 256], "n": [256, 256]}, "L0B"),
    ({"m": [256, 256], "k": [64, 64], "n": [256, 256]}, "L0C"),
    ({"m": [128, 512], "k": [128, 512], "n": [128, 128]}, "L1"),
])
def test_cube_tiles_over_a_buffer_fail_with_ooo(tile, buffer):
    t = {"a": {"shape": [1024, 1024], "dtype": "fp16"}, "b": {"shape": [1024, 1024], "dtype": "fp16"},
         "y": {"shape": [1024, 1024], "role": "output"}}
    body = [{"set_cube_tile_shapes": tile}, {"op": "matmul", "inputs": ["a", "b"], "out": "c"},
            store("c")]
    with pytest.raises(OoOError) as err:
        compile_kernel(kernel(body, t), HW)
    assert err.value.buffer == buffer and err.value.need > err.value.capacity
    assert "matmul" in err.value.op


def test_tail_axis_must_be_32_byte_aligned():
    t = {"x": {"shape": [64, 256]}, "y": {"shape": [64, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [64, 12]}, {"op": "exp", "inputs": ["x"], "out": "e"},
            store("e")]
    with pytest.raises(ConfigError, match="32 bytes"):
        compile_kernel(kernel(body, t), HW)


def test_ub_checks_count_rows_padded_to_32_bytes():
    """UB pads every row to a 32-byte block: an fp32 [n, 1] column takes 32 n bytes, eight
    times its data, so a column tile that fits by its bytes (16384 x 4 x 2 = 128 KiB) is
    OoO padded (16384 x 32 = 512 KiB even with the result in x's buffer), while the same
    elements as rows of 64 fit."""
    column = {"x": {"shape": [16384, 1]}, "y": {"shape": [16384, 1], "role": "output"}}
    body = [{"set_vec_tile_shapes": [16384, 1]}, {"op": "exp", "inputs": ["x"], "out": "e"},
            store("e")]
    with pytest.raises(OoOError) as err:
        compile_kernel(kernel(body, column), HW)
    assert err.value.buffer == "UB" and err.value.need == 16384 * 32
    rows = {"x": {"shape": [256, 64]}, "y": {"shape": [256, 64], "role": "output"}}
    body = [{"set_vec_tile_shapes": [256, 64]}, {"op": "exp", "inputs": ["x"], "out": "e"},
            store("e")]
    assert compile_kernel(kernel(body, rows), HW).leaf_tasks == 1


def test_unknown_op_and_shape_mismatch_are_clear(tmp_path):
    t = {"x": {"shape": [64, 64]}, "z": {"shape": [32, 64]},
         "y": {"shape": [64, 64], "role": "output"}}
    with pytest.raises(ConfigError, match="must match or broadcast"):
        compile_kernel(kernel([{"set_vec_tile_shapes": [32, 64]},
                               {"op": "add", "inputs": ["x", "z"], "out": "s"}, store("s")],
                              t), HW)
    bad = tmp_path / "k.yaml"
    bad.write_text("name: k\ntensors: {x: {shape: [4]}}\nbody: [{op: softplus, inputs: [x], out: y}]\n")
    from simcore.spec.kernel import load_kernel
    with pytest.raises(ConfigError, match="body\\[0\\].op"):
        load_kernel(bad)


# 3. tile dependencies ----------------------------------------------------------------
def test_aligned_tiles_merge_misaligned_tiles_link_many_to_many():
    aligned = build("sqrt_cast", **{"tiles.cast": [32, 256]})
    assert aligned.leaf_tasks == 3 and aligned.edge_src.size == 0
    assert all(ops == ("sqrt", "cast") for ops in leaf_ops(aligned))
    misaligned = build("sqrt_cast")
    # three Sqrt tiles of 32 rows feed two Cast tiles of 48 rows: the seeds' 3-to-2
    assert misaligned.leaf_tasks == 5
    assert misaligned.edge_src.size == 4
    assert misaligned.workspace_bytes == 96 * 256 * 4


def test_reads_and_writes_of_one_box_keep_their_traced_order():
    """Task 0 writes a box, 1 reads it, 2 overwrites it, 3 reads the new data: 1 waits
    for 0 (read after write), 2 for 0 (write after write) and for 1 (write after read:
    the old data must be read before it is overwritten), 3 for 2.  Only 1 -> 2 carries
    no data."""
    from simcore.compiler.deps import region_edges
    box = np.array([[0, 0]] * 4)
    src, dst, anti = region_edges(np.arange(4), np.zeros(4, np.int64), box, box + 8,
                                  np.array([True, False, True, False]), np.zeros(4, np.int64),
                                  4, kinds=True)
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 1), (0, 2), (1, 2), (2, 3)]
    assert anti.tolist() == [False, False, True, False]


def test_a_write_waits_for_an_earlier_read_of_the_same_memory():
    """exp(x) goes into T, sqrt reads T; then abs(x), which reads nothing sqrt wrote, is
    assembled into T.  Abs's tile must not land before sqrt has read the old data, so it
    starts after sqrt ends, and the neg that reads T afterwards waits for abs."""
    from simcore.machine import simulate
    t = {"x": {"shape": [64, 256], "role": "input"}, "T": {"shape": [64, 256]},
         "y": {"shape": [64, 256], "role": "output"}, "z": {"shape": [64, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [64, 256]},
            {"op": "exp", "inputs": ["x"], "out": "a"},
            {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]},
            {"op": "view", "inputs": ["T"], "out": "tv", "shape": [64, 256], "offsets": [0, 0]},
            {"op": "sqrt", "inputs": ["tv"], "out": "r"}, store("r"),
            {"op": "abs", "inputs": ["x"], "out": "b"},
            {"op": "assemble", "inputs": ["b"], "out": "T", "offsets": [0, 0]},
            {"op": "view", "inputs": ["T"], "out": "tv2", "shape": [64, 256], "offsets": [0, 0]},
            {"op": "neg", "inputs": ["tv2"], "out": "q"}, store("q", "z")]
    k = kernel(body, t)
    p = compile_kernel(k, HW)
    ops = leaf_ops(p)
    tl = simulate(HW, p, k.options.runtime_options)
    reader, writer, later = ops.index(("sqrt",)), ops.index(("abs",)), ops.index(("neg",))
    assert tl.task_start[writer] >= tl.task_end[reader]
    assert tl.task_start[later] >= tl.task_end[writer]


def test_a_write_riding_in_its_producers_task_moves_behind_an_earlier_read():
    """exp(x) is computed first but assembled into T only after sqrt has read T: the write
    goes out from exp's task, so that task moves behind sqrt's, and the neg that reads T
    afterwards sees exp's data.  A reader of T that also reads exp's result joins exp's
    task, which copies T in before it copies its result out."""
    from simcore.machine import simulate
    t = {"x": {"shape": [32, 256], "role": "input"}, "T": {"shape": [32, 256]},
         "y": {"shape": [32, 256], "role": "output"}, "z": {"shape": [32, 256], "role": "output"}}
    def body(reader_inputs):
        return [{"set_vec_tile_shapes": [32, 256]},
                {"op": "abs", "inputs": ["x"], "out": "b"},
                {"op": "assemble", "inputs": ["b"], "out": "T", "offsets": [0, 0]},
                {"op": "exp", "inputs": ["x"], "out": "a"},
                {"op": "view", "inputs": ["T"], "out": "tv", "shape": [32, 256],
                 "offsets": [0, 0]},
                {"op": "add" if len(reader_inputs) > 1 else "sqrt",
                 "inputs": reader_inputs, "out": "r"}, store("r"),
                {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]},
                {"op": "view", "inputs": ["T"], "out": "tv2", "shape": [32, 256],
                 "offsets": [0, 0]},
                {"op": "neg", "inputs": ["tv2"], "out": "q"}, store("q", "z")]
    k = kernel(body(["tv"]), t)
    p = compile_kernel(k, HW)
    ops = leaf_ops(p)
    assert ops == [("abs",), ("sqrt",), ("exp",), ("neg",)]
    tl = simulate(HW, p, k.options.runtime_options)
    assert tl.task_start[ops.index(("exp",))] >= tl.task_end[ops.index(("sqrt",))]
    assert tl.task_start[ops.index(("neg",))] >= tl.task_end[ops.index(("exp",))]
    tied = leaf_ops(compile_kernel(kernel(body(["tv", "a"]), t), HW))
    assert tied == [("abs",), ("exp", "add"), ("neg",)]


def test_a_renamed_state_is_stored_to_memory_of_its_own_each_root_call():
    """acc carries a running value from one root call to the next (``acc[:] = v``): each
    call reads the value the call before stored and stores a new one.  Upstream repoints
    the tensor to the new value, an outcast of its call with workspace of its own, so a
    call's store need not wait for the previous call's readers of the old value; it
    still reads the value the previous call stored (read after write)."""
    t = {"x": {"shape": [32, 256], "role": "input"}, "acc": {"shape": [8, 256]},
         "y": {"shape": [24, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [8, 256]},
            {"op": "view", "inputs": ["x"], "out": "x0", "shape": [8, 256], "offsets": [0, 0]},
            {"op": "exp", "inputs": ["x0"], "out": "e0"},
            {"op": "rename", "inputs": ["e0"], "out": "acc"},
            {"loop": {"name": "L", "idx": "i", "trip": 3}, "body": [
                {"op": "view", "inputs": ["acc"], "out": "old", "shape": [8, 256],
                 "offsets": [0, 0]},
                {"op": "sqrt", "inputs": ["old"], "out": "r"},
                {"op": "assemble", "inputs": ["r"], "out": "y", "offsets": ["8*i", 0]},
                {"op": "view", "inputs": ["x"], "out": "xi", "shape": [8, 256],
                 "offsets": ["8*i + 8", 0]},
                {"op": "exp", "inputs": ["xi"], "out": "e"},
                {"op": "rename", "inputs": ["e"], "out": "acc"}]}]
    p = compile_kernel(kernel(body, t), HW)
    ops = leaf_ops(p)
    edges = set(zip(p.edge_src.tolist(), p.edge_dst.tolist()))
    readers = [i for i, o in enumerate(ops) if o == ("sqrt",)]
    stores = [i for i, o in enumerate(ops) if o == ("exp",)]
    assert len(readers) == 3 and len(stores) == 4
    # each call's sqrt reads what the exp before it stored ...
    assert all((w, r) in edges for w, r in zip(stores, readers))
    # ... and no call's exp waits for the sqrt of the value it replaces
    assert not edges & set(zip(readers, stores[1:]))


def test_per_store_memory_keeps_alike_calls_alike_when_one_loses_a_dead_op():
    """Calls that store a renamed state alike compare alike in the call cache, even when
    dead-op elimination drops an op from some of them: only buffers an op names are
    numbered in a call (a rename names the tensor, not the memory it is stored in)."""
    t = {"x": {"shape": [64, 256], "role": "input"}, "acc": {"shape": [8, 256]},
         "y": {"shape": [8, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [8, 256]},
            {"loop": {"name": "L", "idx": "i", "trip": 4}, "body": [
                {"op": "view", "inputs": ["x"], "out": "xi", "shape": [8, 256],
                 "offsets": ["8*i", 0]},
                {"op": "exp", "inputs": ["xi"], "out": "e"},
                {"op": "sqrt", "inputs": ["xi"], "out": "unused", "cond": "i >= 2"},
                {"op": "rename", "inputs": ["e"], "out": "acc"}]},
            {"op": "view", "inputs": ["acc"], "out": "v", "shape": [8, 256], "offsets": [0, 0]},
            {"op": "abs", "inputs": ["v"], "out": "a"}, store("a")]
    p = compile_kernel(kernel(body, t), HW)
    ops = leaf_ops(p)
    assert ops == [("exp",)] * 4 + [("abs",)]
    # the abs reads the last store only; the stores went to memory of their own each
    assert list(zip(p.edge_src.tolist(), p.edge_dst.tolist())) == [(3, 4)]


def test_a_reshape_of_a_renamed_tensor_rebinds_its_stored_memory():
    """``acc = reshape(acc)`` after ``acc[:] = e``: the value is stored, and the reshape
    gives the stored memory its new shape, which the later view reads."""
    t = {"x": {"shape": [8, 256], "role": "input"}, "acc": {"shape": [8, 256]},
         "y": {"shape": [16, 128], "role": "output"}}
    body = [{"set_vec_tile_shapes": [8, 256]}, {"op": "exp", "inputs": ["x"], "out": "e"},
            {"op": "rename", "inputs": ["e"], "out": "acc"},
            {"op": "reshape", "inputs": ["acc"], "out": "acc", "shape": [16, 128],
             "inplace": True},
            {"set_vec_tile_shapes": [16, 128]},
            {"op": "view", "inputs": ["acc"], "out": "v", "shape": [16, 128], "offsets": [0, 0]},
            {"op": "sqrt", "inputs": ["v"], "out": "r"}, store("r")]
    p = compile_kernel(kernel(body, t), HW)
    assert leaf_ops(p) == [("exp",), ("sqrt",)]
    assert list(zip(p.edge_src.tolist(), p.edge_dst.tolist())) == [(0, 1)]


# 4. depth merge ------------------------------------------------------------------------
def test_reduce_over_a_split_axis_needs_partials_and_a_combine():
    unsplit = build("rmsnorm", **{"tiles.vec": [8, 1024]})
    split = build("rmsnorm")                     # (8, 512): the reduce axis is cut in two
    assert len({ops for ops in leaf_ops(unsplit)}) == 1      # one fused leaf function
    assert unsplit.workspace_bytes == 0 and unsplit.edge_src.size == 0
    assert split.leaf_tasks > unsplit.leaf_tasks
    assert split.workspace_bytes > 0 and split.edge_src.size > 0
    assert split.work.mte2_bytes.sum() > unsplit.work.mte2_bytes.sum()


def test_many_partials_are_combined_a_tile_at_a_time():
    """A column sum over 4096 rows in [16, 256] tiles leaves 256 partial rows: upstream
    reduces them as a tree of tile-sized pieces, so no combining task reads more partials
    than the tile spans (16) and none needs more UB than a tile; 256 -> 16 -> 1.  Upstream's
    automatic vector merge (no vec_nbuffer_setting) then takes the 256 partial tasks 5 at a
    time (as many as keeps them on 48 cores), only those that feed the same combining task:
    16 groups of 16 make 4 tasks each; {-1: 1} (no merge) leaves them 256."""
    t = {"x": {"shape": [4096, 256], "role": "input"}, "y": {"shape": [1, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [16, 256]},
            {"op": "sum", "inputs": ["x"], "axis": 0, "out": "s"},
            {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}]
    merged = compile_kernel(kernel(body, t), HW)
    assert merged.leaf_tasks == 16 * 4 + 16 + 1
    # every merged partial task feeds exactly one combining task
    assert set(np.bincount(merged.edge_src, minlength=merged.leaf_tasks)[:64]) == {1}
    no_merge = {"pass_options": {"vec_nbuffer_setting": {"-1": 1}}}
    p = compile_kernel(kernel(body, t, options=no_merge), HW)
    assert p.leaf_tasks == 256 + 16 + 1
    tile_bytes = 16 * 256 * 4
    assert p.work.mte2_bytes.max() <= tile_bytes
    # the first level reads x once; each later level reads the partials the one before wrote
    assert p.work.mte2_bytes.sum() == 4096 * 256 * 4 + (256 + 16) * 256 * 4
    # a combining task holds what a reduce task holds (input and result), so a tile the
    # reduce takes (16 x 2048 fp32, 128 KiB in, 8 KiB out) the combine takes too
    t["x"]["shape"], t["y"]["shape"] = [4096, 2048], [1, 2048]
    body[0] = {"set_vec_tile_shapes": [16, 2048]}
    assert compile_kernel(kernel(body, t, options=no_merge), HW).leaf_tasks == 256 + 16 + 1


def test_cube_and_vector_never_share_a_leaf_function():
    p = build("glm_attention")
    for leaf in p.leaf_functions:
        assert ("matmul" in leaf.ops) == (leaf.core_type == CoreType.AIC)
        assert leaf.ops == ("matmul",) or "matmul" not in leaf.ops


def test_sg_set_scope_forces_and_limits_merging():
    t = {"x": {"shape": [96, 256], "role": "input"}, "y": {"shape": [96, 256], "dtype": "fp16"}}
    def body(scope_a, scope_b, tile_b):
        return [{"sg_set_scope": scope_a}, {"set_vec_tile_shapes": [32, 256]},
                {"op": "sqrt", "inputs": ["x"], "out": "s"},
                {"sg_set_scope": scope_b}, {"set_vec_tile_shapes": tile_b},
                {"op": "cast", "inputs": ["s"], "dtype": "fp16", "out": "c"},
                {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}]
    def build_body(*args):
        return compile_kernel(kernel(body(*args), t), HW)
    # one scope that merges parallel branches: misaligned tiles forced into one leaf task
    forced = build_body([1, True, False], [1, True, False], [48, 256])
    assert forced.leaf_tasks == 1 and forced.workspace_bytes == 0
    # the int form (no parallel merge) joins producer and consumer tile by tile only, so
    # misaligned tiles stay apart (3 Sqrt + 2 Cast through GM) while aligned ones fuse
    misaligned = build_body(1, 1, [48, 256])
    assert misaligned.leaf_tasks == 5 and misaligned.workspace_bytes > 0
    aligned = build_body(1, 1, [32, 256])
    assert aligned.leaf_tasks == 3 and aligned.workspace_bytes == 0
    # aligned tiles in different scopes: kept apart, each tile of each scope its own task
    apart = build_body(1, 2, [32, 256])
    assert apart.leaf_tasks == 6 and apart.workspace_bytes > 0
    # scope -1 is no scope: the automatic merge fuses the aligned tiles
    auto = build_body([-1, False, False], [-1, False, False], [32, 256])
    assert auto.leaf_tasks == 3 and auto.workspace_bytes == 0


def test_sg_set_scope_as_a_kernel_pass_option_scopes_every_op():
    """set_pass_options(sg_set_scope=...) given to the whole kernel (its pass_options)
    scopes the ops as the same statement at the head of its body does: the guide's
    misaligned Sqrt -> Cast forced into one leaf task, where unscoped it takes five."""
    t = {"x": {"shape": [96, 256], "role": "input"},
         "y": {"shape": [96, 256], "dtype": "fp16", "role": "output"}}
    ops_ = [{"set_vec_tile_shapes": [32, 256]}, {"op": "sqrt", "inputs": ["x"], "out": "s"},
            {"set_vec_tile_shapes": [48, 256]},
            {"op": "cast", "inputs": ["s"], "dtype": "fp16", "out": "c"},
            {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}]
    unscoped = compile_kernel(kernel(ops_, t), HW)
    option = compile_kernel(kernel(ops_, t, options={
        "pass_options": {"sg_set_scope": [1, True, False]}}), HW)
    statement = compile_kernel(kernel([{"sg_set_scope": [1, True, False]}, *ops_], t), HW)
    assert unscoped.leaf_tasks == 5
    assert option.leaf_tasks == statement.leaf_tasks == 1
    assert leaf_ops(option) == leaf_ops(statement)
    # a body statement still overrides the option from where it stands
    reset = compile_kernel(kernel([{"sg_set_scope": -1}, *ops_], t, options={
        "pass_options": {"sg_set_scope": [1, True, False]}}), HW)
    assert reset.leaf_tasks == 5


def test_allow_cross_scope_merge_lets_a_scope_merge_with_other_nodes():
    """sg_set_scope's third field: whether the scope's subgraph (a supernode) may merge with
    other nodes.  A Sqrt in scope 1 feeding an aligned, unscoped Cast stays apart without it
    (3 + 3 tasks through GM) and fuses with it (3 tasks, no workspace); two scopes meet only
    when both allow it."""
    t = {"x": {"shape": [96, 256], "role": "input"}, "y": {"shape": [96, 256], "dtype": "fp16"}}
    def build_body(scope_a, scope_b):
        return compile_kernel(kernel(
            [{"sg_set_scope": scope_a}, {"set_vec_tile_shapes": [32, 256]},
             {"op": "sqrt", "inputs": ["x"], "out": "s"},
             {"sg_set_scope": scope_b},
             {"op": "cast", "inputs": ["s"], "dtype": "fp16", "out": "c"},
             {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}], t), HW)
    kept = build_body([1, False, False], -1)
    assert kept.leaf_tasks == 6 and kept.workspace_bytes > 0
    crossed = build_body([1, False, True], -1)
    assert crossed.leaf_tasks == 3 and crossed.workspace_bytes == 0
    assert all(ops == ("sqrt", "cast") for ops in leaf_ops(crossed))
    # with allow_parallel_merge as well, the Cast joins the scope's single task
    one = build_body([1, True, True], -1)
    assert one.leaf_tasks == 1 and one.workspace_bytes == 0
    # another scope: fused when both allow it, apart when either does not
    assert build_body([1, False, True], [2, False, True]).leaf_tasks == 3
    assert build_body([1, False, True], [2, False, False]).leaf_tasks == 6
    assert build_body([1, False, False], [2, False, True]).leaf_tasks == 6


def test_a_scope_without_parallel_merge_keeps_a_split_reduce_in_pieces():
    """The seeds' RMSNorm case inside one scope: cutting the reduce axis leaves partial
    subgraphs and a combine meeting through GM unless the scope merges parallel tiles."""
    t = {"x": {"shape": [16, 1024], "role": "input"}, "y": {"shape": [16, 1], "dtype": "fp32"}}
    def body(scope, tile):
        return [{"sg_set_scope": scope}, {"set_vec_tile_shapes": tile},
                {"op": "exp", "inputs": ["x"], "out": "e"},
                {"op": "sum", "inputs": ["e"], "axis": -1, "out": "s"},
                {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}]
    whole = compile_kernel(kernel(body(1, [16, 1024]), t), HW)
    split = compile_kernel(kernel(body(1, [16, 256]), t), HW)
    merged = compile_kernel(kernel(body([1, True, False], [16, 256]), t), HW)
    assert whole.leaf_tasks == 1 and whole.workspace_bytes == 0
    assert split.leaf_tasks == 5 and split.workspace_bytes > 0 and split.edge_src.size == 4
    assert merged.leaf_tasks == 1 and merged.workspace_bytes == 0


RUNNING = {"x": {"shape": [16, 256], "role": "input"},
           "y": {"shape": [1, 256], "role": "output"},
           "acc": {"shape": [1, 256], "fresh_per": "L0"}}


def running_sum(carry: str, scope: int):
    """acc += exp(x[i]) over an outer iteration's 16 rows, unrolled 8 to a root call; the
    running value goes from one step to the next by ``carry``: a rename of the tensor (upstream's
    acc[:] = v) or an assemble into it and a view back (GM)."""
    if carry == "rename":
        keep = [{"op": "rename", "inputs": ["a"], "out": "acc"}]
        old = []
        prev = "acc"
    else:
        keep = [{"op": "assemble", "inputs": ["a"], "out": "acc", "offsets": [0, 0]}]
        old = [{"op": "view", "inputs": ["acc"], "out": "o", "shape": [1, 256],
                "offsets": [0, 0], "cond": "i > 0"}]
        prev = "o"
    step = [{"op": "view", "inputs": ["x"], "out": "r", "shape": [1, 256], "offsets": ["i", 0]},
            {"sg_set_scope": scope},
            {"op": "exp", "inputs": ["r"], "out": "e"}, *old,
            {"op": "add", "inputs": [prev, "e"], "out": "a", "cond": "i > 0"},
            {"op": "add", "inputs": ["e"], "scalar": 0.0, "out": "a", "cond": "i == 0"},
            *keep, {"sg_set_scope": -1},
            {"op": "assemble", "inputs": ["a"], "out": "y", "offsets": [0, 0], "cond": "i == 15"}]
    body = [{"set_vec_tile_shapes": [1, 256]},
            {"loop": {"name": "L0", "idx": "j", "trip": 1},
             "body": [{"loop": {"name": "L", "idx": "i", "trip": 16, "unroll_list": [8]},
                       "body": step}]}]
    return compile_kernel(kernel(body, RUNNING), HW)


def test_a_renamed_running_value_stays_on_chip_within_a_root_call():
    """acc[:] = v is no op upstream (tensor.cpp's Move repoints the tensor): within a root
    call of eight unrolled steps the next step reads the value itself, and the call writes
    it into acc once, for the next call.  Carried through GM, each step writes and reads."""
    renamed, through_gm = running_sum("rename", 1), running_sum("gm", 1)
    assert renamed.root_calls == through_gm.root_calls == 2
    # the scope's chain runs on across the unrolled steps: one leaf task per root call
    assert renamed.leaf_tasks == 2
    assert through_gm.leaf_tasks == 16
    assert renamed.work.mte3_bytes.sum() < through_gm.work.mte3_bytes.sum() / 4


def test_a_scope_chain_crosses_unrolled_bodies_only_through_a_value():
    """Upstream merges a scope's producer -> consumer pairs whatever loop body they came
    from (BuildSuperNodeGraph); steps that share no value stay apart."""
    assert running_sum("rename", 1).leaf_tasks == 2
    t = {"x": {"shape": [8, 256], "role": "input"}, "y": {"shape": [8, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [1, 256]},
            {"loop": {"name": "L", "idx": "i", "trip": 8, "unroll_list": [8]},
             "body": [{"op": "view", "inputs": ["x"], "out": "r", "shape": [1, 256],
                       "offsets": ["i", 0]},
                      {"sg_set_scope": 1},
                      {"op": "exp", "inputs": ["r"], "out": "e"},
                      {"op": "sqrt", "inputs": ["e"], "out": "q"},
                      {"sg_set_scope": -1},
                      {"op": "assemble", "inputs": ["q"], "out": "y", "offsets": ["i", 0]}]}]
    independent = compile_kernel(kernel(body, t), HW)
    assert independent.root_calls == 1 and independent.leaf_tasks == 8


def test_a_scope_union_that_would_need_a_cycle_is_kept_apart():
    """Scope 1 makes a, an unscoped op reads a, scope 1 reads that and then a again: uniting
    a's group with the later one would put it after a group that reads it and feeds the
    later one (upstream would pull the unscoped op into the union).  The groups stay apart
    and every producer runs before its consumer."""
    from simcore.machine import simulate
    t = {"x": {"shape": [32, 256], "role": "input"}, "y": {"shape": [32, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [32, 256]},
            {"sg_set_scope": 1}, {"op": "exp", "inputs": ["x"], "out": "a", "label": "a"},
            {"sg_set_scope": -1}, {"set_vec_tile_shapes": [16, 256]},
            {"op": "sqrt", "inputs": ["a"], "out": "d", "label": "d"},
            {"sg_set_scope": 1}, {"set_vec_tile_shapes": [32, 256]},
            {"op": "abs", "inputs": ["d"], "out": "b", "label": "b"},
            {"op": "add", "inputs": ["a", "b"], "out": "c", "label": "c"},
            {"sg_set_scope": -1}, store("c")]
    k = kernel(body, t)
    p = compile_kernel(k, HW)
    # the scope's two groups stay apart: exp alone, abs and add (which reads a through GM)
    assert sorted(leaf_ops(p)) == [("abs", "add"), ("exp",), ("sqrt",), ("sqrt",)]
    tl = simulate(HW, p, k.options.runtime_options)
    ops = leaf_ops(p)
    end = lambda op: max(tl.task_end[i] for i, o in enumerate(ops) if op in o)
    start = lambda op: min(tl.task_start[i] for i, o in enumerate(ops) if op in o)
    assert start("sqrt") >= end("exp") and start("abs") >= end("sqrt")


# an input, a temporary the kernel writes and reads, two outputs
X_T_Y_Z = {"x": {"shape": [32, 256], "role": "input"}, "T": {"shape": [32, 256]},
           "y": {"shape": [32, 256], "role": "output"},
           "z": {"shape": [32, 256], "role": "output"}}


def test_a_gm_read_after_a_scope_union_still_waits_for_the_write():
    """After a union moved a's group to the later one's place, an op that reads through GM
    what a's group writes cannot join a group that now runs before it (the task order is
    what the GM dependencies are found from)."""
    from simcore.machine import simulate
    t = X_T_Y_Z
    body = [{"set_vec_tile_shapes": [32, 256]},
            {"sg_set_scope": 1}, {"op": "exp", "inputs": ["x"], "out": "a"},
            {"sg_set_scope": -1}, {"op": "sqrt", "inputs": ["x"], "out": "w"},
            {"sg_set_scope": 1}, {"op": "abs", "inputs": ["x"], "out": "b"},
            {"op": "add", "inputs": ["a", "b"], "out": "c"}, {"sg_set_scope": -1},
            {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]},
            {"op": "view", "inputs": ["T"], "out": "tv", "shape": [32, 256], "offsets": [0, 0]},
            {"op": "sub", "inputs": ["w", "tv"], "out": "w2"},
            store("w2", "z"), store("c")]
    k = kernel(body, t)
    p = compile_kernel(k, HW)
    ops = leaf_ops(p)
    assert ("exp", "abs", "add") in ops         # the union
    tl = simulate(HW, p, k.options.runtime_options)
    writer = ops.index(("exp", "abs", "add"))
    reader = next(i for i, o in enumerate(ops) if "sub" in o)
    assert tl.task_start[reader] >= tl.task_end[writer]


def test_a_scope_union_may_move_a_gm_reader_past_the_write_it_reads():
    """The groups a union moves behind the later one keep their GM order with the groups
    they pass: a reader moved past the write it reads still reads after it, so the union
    stands (upstream's glm_attention at 883e7dfb assembles each step's K and V blocks into
    GM, and P @ V, moved behind the next step's softmax, reads them)."""
    from simcore.machine import simulate
    t = X_T_Y_Z
    body = [{"set_vec_tile_shapes": [32, 256]},
            {"sg_set_scope": 1}, {"op": "exp", "inputs": ["x"], "out": "a"},
            {"sg_set_scope": -1}, {"op": "sqrt", "inputs": ["x"], "out": "w"},
            {"op": "assemble", "inputs": ["w"], "out": "T", "offsets": [0, 0]},
            {"op": "view", "inputs": ["T"], "out": "tv", "shape": [32, 256], "offsets": [0, 0]},
            {"op": "sub", "inputs": ["a", "tv"], "out": "d"}, store("d", "z"),
            {"sg_set_scope": 1}, {"op": "abs", "inputs": ["x"], "out": "b"},
            {"op": "add", "inputs": ["a", "b"], "out": "c"}, {"sg_set_scope": -1}, store("c")]
    k = kernel(body, t)
    p = compile_kernel(k, HW)
    ops = leaf_ops(p)
    assert ("exp", "abs", "add") in ops         # united past the write of T
    tl = simulate(HW, p, k.options.runtime_options)
    writer = ops.index(("sqrt",))
    reader = next(i for i, o in enumerate(ops) if "sub" in o)
    assert tl.task_start[reader] >= tl.task_end[writer]


def test_a_gm_read_never_joins_the_group_that_writes_it():
    """exp's tiles write T and a later op reads rows of T that another of exp's tiles
    wrote: joining exp's group would put the read in one of its tasks with no edge to the
    task that writes those rows, so the reader gets tasks of its own, after the writes."""
    from simcore.machine import simulate
    t = {"x": {"shape": [32, 256], "role": "input"}, "T": {"shape": [48, 256]},
         "y": {"shape": [32, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [16, 256]},
            {"op": "exp", "inputs": ["x"], "out": "a"},
            {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]},
            {"op": "view", "inputs": ["T"], "out": "tv", "shape": [32, 256], "offsets": [16, 0]},
            {"op": "sub", "inputs": ["a", "tv"], "out": "d"}, store("d")]
    k = kernel(body, t)
    p = compile_kernel(k, HW)
    ops = leaf_ops(p)
    assert ops.count(("sub",)) == 2
    tl = simulate(HW, p, k.options.runtime_options)
    writes_end = max(tl.task_end[i] for i, o in enumerate(ops) if "exp" in o)
    assert min(tl.task_start[i] for i, o in enumerate(ops) if "sub" in o) >= writes_end


def test_a_scope_union_keeps_two_writes_of_a_tensor_in_their_order():
    """sqrt then neg write T, and relu reads it: a union that moved sqrt's writer behind
    neg's would leave relu reading sqrt's result, so it is refused."""
    t = X_T_Y_Z
    body = [{"set_vec_tile_shapes": [32, 256]},
            {"sg_set_scope": 1}, {"op": "exp", "inputs": ["x"], "out": "a"},
            {"sg_set_scope": -1}, {"op": "sqrt", "inputs": ["a"], "out": "m"},
            {"op": "assemble", "inputs": ["m"], "out": "T", "offsets": [0, 0]},
            {"op": "neg", "inputs": ["x"], "out": "n"},
            {"op": "assemble", "inputs": ["n"], "out": "T", "offsets": [0, 0]},
            {"sg_set_scope": 1}, {"op": "abs", "inputs": ["x"], "out": "b"},
            {"op": "add", "inputs": ["a", "b"], "out": "c"}, {"sg_set_scope": -1}, store("c"),
            {"op": "view", "inputs": ["T"], "out": "tv", "shape": [32, 256], "offsets": [0, 0]},
            {"op": "relu", "inputs": ["tv"], "out": "r"}, store("r", "z")]
    p = compile_kernel(kernel(body, t), HW)
    ops = leaf_ops(p)
    assert ops.index(("sqrt",)) < ops.index(("neg",)) < ops.index(("relu",))
    edges = set(zip(p.edge_src.tolist(), p.edge_dst.tolist()))
    assert (ops.index(("neg",)), ops.index(("relu",))) in edges


def test_a_renamed_value_is_read_like_the_value():
    """A consumer of the tensor a value was renamed to reads the value: it may not take the
    value's UB buffer while the call still copies the value out, as with any result read
    twice."""
    t = {"x": {"shape": [128, 256], "role": "input"}, "acc": {"shape": [128, 256]},
         "y": {"shape": [128, 256], "role": "output"}, "y1": {"shape": [128, 256], "role": "output"}}
    head = [{"set_vec_tile_shapes": [128, 256]}, {"op": "exp", "inputs": ["x"], "out": "e"}]
    stored = compile_kernel(kernel(head + [{"op": "exp", "inputs": ["e"], "out": "f"},
                                           store("e", "y1"), store("f")], t), HW)
    renamed = compile_kernel(kernel(head + [{"op": "rename", "inputs": ["e"], "out": "acc"},
                                            {"op": "exp", "inputs": ["acc"], "out": "f"},
                                            store("f")], t), HW)
    assert leaf_ops(renamed) == leaf_ops(stored) == [("exp",), ("exp",)]


def test_rename_names_an_op_result_as_a_tensor_of_its_shape():
    t = {"x": {"shape": [8, 256], "role": "input"}, "y": {"shape": [8, 256], "role": "output"},
         "acc": {"shape": [8, 256]}, "small": {"shape": [4, 256]}}
    def build_body(*stmts):
        return compile_kernel(kernel([{"set_vec_tile_shapes": [8, 256]}, *stmts], t), HW)
    with pytest.raises(ConfigError, match=r"body\[1\].*rename of 'x', which is GM data"):
        build_body({"op": "rename", "inputs": ["x"], "out": "acc"})
    with pytest.raises(ConfigError, match=r"body\[2\].out.*'e' is none"):
        build_body({"op": "exp", "inputs": ["x"], "out": "e"},
                   {"op": "rename", "inputs": ["e"], "out": "e"})
    with pytest.raises(ConfigError, match=r"body\[2\].*\[8, 256\] value.*\[4, 256\]"):
        build_body({"op": "exp", "inputs": ["x"], "out": "e"},
                   {"op": "rename", "inputs": ["e"], "out": "small"})


def test_a_write_into_a_renamed_tensor_stores_the_value_first():
    """A partial assemble into a tensor that names an on-chip value writes the tensor's
    memory: the value goes there first, then the assemble overwrites its part.  That
    memory is the value's own (upstream repoints the tensor to the value), so the
    tensor's name now stands for it: both writes land there and the add reads it."""
    from simcore.compiler.trace import trace
    t = {"x": {"shape": [8, 256], "role": "input"}, "y": {"shape": [8, 256], "role": "output"},
         "acc": {"shape": [8, 256]}}
    body = [{"set_vec_tile_shapes": [8, 256]},
            {"op": "exp", "inputs": ["x"], "out": "e"},
            {"op": "rename", "inputs": ["e"], "out": "acc"},
            {"op": "view", "inputs": ["x"], "out": "r", "shape": [4, 256], "offsets": [0, 0]},
            {"op": "sqrt", "inputs": ["r"], "out": "q"},
            {"op": "assemble", "inputs": ["q"], "out": "acc", "offsets": [4, 0]},
            {"op": "add", "inputs": ["acc", "x"], "out": "z"}, store("z")]
    (call,) = trace(kernel(body, t)).calls
    writes = [(op.op, op.inputs[0], op.out) for op in call.ops if op.op == "assemble"]
    stored = writes[0][2]
    assert stored != "acc" and stored.startswith("acc@")
    assert writes[:2] == [("assemble", "acc~0", stored), ("assemble", "q", stored)]
    add = next(op for op in call.ops if op.op == "add")
    assert add.inputs == (stored, "x")      # after the write, acc is GM again
    compile_kernel(kernel(body, t), HW)


def test_sg_set_scope_is_validated_like_upstream():
    for bad in ([1, 2], [-5, False, False], [-1, True, False], [1, "yes", False], True):
        with pytest.raises(Exception):
            kernel([{"sg_set_scope": bad}, {"op": "exp", "inputs": ["x"], "out": "e"}],
                   {"x": {"shape": [8]}})


def _edges_in_program_order(p):
    return bool(np.all(p.edge_src < p.edge_dst))


def test_a_constant_joins_the_subgraph_of_the_op_that_uses_it():
    """Per-row int8 quantisation: amax, then 127 / amax with the 127 from pypto.full.  The
    full has nothing to load, so it goes with its consumer: one subgraph, no GM round trip
    between the amax and the divide (it used to start a subgraph of its own, which the
    divide joined, reading the amax through GM)."""
    t = {"x": {"shape": [8, 128], "role": "input"},
         "y": {"shape": [8, 128], "dtype": "int8", "role": "output"}}
    body = [{"set_vec_tile_shapes": [8, 128]},
            {"op": "abs", "inputs": ["x"], "out": "a"},
            {"op": "amax", "inputs": ["a"], "axis": -1, "out": "m"},
            {"op": "full", "out": "c", "shape": [8, 1], "value": 127.0, "dtype": "fp32"},
            {"op": "div", "inputs": ["c", "m"], "out": "sq"},
            {"op": "mul", "inputs": ["x", "sq"], "out": "xs"},
            {"op": "cast", "inputs": ["xs"], "dtype": "int8", "out": "q"},
            {"op": "assemble", "inputs": ["q"], "out": "y", "offsets": [0, 0]}]
    p = compile_kernel(kernel(body, t), HW)
    assert leaf_ops(p) == [("abs", "amax", "full", "div", "mul", "cast")]
    assert p.workspace_bytes == 0
    # a constant two consumers in different subgraphs read stays where the first put it
    body2 = body[:3] + [{"op": "full", "out": "c", "shape": [8, 128], "value": 2.0,
                         "dtype": "fp32"},
                        {"op": "mul", "inputs": ["a", "c"], "out": "a2"},
                        {"set_vec_tile_shapes": [4, 128]},
                        {"op": "add", "inputs": ["c"], "scalar": 1.0, "out": "c1"},
                        {"op": "assemble", "inputs": ["c1"], "out": "y", "offsets": [0, 0]},
                        {"op": "assemble", "inputs": ["a2"], "out": "y", "offsets": [0, 0]}]
    p2 = compile_kernel(kernel(body2, t), HW)
    assert any("full" in ops and "mul" in ops for ops in leaf_ops(p2))
    assert _edges_in_program_order(p2)


def _split_heads(dequant_tile, rope_tile):
    """[8, 8192] dequantised by rows of dequant_tile, reshaped to 64 heads of 128 and the
    first 64 dims of each head cast by rope_tile (QuantIndexerProlog's query path)."""
    t = {"q": {"shape": [8, 8192], "role": "input"},
         "y": {"shape": [8, 64, 64], "role": "output"}}
    body = [{"set_vec_tile_shapes": dequant_tile},
            {"op": "mul", "inputs": ["q"], "scalar": 0.5, "out": "d"},
            {"op": "reshape", "inputs": ["d"], "shape": [8, 64, 128], "inplace": False,
             "out": "d3"},
            {"op": "view", "inputs": ["d3"], "out": "rope", "shape": [8, 64, 64],
             "offsets": [0, 0, 0]},
            {"set_vec_tile_shapes": rope_tile},
            {"op": "add", "inputs": ["rope"], "scalar": 1.0, "out": "r"},
            {"op": "assemble", "inputs": ["r"], "out": "y", "offsets": [0, 0, 0]}]
    return compile_kernel(kernel(body, t), HW)


def test_a_strided_read_inside_the_producers_tile_stays_in_its_subgraph():
    """A (1, 32, 64) tile of the head view is 32 runs of 64 of one dequantised row, all
    inside the (1, 4096) tile that row's producer holds in UB: the consumer reads it there,
    one subgraph per tile and no workspace.  A (1, 64, 64) tile spans two producer tiles,
    so it goes through the producer's workspace as before."""
    inside = _split_heads([1, 4096], [1, 32, 64])
    assert inside.leaf_tasks == 16 and inside.workspace_bytes == 0
    assert all(ops == ("mul", "add") for ops in leaf_ops(inside))
    across = _split_heads([1, 4096], [1, 64, 64])
    assert across.workspace_bytes > 0
    assert ("mul",) in leaf_ops(across) and ("add",) in leaf_ops(across)
    assert _edges_in_program_order(across)


def test_a_subgraph_that_only_loads_inputs_runs_before_the_op_that_reads_it():
    """RoPE's cos is cast in its own (1, 64) tiles and read, broadcast over the heads, by
    two (1, 32, 64) tiles each: it cannot join them.  Traced after the dequantisation, it
    still must not keep the rope ops out of the dequantisation's subgraph: it reads only a
    kernel input, so its tasks go first and every dependency runs forward in task order."""
    t = {"q": {"shape": [8, 8192], "role": "input"}, "cos": {"shape": [8, 64], "role": "input"},
         "y": {"shape": [8, 64, 64], "role": "output"}}
    body = [{"set_vec_tile_shapes": [1, 4096]},
            {"op": "mul", "inputs": ["q"], "scalar": 0.5, "out": "d"},
            {"op": "reshape", "inputs": ["d"], "shape": [8, 64, 128], "inplace": False,
             "out": "d3"},
            {"op": "view", "inputs": ["d3"], "out": "rope", "shape": [8, 64, 64],
             "offsets": [0, 0, 0]},
            {"set_vec_tile_shapes": [1, 64]},
            {"op": "cast", "inputs": ["cos"], "dtype": "fp32", "out": "c"},
            {"op": "reshape", "inputs": ["c"], "shape": [8, 1, 64], "inplace": False,
             "out": "c3"},
            {"set_vec_tile_shapes": [1, 32, 64]},
            {"op": "mul", "inputs": ["rope", "c3"], "out": "r"},
            {"op": "assemble", "inputs": ["r"], "out": "y", "offsets": [0, 0, 0]}]
    p = compile_kernel(kernel(body, t), HW)
    ops = leaf_ops(p)
    assert ops.count(("mul", "mul")) == 16 and ops.count(("cast",)) == 8
    # the casts come first in task order, and each rope tile waits for its token's cast
    first_mul = ops.index(("mul", "mul"))
    assert all(o == ("cast",) for o in ops[:first_mul]) and first_mul == 8
    assert _edges_in_program_order(p)
    assert np.unique(p.edge_src[p.edge_dst >= first_mul]).size == 8


def test_an_op_reading_an_input_chain_and_a_computed_value_keeps_both_on_chip():
    """A transposed kernel input multiplied into a computed value: placed op by op, the
    mul would join the first input's subgraph and meet the other through GM; as a graph
    partitioner merges connected ops, the chain that only loads an input moves into the
    other's subgraph, and the product is one leaf task that writes only its result."""
    t = {"x": {"shape": [16, 128], "role": "input"}, "w": {"shape": [128, 16], "role": "input"},
         "y": {"shape": [16, 128], "role": "output"}}
    body = [{"set_vec_tile_shapes": [128, 128]},
            {"op": "exp", "inputs": ["x"], "out": "e"},
            {"op": "transpose", "inputs": ["w"], "perm": [1, 0], "out": "wt"},
            {"op": "mul", "inputs": ["wt", "e"], "out": "m"},
            {"op": "assemble", "inputs": ["m"], "out": "y", "offsets": [0, 0]}]
    p = compile_kernel(kernel(body, t), HW)
    assert p.leaf_tasks == 1 and p.workspace_bytes == 0
    assert sorted(leaf_ops(p)[0]) == ["exp", "mul", "transpose"]


def test_a_row_by_row_inverse_keeps_its_partial_result_on_chip():
    """The GDR case's inverse (docs/cases.md G1): fourteen steps, each reading a row of
    the input and the rows done so far.  The steps share leaf tasks and the partial inverse
    never goes through a workspace: GM sees the result once.  Only each step's coefficient
    column does, its [i, 8] -> [8 i, 1] reshape being one UB cannot hold (a 4-byte row in a
    32-byte block): out and back in, fourteen round trips of 32 i bytes."""
    p = build("gdr_inverse")
    assert p.leaf_tasks == 1
    columns = sum(i * 8 * 4 for i in range(2, 16))
    assert p.workspace_bytes == columns and p.work.round_trips.sum() == 14
    assert p.work.mte3_bytes.sum() == 16 * 128 * 4 + columns  # the inverse, written once


def _column_of_row(cols, rows=8, dtype="fp32"):
    """exp over x, the result reshaped [rows, cols] -> [rows * cols, 1] and multiplied
    into y's [rows * cols, 16] tile in the same leaf task."""
    t = {"x": {"shape": [rows, cols], "dtype": dtype, "role": "input"},
         "y": {"shape": [rows * cols, 16], "dtype": dtype, "role": "input"},
         "z": {"shape": [rows * cols, 16], "dtype": dtype, "role": "output"}}
    body = [{"set_vec_tile_shapes": [128, 128]},
            {"op": "exp", "inputs": ["x"], "out": "e"},
            {"op": "reshape", "inputs": ["e"], "shape": [rows * cols, 1], "out": "col"},
            {"op": "mul", "inputs": ["col", "y"], "out": "m"},
            {"op": "assemble", "inputs": ["m"], "out": "z", "offsets": [0, 0]}]
    return compile_kernel(kernel(body, t), HW)


def test_a_reshape_ub_cannot_hold_goes_out_and_back_in_its_leaf_task():
    """UB pads every row to a 32-byte block, so a reshape to (or from) a last axis of
    another size is no reinterpretation of the bytes there: upstream's
    RemoveUnalignedReshape writes the input to a GM workspace and reads the output back.
    The op stays in its leaf task; the task pays a copy-out and a copy-in, and the column
    comes in one 4-byte row per burst.  The same reshape of 16-element rows into 8-element
    ones stays in UB."""
    column = _column_of_row(cols=8)
    assert column.leaf_tasks == 1
    assert column.work.round_trips.tolist() == [1.0]
    assert column.workspace_bytes == 8 * 8 * 4
    assert column.work.mte2_bursts[0] >= 64          # the column's 64 rows, one run each
    t = {"x": {"shape": [8, 16], "role": "input"}, "z": {"shape": [16, 8], "role": "output"}}
    body = [{"set_vec_tile_shapes": [128, 128]},
            {"op": "exp", "inputs": ["x"], "out": "e"},
            {"op": "reshape", "inputs": ["e"], "shape": [16, 8], "out": "r"},
            {"op": "sqrt", "inputs": ["r"], "out": "s"},
            {"op": "assemble", "inputs": ["s"], "out": "z", "offsets": [0, 0]}]
    aligned = compile_kernel(kernel(body, t), HW)
    assert aligned.leaf_tasks == 1
    assert aligned.work.round_trips.sum() == 0 and aligned.workspace_bytes == 0
    # the round trip is latency on the task's critical path
    from simcore.machine.costs import pipe_cycles
    assert pipe_cycles(HW, column.work)["mte3"][0] > \
        HW.pipes.mte3.fixed_cycles + HW.pipes.mte2.fixed_cycles


def test_which_reshapes_ub_cannot_hold():
    """Upstream's test, per reshape of a UB value: was the raw last axis of its input (the
    tensor it views) or of its output padded to the 32-byte block?  Either way the read
    goes through the workspace, in the reshape's output geometry when only reshapes lie
    between it and the producer, in the producer's when a view does."""
    from simcore.compiler.values import LocalValue
    whole = lambda shape: (np.zeros((1, len(shape)), np.int64), np.asarray([shape]))
    to_column = LocalValue(0, (64, 1), "fp32", (("reshape", (8, 8), "w"),))
    lo, hi, shape = to_column.unaligned_box(*whole((64, 1)), (8, 8), 4)
    assert shape == (64, 1) and hi.tolist() == [[64, 1]]
    from_column = LocalValue(0, (8, 8), "fp32", (("reshape", (64, 1), "w"),))
    assert from_column.unaligned_box(*whole((8, 8)), (64, 1), 4) is not None
    aligned = LocalValue(0, (16, 8), "fp32", (("reshape", (8, 16), "w"),))
    assert aligned.unaligned_box(*whole((16, 8)), (8, 16), 4) is None
    # 16 bf16 elements fill a block, 8 do not
    assert LocalValue(0, (16, 16), "bf16", (("reshape", (8, 32), "w"),)) \
        .unaligned_box(*whole((16, 16)), (8, 32), 2) is None
    assert LocalValue(0, (32, 8), "bf16", (("reshape", (8, 32), "w"),)) \
        .unaligned_box(*whole((32, 8)), (8, 32), 2) is not None
    # a reshape to a column and back is one reshape to the same shape (upstream folds
    # consecutive reshapes): nothing to send through GM
    back = LocalValue(0, (8, 8), "fp32", (("reshape", (8, 8), "w"), ("reshape", (64, 1), "w")))
    assert back.unaligned_box(*whole((8, 8)), (8, 8), 4) is None
    # a view of a 16-wide result reshaped to a column: read in the producer's geometry
    viewed = LocalValue(0, (16, 1), "fp32", (("view", (0, 0), (8, 16)),
                                             ("reshape", (8, 2), "w")))
    lo, hi, shape = viewed.unaligned_box(*whole((16, 1)), (8, 16), 4)
    assert shape == (8, 16) and hi.tolist() == [[8, 2]]


def test_rows_short_of_a_ub_block_load_one_burst_each():
    """A GM box whose rows span the tensor's width is one contiguous run, but UB pads each
    row to 32 bytes: rows of a whole number of blocks still join, a [n, 1] fp32 column
    lands as n runs."""
    from simcore.compiler.values import contiguous_bytes
    lo = np.zeros((1, 2), np.int64)
    column = contiguous_bytes(lo, np.asarray([[64, 1]]), (64, 1), 4, "ND")
    rows = contiguous_bytes(lo, np.asarray([[64, 8]]), (64, 8), 4, "ND")
    assert column.tolist() == [4] and rows.tolist() == [64 * 8 * 4]


def _exp_chain(reread: list[str]):
    """x -> eight dependent exps in (32, 512) fp32 tiles (64 KiB each, UB 192 KiB), then
    adds of the last exp with the ``reread`` ones."""
    t = {"x": {"shape": [32, 512], "role": "input"}, "y": {"shape": [32, 512], "role": "output"}}
    body = [{"set_vec_tile_shapes": [32, 512]}]
    body += [{"op": "exp", "inputs": ["x" if k == 0 else f"e{k}"], "out": f"e{k + 1}"}
             for k in range(8)]
    last = "e8"
    for k, name in enumerate(reread):
        body.append({"op": "add", "inputs": [last, name], "out": f"s{k}"})
        last = f"s{k}"
    body.append({"op": "assemble", "inputs": [last], "out": "y", "offsets": [0, 0]})
    return compile_kernel(kernel(body, t), HW)


def test_ub_counts_the_tiles_live_at_once_not_every_tile_of_the_chain():
    """Nine 64-KiB tiles pass through a chain of exps, but only two are live at any op (a
    buffer is reused once its last reader is done), and each exp's result takes the buffer
    of the one before it (its only reader): one leaf function.  With the first two exps read
    again at the end, three tiles are live along the chain: still one.  With the first
    three, four are, more than UB holds, and the chain splits."""
    assert _exp_chain([]).leaf_tasks == 1
    assert _exp_chain(["e1", "e2"]).leaf_tasks == 1
    assert _exp_chain(["e1", "e2", "e3"]).leaf_tasks == 2


def _group_order_is_topological(body, tensors):
    """Compile one call and check that no op reads a result of a group that runs after its
    own, and that every GM write traced before a read of that tensor runs before it."""
    from simcore.compiler.limits import Limits
    from simcore.compiler.tiling import RootCallTiler
    from simcore.compiler.trace import trace
    from simcore.compiler.values import GmValue, LocalValue
    k = kernel(body, tensors)
    tiler = RootCallTiler(k, Limits.of(HW), trace(k).calls[0], 0)
    tiler.run()
    # each group's place in the order run() expands them in, ties broken as it breaks them
    order = sorted(range(len(tiler.groups)), key=lambda g: tiler.groups[g].rank)
    place = {g: k for k, g in enumerate(order)}
    rank = {n.index: place[tiler.group_of[n.index]] for n in tiler.nodes}
    reads_forward = all(rank[v.node] <= rank[n.index] for n in tiler.nodes for v in n.inputs
                        if isinstance(v, LocalValue))
    writes = [(node, t.pieces[0].base) for node, t, *_ in tiler.assembles]
    gm_forward = all(rank[w] <= rank[n.index] for w, base in writes for n in tiler.nodes
                     if n.index > w for v in n.inputs if isinstance(v, GmValue)
                     and any(pc.base == base for pc in v.pieces))
    return reads_forward and gm_forward, compile_kernel(k, HW)


@pytest.mark.parametrize("earlier_groups", [0, 1, 2, 3])
def test_moved_groups_keep_the_task_order_a_topological_order(earlier_groups):
    """Four input-only subgraphs read pairwise by four adds: the adds join earlier subgraphs
    and the ones they read move ahead of them, as often as it takes, and however many
    groups came before, no task reads what a later task computes."""
    t = {f"in{k}": {"shape": [8, 128], "role": "input"} for k in range(4 + earlier_groups)}
    t.update({f"o{k}": {"shape": [8, 128], "role": "output"} for k in range(5)})
    body = [{"set_vec_tile_shapes": [8, 128]}]
    for k in range(earlier_groups):
        body += [{"op": "exp", "inputs": [f"in{4 + k}"], "out": f"d{k}"},
                 {"op": "assemble", "inputs": [f"d{k}"], "out": "o4", "offsets": [0, 0]}]
    body += [{"op": "exp", "inputs": [f"in{k}"], "out": v} for k, v in enumerate("aycs")]
    body += [{"op": "add", "inputs": list(xy), "out": f"n{k}"}
             for k, xy in enumerate(["ay", "ys", "ac", "cs"])]
    body += [{"op": "assemble", "inputs": [f"n{k}"], "out": f"o{k}", "offsets": [0, 0]}
             for k in range(4)]
    ordered, p = _group_order_is_topological(body, t)
    assert ordered and _edges_in_program_order(p)


def test_an_assembled_constant_or_source_keeps_its_place():
    """A constant assembled into GM before an op reads that tensor, and an input-only result
    assembled into a tensor an earlier op reads, stay where the trace put their writes."""
    t = {"in0": {"shape": [8, 128], "role": "input"}, "in1": {"shape": [8, 128], "role": "input"},
         "T": {"shape": [8, 128]}, "U": {"shape": [8, 128]},
         "o1": {"shape": [8, 128], "role": "output"}, "o2": {"shape": [8, 128], "role": "output"}}
    vec = {"set_vec_tile_shapes": [8, 128]}
    constant = [vec, {"op": "full", "out": "c", "shape": [8, 128], "value": 2.0, "dtype": "fp32"},
                {"op": "assemble", "inputs": ["c"], "out": "T", "offsets": [0, 0]},
                {"op": "exp", "inputs": ["T"], "out": "e"},
                {"op": "assemble", "inputs": ["e"], "out": "o1", "offsets": [0, 0]},
                {"op": "exp", "inputs": ["in0"], "out": "x"},
                {"op": "add", "inputs": ["x", "c"], "out": "r"},
                {"op": "assemble", "inputs": ["r"], "out": "o2", "offsets": [0, 0]}]
    ordered, p = _group_order_is_topological(constant, t)
    assert ordered and p.edge_src.size >= 1     # the exp of T waits for the constant's write
    source = [vec, {"op": "exp", "inputs": ["in0"], "out": "x"},
              {"op": "exp", "inputs": ["U"], "out": "u"},
              {"op": "assemble", "inputs": ["u"], "out": "o1", "offsets": [0, 0]},
              {"op": "exp", "inputs": ["in1"], "out": "g"},
              {"op": "assemble", "inputs": ["g"], "out": "U", "offsets": [0, 0]},
              {"op": "add", "inputs": ["x", "g"], "out": "r"},
              {"op": "assemble", "inputs": ["r"], "out": "o2", "offsets": [0, 0]}]
    ordered, p = _group_order_is_topological(source, t)
    assert ordered


def test_a_parallel_merge_scope_splits_rather_than_read_a_later_subgraph():
    """sg_set_scope (1, True, False) puts every op of the scope in one subgraph, but an op
    of the scope that reads a subgraph traced after the scope's (a sqrt at another tile)
    cannot join it without reading a later task: it starts another subgraph of the scope."""
    t = {"in0": {"shape": [8, 128], "role": "input"}, "in1": {"shape": [8, 128], "role": "input"},
         "o": {"shape": [8, 128], "role": "output"}}
    body = [{"set_vec_tile_shapes": [8, 128]},
            {"op": "exp", "inputs": ["in0"], "out": "a"},
            {"sg_set_scope": [1, True, False]},
            {"op": "exp", "inputs": ["in1"], "out": "b"},
            {"sg_set_scope": -1}, {"set_vec_tile_shapes": [4, 128]},
            {"op": "sqrt", "inputs": ["a"], "out": "s"},
            {"sg_set_scope": [1, True, False]},
            {"op": "add", "inputs": ["b", "s"], "out": "r"},
            {"op": "assemble", "inputs": ["r"], "out": "o", "offsets": [0, 0]}]
    ordered, p = _group_order_is_topological(body, t)
    assert ordered
    add_task = leaf_ops(p).index(("add",))
    assert {int(s) for s in p.edge_src[p.edge_dst == add_task]} >= \
        {k for k, ops in enumerate(leaf_ops(p)) if ops == ("sqrt",)}


# 5. breadth merge --------------------------------------------------------------------------
def _gemm(options=None, labels=None, m=512, before=()):
    t = {"a": {"shape": [m, 256], "dtype": "fp32", "role": "input"},
         "b": {"shape": [256, 2048], "dtype": "fp16", "role": "input"},
         "c": {"shape": [m, 2048], "dtype": "fp32", "role": "output"},
         "x": {"shape": [64, 1024], "role": "input"}, "y": {"shape": [64, 1024], "role": "output"}}
    body = [*before,
            {"set_cube_tile_shapes": {"m": [128, 128], "k": [64, 256], "n": [128, 128]}},
            {"op": "matmul", "inputs": ["a", "b"], "out": "o", "label": labels or "mm"},
            {"op": "assemble", "inputs": ["o"], "out": "c", "offsets": [0, 0]}]
    return compile_kernel(kernel(body, t, options={"pass_options": options or {}}), HW)


# 64 Vector tasks, one per 1 x 1024 row, ahead of the matmul in the same root function
_ROWS = ({"set_vec_tile_shapes": [1, 1024]}, {"op": "exp", "inputs": ["x"], "out": "e"},
         {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0, 0]})


def test_automatic_l1_reuse_merges_a_group_over_twice_the_aic_cores():
    """Upstream's automatic count is a group's subgraphs over 2 x 24 AIC cores: 64 output
    tiles merge nothing, 128 merge two by two; and the first Cube group's count takes in
    the function's Vector subgraphs (upstream reads their missing hashOrder as 0)."""
    assert _gemm().leaf_tasks == 64
    assert _gemm(m=1024).leaf_tasks == 64                       # 128 tiles, 2 a task
    mixed = _gemm(before=_ROWS)
    cube = int(np.count_nonzero(mixed.task_core == CoreType.AIC))
    assert cube == 32                                           # (64 + 64) // 48 = 2
    # vecNBuffer runs first upstream: four rows a task leave 16 Vector subgraphs to count
    merged = _gemm({"vec_nbuffer_setting": {"DEFAULT": 4}}, before=_ROWS)
    assert int(np.count_nonzero(merged.task_core != CoreType.AIC)) == 16
    assert int(np.count_nonzero(merged.task_core == CoreType.AIC)) == 64   # 80 // 48 = 1


def test_l1_reuse_merges_tasks_that_load_the_same_block():
    off = _gemm({"cube_l1_reuse_setting": {"DEFAULT": 1}})
    assert off.leaf_tasks == 64
    for count in (2, 4, 8):
        p = _gemm({"cube_l1_reuse_setting": {"DEFAULT": count}})
        assert p.leaf_tasks == 64 // count
        # the shared block is loaded once per merged task
        assert p.work.mte2_bytes.sum() < off.work.mte2_bytes.sum()
        hint = p.leaf_functions[p.task_leaf[0]].merge_info
        assert hint and hint[0].startswith("l1ReuseInfo hashOrder: func0_0, subGraphCount: 64")


def test_l1_reuse_joins_a_task_to_the_group_that_loaded_any_of_its_blocks():
    """Upstream's L1Reuse walks the tiles in order and puts each with the group that last
    loaded one of its copy-ins, A or B, while that group has room: on a 4 x 2 grid of
    output tiles, merging four, a row of two is full before the group has four, so the
    next row joins through the B blocks it shares: two tasks of 2 x 2 tiles, each loading
    two A and two B blocks (384 KiB), not a column of four A blocks and one B (576 KiB)."""
    t = {"a": {"shape": [512, 256], "dtype": "fp32", "role": "input"},
         "b": {"shape": [256, 256], "dtype": "fp16", "role": "input"},
         "c": {"shape": [512, 256], "dtype": "fp32", "role": "output"}}
    body = [{"set_cube_tile_shapes": {"m": [128, 128], "k": [64, 256], "n": [128, 128]}},
            {"op": "matmul", "inputs": ["a", "b"], "out": "o"},
            {"op": "assemble", "inputs": ["o"], "out": "c", "offsets": [0, 0]}]
    opts = {"pass_options": {"cube_l1_reuse_setting": {"DEFAULT": 4}}}
    p = compile_kernel(kernel(body, t, options=opts), HW)
    a_block, b_block = 128 * 256 * 4, 256 * 128 * 2
    assert p.leaf_tasks == 2
    assert p.work.mte2_bytes.tolist() == [2 * a_block + 2 * b_block] * 2


def test_l1_reuse_keys_side_and_priority():
    by_order = _gemm({"cube_l1_reuse_setting": {"0": 4}})
    by_func = _gemm({"cube_l1_reuse_setting": {"DEFAULT": 2, "func0_0": 4}})
    by_label = _gemm({"cube_l1_reuse_setting": {"DEFAULT": 2, "mm": 8}})
    assert by_order.leaf_tasks == by_func.leaf_tasks == 16 and by_label.leaf_tasks == 8
    left = _gemm({"cube_l1_reuse_setting": {"DEFAULT": [4, "left"]}})
    right = _gemm({"cube_l1_reuse_setting": {"DEFAULT": [4, "right"]}})
    assert left.leaf_tasks == right.leaf_tasks == 16
    # left keeps the FP32 A block resident (the bigger one), right the FP16 B block
    assert left.work.mte2_bytes.sum() < right.work.mte2_bytes.sum()
    # a plain count takes the side DEFAULT names, as upstream keeps sides apart
    inherit = _gemm({"cube_l1_reuse_setting": {"DEFAULT": [2, "right"], "func0_0": 4}})
    assert inherit.work.mte2_bytes.sum() == right.work.mte2_bytes.sum()
    with pytest.raises(Exception):
        _gemm({"cube_l1_reuse_setting": {"DEFAULT": [4, "up"]}})


def test_mg_copyin_upper_bound_caps_what_a_merged_task_copies_in():
    """Each task copies in a 128 x 256 FP32 A block and a 256 x 128 FP16 B block (192 KiB):
    eight fit the default 2 MiB; a 512 KiB bound keeps two together, one below a task's
    own copy-in merges nothing, for L1Reuse and CubeNBuffer alike."""
    l1 = {"cube_l1_reuse_setting": {"DEFAULT": 8}}
    assert _gemm(l1).leaf_tasks == 8
    assert _gemm({**l1, "mg_copyin_upper_bound": 512 * 1024}).leaf_tasks == 32
    assert _gemm({**l1, "mg_copyin_upper_bound": 100 * 1024}).leaf_tasks == 64
    nbuffer = {"cube_l1_reuse_setting": {"DEFAULT": 1}, "cube_nbuffer_setting": {"DEFAULT": 8}}
    assert _gemm(nbuffer).leaf_tasks == 8
    assert _gemm({**nbuffer, "mg_copyin_upper_bound": 512 * 1024}).leaf_tasks == 32


def test_cube_nbuffer_without_a_count_for_a_group_spreads_it_over_twice_the_cores():
    """Upstream's default {-1: 1} merges nothing; a setting that gives a group no count (an
    empty one, or labels of other groups alone, which drop the default) leaves it to the
    automatic partition: 128 subgraphs that fit the copy-in bound in 48 merged tasks."""
    off = {"cube_l1_reuse_setting": {"DEFAULT": 1}}
    assert _gemm(m=1024, options=off).leaf_tasks == 128
    assert _gemm(m=1024, options={**off, "cube_nbuffer_setting": {}}).leaf_tasks == 48
    other = {**off, "cube_nbuffer_setting": {"not_this_one": 4}}
    assert _gemm(m=1024, options=other).leaf_tasks == 48
    # 64 subgraphs: 48 tasks, 16 of them pairs; 100 start a task every third or second
    assert _gemm(options={**off, "cube_nbuffer_setting": {}}).leaf_tasks == 48
    assert [int(s) for s in np.flatnonzero(auto_nbuffer_starts(100, 24, 10))][:6] == \
        [0, 3, 6, 9, 12, 14]


def test_int_keys_count_groups_of_one_core_type():
    """hashOrder 0 of cube_l1_reuse_setting is the first matmul group even when Vector
    groups come before it, as upstream numbers the Cube and Vector groups apart."""
    mixed = _gemm({"cube_l1_reuse_setting": {"0": 4}}, before=_ROWS)
    cube = [int(t) for t in np.flatnonzero(mixed.task_core == CoreType.AIC)]
    assert len(cube) == 16
    assert mixed.leaf_functions[mixed.task_leaf[cube[0]]].hash_order.endswith("_0")


@pytest.mark.parametrize("setting", ["cube_l1_reuse_setting", "cube_nbuffer_setting",
                                     "vec_nbuffer_setting"])
def test_merge_settings_take_int_keys_or_default_and_func_keys_not_both(setting):
    with pytest.raises(Exception, match="mixes int keys"):
        _gemm({setting: {"DEFAULT": 2, "0": 4}})
    assert _gemm({setting: {"-1": 1, "0": 1}}).leaf_tasks >= 1


def test_nbuffer_merges_isomorphic_tasks_so_tiles_pipeline():
    plain = build("tiling_add", **{"tiles.vec": [2, 4, 8, 256]})
    merged = build("tiling_add", **{"tiles.vec": [2, 4, 8, 256],
                                    "pass_options.vec_nbuffer_setting": {"DEFAULT": 4}})
    assert merged.leaf_tasks == plain.leaf_tasks // 4
    assert merged.work.in_flight.max() == 4
    assert merged.work.mte2_bytes.sum() == plain.work.mte2_bytes.sum()
    assert "vecMergeInfo" in merged.leaf_functions[0].merge_info[0]
    cube = _gemm({"cube_l1_reuse_setting": {"DEFAULT": 1}, "cube_nbuffer_setting": {"DEFAULT": 2}})
    assert cube.leaf_tasks == 32 and "cubeMergeInfo" in cube.leaf_functions[0].merge_info[0]


# 6. root functions ---------------------------------------------------------------------------
def test_ops_that_only_share_an_input_stay_apart():
    """Upstream gives each consumer of an input its own view before partitioning, which
    merges along producer-consumer edges only: exp(x) and sqrt(x) are two leaf functions,
    each loading x's tiles (a Python for of y_i = x + z_i is as many parallel tasks, not one
    long one); when their results meet in an op, the three run as one and load x once."""
    t = {"x": {"shape": [64, 256], "role": "input"}, "y": {"shape": [64, 256]},
         "z": {"shape": [64, 256]}}
    body = [{"set_vec_tile_shapes": [16, 256]},
            {"op": "exp", "inputs": ["x"], "out": "e"},
            {"op": "sqrt", "inputs": ["x"], "out": "s"},
            {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0, 0]},
            {"op": "assemble", "inputs": ["s"], "out": "z", "offsets": [0, 0]}]
    p = compile_kernel(kernel(body, t), HW)
    assert p.leaf_tasks == 8 and p.work.mte2_bytes.sum() == 2 * 64 * 256 * 4
    met = body[:3] + [{"op": "add", "inputs": ["e", "s"], "out": "m"},
                      {"op": "assemble", "inputs": ["m"], "out": "y", "offsets": [0, 0]}]
    p = compile_kernel(kernel(met, t), HW)
    assert p.leaf_tasks == 4 and p.work.mte2_bytes.sum() == 64 * 256 * 4


def test_merging_sibling_loops_removes_the_duplicate_load():
    t = {"x": {"shape": [64, 256], "role": "input"}, "y": {"shape": [64, 256]},
         "z": {"shape": [64, 256]}}
    def step(src, op, out, idx):
        return [{"op": "view", "inputs": [src], "out": f"v{out}", "shape": [8, 256],
                 "offsets": [f"{idx}*8", 0]},
                {"op": op, "inputs": [f"v{out}"], "out": f"r{out}"},
                {"op": "assemble", "inputs": [f"r{out}"], "out": out, "offsets": [f"{idx}*8", 0]}]
    # Operation1 writes y in one loop, Operation2 reads it back in a sibling loop
    siblings = [{"set_vec_tile_shapes": [8, 256]},
                {"loop": {"name": "l1", "idx": "i", "trip": 8}, "body": step("x", "exp", "y", "i")},
                {"loop": {"name": "l2", "idx": "j", "trip": 8}, "body": step("y", "sqrt", "z", "j")}]
    fused_body = step("x", "exp", "y", "i") + [
        {"op": "sqrt", "inputs": ["ry"], "out": "rz"},
        {"op": "assemble", "inputs": ["rz"], "out": "z", "offsets": ["i*8", 0]}]
    merged = [{"set_vec_tile_shapes": [8, 256]},
              {"loop": {"name": "l", "idx": "i", "trip": 8}, "body": fused_body}]
    two = compile_kernel(kernel(siblings, t), HW)
    one = compile_kernel(kernel(merged, t), HW)
    assert two.root_calls == 16 and one.root_calls == 8
    assert one.work.mte2_bytes.sum() < two.work.mte2_bytes.sum()
    assert one.leaf_tasks < two.leaf_tasks


# 7. stitch -------------------------------------------------------------------------------------
def test_stitch_counts_loop_bodies_and_caps():
    for n, dev in ((1, 32), (128, 2), (512, 1)):
        assert build("glm_attention", **{"runtime_options.stitch_function_max_num": n}).dev_tasks == dev
    calls = np.ones(3000, np.int64)
    dev, _ = stitch(calls, calls, 1024)
    assert np.bincount(dev).max() == MAX_STITCH_ROOT_CALLS
    big = np.full(10, 25000, np.int64)
    dev, _ = stitch(big, np.ones(10, np.int64), 128)
    assert all(np.bincount(dev) * 25000 <= MAX_STITCH_LEAF_TASKS)


# 8. data movement knobs -----------------------------------------------------------------------
def _load(fmt="ND", b_trans=False, bypass=False):
    t = {"a": {"shape": [1024, 1024], "dtype": "fp16", "format": fmt,
               "cache_policy": "bypass" if bypass else "default"},
         "b": {"shape": [1024, 1024], "dtype": "fp16"},
         "y": {"shape": [1024, 1024], "role": "output"}}
    body = [{"set_cube_tile_shapes": {"m": [128, 128], "k": [64, 256], "n": [128, 128]}},
            {"op": "matmul", "inputs": ["a", "b"], "b_trans": b_trans, "out": "c"},
            store("c")]
    opts = {"pass_options": {"cube_l1_reuse_setting": {"DEFAULT": 1}}}
    return compile_kernel(kernel(body, t, options=opts), HW)


def test_nz_layout_and_bypass_change_the_loads():
    nd, nz = _load("ND"), _load("NZ")
    assert nz.work.mte2_bursts.sum() < nd.work.mte2_bursts.sum()
    assert nz.work.mte2_bytes.sum() == nd.work.mte2_bytes.sum()
    assert _load(bypass=True).regions.bypass.any() and not nd.regions.bypass.any()


def test_concat_copies_where_assemble_writes_in_place():
    t = {"x": {"shape": [64, 64], "role": "input"}, "y": {"shape": [64, 128], "role": "output"}}
    via_assemble = [{"set_vec_tile_shapes": [64, 64]},
                    {"op": "exp", "inputs": ["x"], "out": "e"},
                    {"op": "sqrt", "inputs": ["x"], "out": "s"},
                    {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0, 0]},
                    {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 64]}]
    via_concat = via_assemble[:3] + [
        {"set_vec_tile_shapes": [64, 128]},
        {"op": "concat", "inputs": ["e", "s"], "axis": 1, "out": "cat"},
        {"op": "assemble", "inputs": ["cat"], "out": "y", "offsets": [0, 0]}]
    a = compile_kernel(kernel(via_assemble, t), HW)
    c = compile_kernel(kernel(via_concat, t), HW)
    # both keep e and s on chip, but concat copies them into a new tile first
    assert "copy" in c.work.vector.kinds and "copy" not in a.work.vector.kinds
    assert c.work.vector.bytes.sum() > a.work.vector.bytes.sum()
    assert "concat" in {op for leaf in c.leaf_functions for op in leaf.ops}
    assert c.workspace_bytes == 0          # assembled straight into y: no read-back
    # an op reading the concat's result tile for tile in its leaf task reads it in UB (the
    # GDR case's inverse reads each step's concat so, docs/cases.md G1)
    on_chip = via_concat[:-1] + [
        {"op": "mul", "inputs": ["cat"], "scalar": 2.0, "out": "m"},
        {"op": "assemble", "inputs": ["m"], "out": "y", "offsets": [0, 0]}]
    o = compile_kernel(kernel(on_chip, t), HW)
    assert o.workspace_bytes == 0 and o.work.round_trips.sum() == 0
    assert o.leaf_tasks == c.leaf_tasks
    # a view of it at a 32-byte aligned offset is a UB address too (upstream types a
    # concat's 32 KiB result tile as UB, under 0.35 of UB); one at an offset off the block
    # makes the result a GM tensor, loaded back from there; tile for tile it still shares
    # the concat's leaf task
    def viewed(shape, offsets):
        return via_concat[:-1] + [
            {"op": "view", "inputs": ["cat"], "out": "cv", "shape": shape, "offsets": offsets},
            {"op": "mul", "inputs": ["cv"], "scalar": 2.0, "out": "m"},
            {"op": "assemble", "inputs": ["m"], "out": "y", "offsets": [0, 0]}]
    in_ub = compile_kernel(kernel(viewed([64, 120], [0, 8]), t), HW)
    assert in_ub.workspace_bytes == 0 and in_ub.work.round_trips.sum() == 0
    r = compile_kernel(kernel(viewed([64, 126], [0, 2]), t), HW)
    assert r.workspace_bytes == 64 * 128 * 4
    assert r.work.mte2_bytes.sum() == 64 * 64 * 4 + 64 * 126 * 4        # x, then the view
    assert r.work.mte3_bytes.sum() == 64 * 128 * 4 + 64 * 126 * 4       # cat out, then y
    assert r.leaf_tasks == c.leaf_tasks
    # that read waits for the write: a copy-out and a copy-in latency on top of the task's
    assert r.work.round_trips.tolist() == [1.0] and c.work.round_trips.sum() == 0
    from simcore.machine.costs import pipe_cycles
    p = HW.pipes
    extra = pipe_cycles(HW, r.work)["mte3"] - pipe_cycles(HW, c.work)["mte3"]
    assert extra[0] == pytest.approx(p.mte3.fixed_cycles + p.mte2.fixed_cycles
                                     + 64 * 126 * 4 / p.mte3.bytes_per_cycle)


def test_reshape_inplace_is_free():
    bd = build("blockdiag_matmul")
    assert all("reshape" not in leaf.ops for leaf in bd.leaf_functions)


def _transpose_add(transpose_tile, add_tile):
    t = {"x": {"shape": [128, 256], "role": "input"}, "y": {"shape": [256, 128], "role": "output"}}
    body = [{"set_vec_tile_shapes": transpose_tile},
            {"op": "transpose", "inputs": ["x"], "perm": [1, 0], "out": "xt"},
            {"set_vec_tile_shapes": add_tile},
            {"op": "add", "inputs": ["xt"], "scalar": 1.0, "out": "s"},
            {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}]
    return compile_kernel(kernel(body, t), HW)


def test_a_transpose_is_tiled_over_its_input_so_its_consumer_takes_the_swapped_tile():
    """The performance guide (Vector TileShape调优): a Transpose tiled (64, 128) feeds an Add
    best tiled (128, 64); upstream tiles the transpose's input and swaps each tile.  The
    aligned pair is one-to-one and fuses, 4 leaf tasks of (transpose, add) with no
    workspace; the same (64, 128) for both is a many-to-many dependency through GM."""
    guide = _transpose_add([64, 128], [128, 64])
    assert guide.leaf_tasks == 4 and guide.workspace_bytes == 0
    assert all(ops == ("transpose", "add") for ops in leaf_ops(guide))
    same = _transpose_add([64, 128], [64, 128])
    assert same.workspace_bytes > 0 and same.leaf_tasks > guide.leaf_tasks
    # each transpose tile reads a (64, 128) box of x and writes the swapped (128, 64) box
    first = guide.leaf_functions[guide.task_leaf[0]]
    assert first.ops[0] == "transpose"


def test_a_copying_reshape_costs_a_copy_the_inplace_one_does_not():
    """reshape_inplace: the same exp over x viewed as (4R, C/4) rows; without inplace the
    reshape copies x's 16 MiB in Vector copies before the exp reads them, so the kernel
    takes longer, with the same HBM traffic (the copy stays in the exp's leaf task)."""
    from simcore.machine.engine import Machine
    copied, inplace = build("reshape_inplace", **{"params.INPLACE": 0}), \
        build("reshape_inplace", **{"params.INPLACE": 1})
    size = 1024 * 4096 * 4
    assert copied.work.vector.bytes.sum() - inplace.work.vector.bytes.sum() == size
    assert all("reshape" in ops for ops in leaf_ops(copied))
    assert all("reshape" not in ops for ops in leaf_ops(inplace))
    k = resolve_kernel(KERNELS / "reshape_inplace.yaml", {})
    slow = Machine(HW, copied, k.options.runtime_options).run()
    fast = Machine(HW, inplace, k.options.runtime_options).run()
    assert slow.kernel_us > fast.kernel_us
    assert slow.task_hbm_bytes.sum() == fast.task_hbm_bytes.sum()


def test_a_view_of_a_concat_tile_over_a_third_of_ub_goes_through_gm():
    """Upstream types an assembled (concatenated) tile of more than 0.35 of UB as a GM
    tensor: a view of a [64, 288] fp32 concat (72 KiB of the 192) is read back from GM."""
    t = {"x": {"shape": [64, 144], "role": "input"}, "y": {"shape": [64, 288], "role": "output"}}
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [64, 144]},
         {"op": "exp", "inputs": ["x"], "out": "e"},
         {"op": "sqrt", "inputs": ["x"], "out": "s"},
         {"set_vec_tile_shapes": [64, 288]},
         {"op": "concat", "inputs": ["e", "s"], "axis": 1, "out": "cat"},
         {"op": "view", "inputs": ["cat"], "out": "cv", "shape": [64, 288], "offsets": [0, 0]},
         {"op": "mul", "inputs": ["cv"], "scalar": 2.0, "out": "m"},
         {"op": "assemble", "inputs": ["m"], "out": "y", "offsets": [0, 0]}], t), HW)
    assert program.workspace_bytes == 64 * 288 * 4
    assert program.work.round_trips.sum() == 1
