"""Kernel-language mechanisms PyPTO kernels need: each shown on a tiny hand-built program
whose counts, shapes and bytes can be worked out by hand."""
import numpy as np
import pytest

from simcore.compiler import compile_kernel
from simcore.machine.costs import static_pipe_us
from simcore.spec.errors import ConfigError, OoOError
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

HW = load_hardware("dav_2201")


def kernel(body, tensors, tiles=None, params=None, **extra):
    return Kernel.model_validate({"name": "k", "params": params or {}, "tensors": tensors,
                                  "tiles": tiles or {}, "body": body, **extra})


def t(shape, dtype="fp32", role="input"):
    return {"shape": shape, "dtype": dtype, "role": role}


def store(name, offsets=(0, 0), out="y"):
    """The op that keeps ``name`` alive: its assemble into the kernel's output."""
    return {"op": "assemble", "inputs": [name], "out": out, "offsets": list(offsets)}


def leaf_ops(program):
    return [program.leaf_functions[i].ops for i in program.task_leaf]


# 1. reductions with keepdim=False ------------------------------------------------------
def _colsum(keepdim: bool, tile):
    return kernel([{"set_vec_tile_shapes": tile},
                   {"op": "sum", "inputs": ["x"], "out": "s", "axis": 0, "keepdim": keepdim},
                   {"op": "sub", "inputs": ["x", "s"], "out": "d"},
                   {"op": "assemble", "inputs": ["d"], "out": "y", "offsets": [0, 0]}],
                  {"x": t([64, 128]), "y": t([64, 128], role="output")})


@pytest.mark.parametrize("tile", [[64, 128], [16, 128]])   # one tile; the axis cut in 4
def test_keepdim_false_drops_the_axis_and_broadcasts_like_numpy(tile):
    # sum over rows: [1, 128] with keepdim, [128] without; x - s broadcasts either way, so
    # the program is the same work on the same bytes (split or not along the reduce axis)
    kept = compile_kernel(_colsum(True, tile), HW)
    dropped = compile_kernel(_colsum(False, tile), HW)
    assert kept.counts() == dropped.counts()
    assert dropped.workspace_bytes == kept.workspace_bytes
    assert dropped.edge_src.size == kept.edge_src.size
    for col in ("mte2_bytes", "mte3_bytes", "flops"):
        assert getattr(dropped.work, col).sum() == getattr(kept.work, col).sum()


def test_keepdim_false_result_no_longer_broadcasts_against_its_row_axis():
    # amax over the last axis without keepdim is [64]: numpy aligns it with x's last dim
    # (128), which does not broadcast; with keepdim it is [64, 1] and does
    def k(keepdim):
        return kernel([{"set_vec_tile_shapes": [16, 128]},
                       {"op": "amax", "inputs": ["x"], "out": "m", "axis": -1,
                        "keepdim": keepdim},
                       {"op": "sub", "inputs": ["x", "m"], "out": "d"},
                       {"op": "assemble", "inputs": ["d"], "out": "y", "offsets": [0, 0]}],
                      {"x": t([64, 128]), "y": t([64, 128], role="output")})
    assert compile_kernel(k(True), HW).leaf_tasks == 4
    with pytest.raises(ConfigError, match="broadcast"):
        compile_kernel(k(False), HW)


def test_a_squeezed_row_reduce_chains_on_chip_under_a_longer_tile():
    # rowsum of [64, 128] without keepdim is [64]; the 2-D TileShape [16, 128] cuts it by
    # its first dim (16), so the muls tiles line up with the reduce's and the chain is one
    # leaf function per row block, nothing through GM
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 128]},
         {"op": "sum", "inputs": ["x"], "out": "s", "axis": -1, "keepdim": False},
         {"op": "mul", "inputs": ["s"], "scalar": 2.0, "out": "s2"},
         {"op": "assemble", "inputs": ["s2"], "out": "y", "offsets": [0]}],
        {"x": t([64, 128]), "y": t([64], role="output")}), HW)
    assert program.leaf_tasks == 4 and program.workspace_bytes == 0
    assert all(ops == ("sum", "mul") for ops in leaf_ops(program))
    assert program.work.mte3_bytes.sum() == 64 * 4          # only the [64] result goes out


# 2. rank broadcast ----------------------------------------------------------------------
@pytest.mark.parametrize("shape, per_task", [([128], 128 * 4), ([64, 1], 16 * 4), ([1], 4)])
def test_rank_broadcast_reads_the_broadcast_operand_per_tile(shape, per_task):
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 128]},
         {"op": "mul", "inputs": ["x", "b"], "out": "p"},
         {"op": "assemble", "inputs": ["p"], "out": "y", "offsets": [0, 0]}],
        {"x": t([64, 128]), "b": t(shape), "y": t([64, 128], role="output")}), HW)
    assert program.leaf_tasks == 4
    # every task loads its x tile and the part of b under it: all of a [128] row, the 16
    # rows of a [64, 1] column, the one element of a [1]
    assert program.work.mte2_bytes.sum() == 4 * (16 * 128 * 4 + per_task)


def test_shapes_that_do_not_broadcast_are_refused():
    with pytest.raises(ConfigError, match="broadcast"):
        compile_kernel(kernel([{"set_vec_tile_shapes": [16, 128]},
                               {"op": "add", "inputs": ["x", "b"], "out": "p"},
                               store("p")],
                              {"x": t([64, 128]), "b": t([64]),
                               "y": t([64, 128], role="output")}), HW)


# 3. batched and broadcast matmul --------------------------------------------------------
CUBE = {"m": [64, 64], "k": [32, 32], "n": [128, 128]}


def _bmm(a, b, b_trans=False, out="fp32"):
    return kernel([{"set_cube_tile_shapes": CUBE},
                   {"op": "matmul", "inputs": ["a", "b"], "out": "c", "b_trans": b_trans,
                    "dtype": out},
                   {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0, 0]}],
                  {"a": t(a, "fp16"), "b": t(b, "fp16"), "y": t([4, 64, 128], out, "output")})


def test_batched_matmul_is_one_cube_tile_per_batch():
    single = compile_kernel(kernel(
        [{"set_cube_tile_shapes": CUBE},
         {"op": "matmul", "inputs": ["a", "b"], "out": "c", "dtype": "fp32"},
         {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}],
        {"a": t([64, 32], "fp16"), "b": t([32, 128], "fp16"),
         "y": t([64, 128], role="output")}), HW)
    batched = compile_kernel(_bmm([4, 64, 32], [4, 32, 128]), HW)
    assert single.leaf_tasks == 1 and batched.leaf_tasks == 4
    # 64x32x128 in 16-cubes: 4 * 2 * 8 fractals per batch
    assert batched.work.cube.fractals.sum() == 4 * single.work.cube.fractals.sum() == 4 * 64
    assert batched.work.fixp_bytes.sum() == 4 * 64 * 128 * 4
    assert batched.work.mte2_bytes.sum() == 4 * (64 * 32 * 2 + 32 * 128 * 2)
    # each batch costs the Cube what the single matmul costs
    cube = static_pipe_us(HW, batched)["cube"]
    assert np.allclose(cube, static_pipe_us(HW, single)["cube"][0])


def test_broadcast_matmul_reads_the_shared_operand_in_every_batch_and_b_trans_swaps():
    shared = compile_kernel(_bmm([4, 64, 32], [32, 128]), HW)
    assert shared.leaf_tasks == 4
    assert shared.work.mte2_bytes.sum() == 4 * (64 * 32 * 2 + 32 * 128 * 2)
    one = compile_kernel(_bmm([1, 64, 32], [4, 32, 128]), HW)    # upstream's broadcast form
    assert one.leaf_tasks == 4
    assert one.work.mte2_bytes.sum() == 4 * (64 * 32 * 2 + 32 * 128 * 2)
    trans = compile_kernel(_bmm([4, 64, 32], [4, 128, 32], b_trans=True), HW)
    assert trans.counts() == compile_kernel(_bmm([4, 64, 32], [4, 32, 128]), HW).counts()
    assert trans.work.cube.fractals.sum() == 4 * 64
    fp16_out = compile_kernel(_bmm([4, 64, 32], [4, 32, 128], out="fp16"), HW)
    assert fp16_out.work.fixp_bytes.sum() == 4 * 64 * 128 * 2


def test_batched_matmul_checks_batch_and_k():
    with pytest.raises(ConfigError, match="batch"):
        compile_kernel(_bmm([4, 64, 32], [3, 32, 128]), HW)
    with pytest.raises(ConfigError, match="K mismatch"):
        compile_kernel(_bmm([4, 64, 32], [4, 64, 128]), HW)


def _tbmm(a, b, **extra):
    m, nb, n = a[0], a[1], b[-1]
    return kernel([{"set_cube_tile_shapes": CUBE},
                   {"op": "matmul", "inputs": ["a", "b"], "out": "c", "dtype": "fp32",
                    "transposed_batch": True, **extra},
                   {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0, 0]}],
                  {"a": t(a, "fp16"), "b": t(b, "fp16"), "y": t([m, nb, n], role="output")})


def test_a_transposed_batch_matmul_reads_each_batch_rows_apart():
    """Upstream's transposed_batchmatmul: A (M, B, K) by B (B, K, N) into (M, B, N).  It is
    the batched matmul of A's batches, the same tiles, bytes and Cube work (an operand comes
    into L1 a row at a time either way, its fractal layout made as it lands), but a batch's
    rows of A and C lie B rows apart: a reader of C's batch 1 waits for batch 1's tile only."""
    plain = compile_kernel(_bmm([4, 64, 32], [4, 32, 128]), HW)
    strided = compile_kernel(_tbmm([64, 4, 32], [4, 32, 128]), HW)
    assert strided.counts() == plain.counts() and strided.leaf_tasks == 4
    for field in ("mte2_bytes", "mte2_bursts", "fixp_bytes", "flops"):
        assert (getattr(strided.work, field) == getattr(plain.work, field)).all(), field
    assert (strided.work.cube.fractals == plain.work.cube.fractals).all()
    k = kernel([{"set_cube_tile_shapes": CUBE},
                {"op": "matmul", "inputs": ["a", "b"], "out": "c", "dtype": "fp32",
                 "transposed_batch": True},
                {"op": "assemble", "inputs": ["c"], "out": "T", "offsets": [0, 0, 0]},
                {"set_vec_tile_shapes": [64, 1, 128]},
                {"op": "view", "inputs": ["T"], "out": "one", "shape": [64, 1, 128],
                 "offsets": [0, 1, 0]},
                {"op": "exp", "inputs": ["one"], "out": "e"},
                {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0, 0, 0]}],
               {"a": t([64, 4, 32], "fp16"), "b": t([4, 32, 128], "fp16"),
                "T": {"shape": [64, 4, 128]}, "y": t([64, 1, 128], role="output")})
    p = compile_kernel(k, HW)
    ops = leaf_ops(p)
    reader = ops.index(("exp",))
    assert [ops[s] for s in p.edge_src[p.edge_dst == reader]] == [("matmul",)]
    assert p.edge_src[p.edge_dst == reader].tolist() == [1]     # batch 1's tile


def test_a_transposed_batch_matmul_checks_its_operands():
    with pytest.raises(ConfigError, match=r"A \(M, B, K\)"):
        compile_kernel(_tbmm([64, 4, 32], [3, 32, 128]), HW)
    with pytest.raises(ConfigError, match=r"got \[64, 4, 32\] and \[4, 48, 128\]"):
        compile_kernel(_tbmm([64, 4, 32], [4, 48, 128]), HW)      # K, in A's own order
    with pytest.raises(ValueError, match="neither transposed"):
        _tbmm([64, 4, 32], [4, 128, 32], b_trans=True)
    fp32 = _tbmm([64, 4, 32], [4, 32, 128])
    fp32.tensors["a"] = fp32.tensors["a"].model_copy(update={"dtype": "fp32"})
    with pytest.raises(ConfigError, match="fp16 or bf16"):
        compile_kernel(fp32, HW)


# 4. TileShapes of higher rank than the tensor -------------------------------------------
def _add1(shape, tile, dtype="fp32"):
    return kernel([{"set_vec_tile_shapes": tile},
                   {"op": "add", "inputs": ["x"], "scalar": 1.0, "out": "z"},
                   {"op": "assemble", "inputs": ["z"], "out": "y",
                    "offsets": [0] * len(shape)}],
                  {"x": t(shape, dtype), "y": t(shape, dtype, "output")})


def test_a_longer_tile_cuts_the_tensor_by_its_first_dims_and_a_shorter_one_fails():
    assert compile_kernel(_add1([64], [16, 128]), HW).leaf_tasks == 4      # cut by 16
    # [1, 16] of [1, 16, 128] cuts [64, 128]: 64 rows x 8 blocks of 16 columns
    assert compile_kernel(_add1([64, 128], [1, 16, 128]), HW).leaf_tasks == 64 * 8
    with pytest.raises(ConfigError, match="at least one tile dim per tensor dim"):
        compile_kernel(_add1([64, 128], [16]), HW)


# 5. INT64 ---------------------------------------------------------------------------------
def test_int64_moves_eight_bytes_an_element():
    i32 = compile_kernel(_add1([64, 64], [16, 64], "int32"), HW)
    i64 = compile_kernel(_add1([64, 64], [16, 64], "int64"), HW)
    assert i64.work.mte2_bytes.sum() == 2 * i32.work.mte2_bytes.sum() == 64 * 64 * 8
    assert i64.work.mte3_bytes.sum() == 64 * 64 * 8
    assert i64.work.vector.bytes.sum() == 2 * i32.work.vector.bytes.sum()
    assert static_pipe_us(HW, i64)["vector"].sum() > static_pipe_us(HW, i32)["vector"].sum()
    # the 32-byte tail rule counts bytes: 4 int64 elements align, 4 int32 do not
    assert compile_kernel(_add1([64, 64], [16, 4], "int64"), HW).leaf_tasks == 64
    with pytest.raises(ConfigError, match="32 bytes"):
        compile_kernel(_add1([64, 64], [16, 4], "int32"), HW)


def test_the_cube_refuses_int64():
    k = kernel([{"set_cube_tile_shapes": CUBE},
                {"op": "matmul", "inputs": ["a", "b"], "out": "c"}, store("c")],
               {"a": t([64, 32], "int64"), "b": t([32, 128], "int64"),
                "y": t([64, 128], role="output")})
    with pytest.raises(ConfigError, match="Cube multiplies"):
        compile_kernel(k, HW)


# 6. tensor element reads as scalars -------------------------------------------------------
def _paged(values):
    # per batch b: seq_lens[b] blocks, block i of batch b at row block_table[b, i] of kv
    return kernel(
        [{"set_vec_tile_shapes": [16, 64]},
         {"loop": {"name": "b_loop", "idx": "b", "trip": 3, "style": "for"},
          "body": [{"loop": {"name": "s_loop", "idx": "i", "trip": "seq_lens[b]"},
                    "body": [{"op": "view", "inputs": ["kv"], "out": "blk", "shape": [16, 64],
                              "offsets": ["block_table[b, i]*16", 0]},
                             {"op": "exp", "inputs": ["blk"], "out": "e"},
                             {"op": "assemble", "inputs": ["e"], "out": "y",
                              "offsets": ["(b*4 + i)*16", 0]}]}]}],
        {"kv": t([8 * 16, 64]), "y": t([12 * 16, 64], role="output"),
         "seq_lens": t([3], "int64"), "block_table": t([3, 4], "int32")},
        values=values)


TABLE = [[7, 0, 0, 0], [5, 6, 0, 0], [1, 2, 3, 4]]


def _blocks_read(program) -> int:
    r = program.regions
    reads = ~r.write
    return len({(int(a), int(b)) for a, b in zip(r.region[reads], r.lines[reads])})


def test_element_reads_set_trip_counts_and_view_offsets():
    program = compile_kernel(_paged({"seq_lens": [1, 2, 4], "block_table": TABLE}), HW)
    assert program.root_calls == 1 + 2 + 4          # one root call per block read
    assert set(program.control_inputs) == {"seq_lens", "block_table"}
    assert _blocks_read(program) == 7               # the table names 7 different blocks
    longer = compile_kernel(_paged({"seq_lens": [4, 4, 4], "block_table": TABLE}), HW)
    assert longer.root_calls == 12 and longer.leaf_tasks == 12
    # a table naming block 0 everywhere: the same 7 reads, all of one block
    same = compile_kernel(_paged({"seq_lens": [1, 2, 4], "block_table": [[0] * 4] * 3}), HW)
    assert same.root_calls == 7 and _blocks_read(same) == 1


def test_element_reads_need_values_of_the_right_shape():
    with pytest.raises(ConfigError, match="no values"):
        compile_kernel(_paged({"seq_lens": [1, 2, 4]}), HW)
    with pytest.raises(ConfigError, match="outside its values"):
        compile_kernel(_paged({"seq_lens": [1, 2, 5], "block_table": TABLE}), HW)
    with pytest.raises(Exception, match="has shape"):
        _paged({"seq_lens": [1, 2], "block_table": TABLE})


# 7. more unary ops, each priced by its own vector instruction ------------------------------
@pytest.mark.parametrize("op", ["relu", "log", "rsqrt", "abs", "neg"])
def test_unary_ops_are_priced_by_their_instruction(op):
    # one [8, 64] fp32 tile: 8 rows of one 256-byte repeat, one instruction, one tile op
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [8, 64]},
         {"op": op, "inputs": ["x"], "out": "z"},
         {"op": "assemble", "inputs": ["z"], "out": "y", "offsets": [0, 0]}],
        {"x": t([8, 64]), "y": t([8, 64], role="output")}), HW)
    assert program.work.vector.kinds == (op,)
    assert op in HW.pipes.vector                  # its own sourced row, not the default
    rate, issue = HW.pipes.vector[op], HW.pipes.vector_issue
    want = rate.fixed_cycles + 8 * issue.repeat_bytes / rate.bytes_per_cycle \
        + issue.issue_cycles
    got = static_pipe_us(HW, program)["vector"][0] * HW.cores.clock_mhz
    assert got == pytest.approx(want)


def test_log_costs_more_than_relu_per_repeat():
    def cycles(op):
        p = compile_kernel(kernel([{"set_vec_tile_shapes": [64, 64]},
                                   {"op": op, "inputs": ["x"], "out": "z"}, store("z")],
                                  {"x": t([64, 64]), "y": t([64, 64], role="output")}), HW)
        return static_pipe_us(HW, p)["vector"].sum()
    assert cycles("relu") < cycles("rsqrt") < cycles("log")


def test_a_view_may_pass_the_tensor_edge_where_it_holds_no_data():
    # [4, 4] at [2, 4] of a [4, 8] tensor: rows 2-3 exist, rows 4-5 would not; valid_shape
    # [2, 4] keeps the view to the rows that exist, so it reads 2 x 4 elements
    def k(valid):
        return kernel([{"set_vec_tile_shapes": [8, 8]},
                       {"op": "view", "inputs": ["x"], "out": "v", "shape": [4, 4],
                        "offsets": [2, 4], **({"valid_shape": valid} if valid else {})},
                       {"op": "copy", "inputs": ["v"], "out": "c"},
                       {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}],
                      {"x": t([4, 8]), "y": t([4, 4], role="output")})
    assert compile_kernel(k([2, 4]), HW).work.mte2_bytes.sum() == 2 * 4 * 4
    for bad in (None, [3, 4]):
        with pytest.raises(ConfigError, match="leaves the tensor"):
            compile_kernel(k(bad), HW)


def test_a_matmul_bias_is_read_per_tile_and_adds_no_vector_work():
    def k(bias):
        return kernel([{"set_cube_tile_shapes": {"m": [32, 32], "k": [32, 32], "n": [64, 64]}},
                       {"op": "matmul", "inputs": ["a", "b"] + (["bias"] if bias else []),
                        "out": "c", "dtype": "fp32"},
                       {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}],
                      {"a": t([64, 32], "fp16"), "b": t([32, 128], "fp16"),
                       "bias": t([1, 128]), "y": t([64, 128], role="output")})
    plain, biased = compile_kernel(k(False), HW), compile_kernel(k(True), HW)
    assert plain.leaf_tasks == biased.leaf_tasks == 4        # 2 x 2 tiles of 32 x 64
    # each tile loads its 64 bias columns (fp32)
    assert biased.work.mte2_bytes.sum() - plain.work.mte2_bytes.sum() == 4 * 64 * 4
    assert biased.work.vector.bytes.sum() == plain.work.vector.bytes.sum() == 0
    assert biased.work.cube.fractals.sum() == plain.work.cube.fractals.sum()


def test_an_element_gather_reads_the_whole_gather_axis_under_each_tile():
    def k(axis):
        return kernel([{"set_vec_tile_shapes": [16, 128]},
                       {"op": "gather_elements", "inputs": ["x", "i"], "out": "g",
                        "axis": axis},
                       {"op": "assemble", "inputs": ["g"], "out": "y", "offsets": [0, 0]}],
                      {"x": t([64, 128]), "i": t([32, 128], "int32"),
                       "y": t([32, 128], role="output")})
    rows = compile_kernel(k(0), HW)
    assert rows.leaf_tasks == 2 and rows.work.vector.kinds == ("gather",)
    # along rows: each 16-row tile may pick any of the 64 rows of its columns
    assert rows.work.mte2_bytes.sum() == 2 * (16 * 128 * 4 + 64 * 128 * 4)
    cols = compile_kernel(k(1), HW)      # along columns: only the tile's own 16 rows
    assert cols.work.mte2_bytes.sum() == 2 * (16 * 128 * 4 + 16 * 128 * 4)
    assert "gather" in HW.pipes.vector


def test_an_element_scatter_reads_the_index_along_its_axis_under_each_tile():
    def k(src_tensor):
        op = {"op": "scatter_elements", "inputs": ["x", "i"] + (["s"] if src_tensor else []),
              "out": "o", "axis": 0, **({} if src_tensor else {"scalar": 0.5})}
        return kernel([{"set_vec_tile_shapes": [16, 128]}, op,
                       {"op": "assemble", "inputs": ["o"], "out": "y", "offsets": [0, 0]}],
                      {"x": t([64, 128]), "i": t([8, 128], "int64"), "s": t([8, 128]),
                       "y": t([64, 128], role="output")})
    scalar = compile_kernel(k(False), HW)
    assert scalar.leaf_tasks == 4 and scalar.work.vector.kinds == ("scatter",)
    # each 16-row tile of x reads its x tile and all 8 index rows of its columns (int64)
    assert scalar.work.mte2_bytes.sum() == 4 * (16 * 128 * 4 + 8 * 128 * 8)
    tensor = compile_kernel(k(True), HW)       # a src tensor is read like the index
    assert tensor.work.mte2_bytes.sum() == scalar.work.mte2_bytes.sum() + 4 * 8 * 128 * 4


def test_valid_regions_of_broadcast_operands_align_at_the_last_dim():
    # x holds 40 of its 64 rows, the [128] row b only its first 64 entries: a [16, 128] tile
    # does valid work on its rows below 40 and columns below 64
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 128]},
         {"op": "view", "inputs": ["xs"], "out": "x", "shape": [64, 128], "offsets": [0, 0],
          "valid_shape": [40, 128]},
         {"op": "view", "inputs": ["bs"], "out": "b", "shape": [128], "offsets": [0],
          "valid_shape": [64]},
         {"op": "mul", "inputs": ["x", "b"], "out": "p"},
         {"op": "assemble", "inputs": ["p"], "out": "y", "offsets": [0, 0]}],
        {"xs": t([64, 128]), "bs": t([128]), "y": t([64, 128], role="output")}), HW)
    assert program.work.vector.tiles.sum() == pytest.approx((1 + 1 + 0.5 + 0) * 0.5)


# 11. views, reshapes and transposes of on-chip values ------------------------------------
def _slice_of_result(view, tile_p, tile_c, scopes=(None, None), out=(64, 64)):
    """e = exp(x) under tile_p; s = view(e) is read by a mul under tile_c, then assembled."""
    sp, sc = ([{"sg_set_scope": s}] if s is not None else [] for s in scopes)
    return kernel(sp + [{"set_vec_tile_shapes": tile_p},
                        {"op": "exp", "inputs": ["x"], "out": "e"}] + sc +
                  [{"set_vec_tile_shapes": tile_c},
                   {"op": "view", "inputs": ["e"], "out": "s", **view},
                   {"op": "mul", "inputs": ["s"], "scalar": 2.0, "out": "m"},
                   {"op": "assemble", "inputs": ["m"], "out": "y", "offsets": [0, 0]}],
                  {"x": t([64, 128]), "y": t(list(out), role="output")})


def test_a_slice_of_a_result_read_in_its_leaf_task_stays_on_chip():
    # e's tile j (16 rows x 128) holds the slice's tile j (16 rows x 64): one leaf task per
    # row block, e never goes to GM, the mul's tiles read inside e's
    program = compile_kernel(_slice_of_result({"shape": [64, 64], "offsets": [0, 0]},
                                              [16, 128], [16, 128]), HW)
    assert program.leaf_tasks == 4 and program.workspace_bytes == 0
    assert all(ops == ("exp", "mul") for ops in leaf_ops(program))
    assert program.work.mte2_bytes.sum() == 64 * 128 * 4          # x, once
    assert program.work.mte3_bytes.sum() == 64 * 64 * 4           # only y
    assert program.edge_src.size == 0


def test_a_slice_read_in_another_leaf_task_reads_only_its_bytes_of_the_workspace():
    # in another scope the mul meets e through e's workspace: e goes out whole (64 x 128),
    # the mul reads back only its slice (64 x 64), and each of its tiles waits for the one
    # exp tile under it
    view = {"shape": [64, 64], "offsets": [0, 64]}
    program = compile_kernel(_slice_of_result(view, [16, 128], [16, 128], scopes=(1, 2)), HW)
    assert program.leaf_tasks == 8 and program.workspace_bytes == 64 * 128 * 4
    assert program.work.mte2_bytes.sum() == 64 * 128 * 4 + 64 * 64 * 4
    assert program.work.mte3_bytes.sum() == 64 * 128 * 4 + 64 * 64 * 4
    assert program.edge_src.size == 4
    # a slice straddling two of e's row blocks waits for both
    straddle = compile_kernel(_slice_of_result({"shape": [32, 64], "offsets": [8, 0]},
                                               [16, 128], [16, 128], (1, 2), (32, 64)), HW)
    assert straddle.leaf_tasks == 4 + 2 and straddle.edge_src.size == 2 * 2
    assert straddle.work.mte2_bytes.sum() == 64 * 128 * 4 + 32 * 64 * 4


def test_a_slice_whose_tiles_do_not_line_up_meets_through_the_workspace():
    # e cut [16, 64] has 8 tiles, the slice's mul 4: they cannot share leaf tasks
    program = compile_kernel(_slice_of_result({"shape": [64, 64], "offsets": [0, 0]},
                                              [16, 64], [16, 64]), HW)
    assert program.leaf_tasks == 8 + 4 and program.edge_src.size == 4
    assert program.work.mte2_bytes.sum() == 64 * 128 * 4 + 64 * 64 * 4


def test_a_view_of_a_result_can_be_assembled_into_gm():
    # y = view(exp(x)) written directly: each exp tile writes its part of the view's box
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 128]},
         {"op": "exp", "inputs": ["x"], "out": "e"},
         {"op": "view", "inputs": ["e"], "out": "s", "shape": [24, 64], "offsets": [8, 32]},
         {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}],
        {"x": t([64, 128]), "y": t([24, 64], role="output")}), HW)
    assert program.leaf_tasks == 4
    assert program.work.mte3_bytes.tolist() == [8 * 64 * 4, 16 * 64 * 4, 0, 0]


def test_a_view_of_a_result_with_a_valid_shape_works_on_its_valid_rows():
    # a [16, 64] view of exp(x) holding data in its first 10 rows: the mul that reads it
    # works on 10 of its 16 rows, in exp's leaf task
    def program(valid):
        view = {"shape": [16, 64], "offsets": [0, 64]}
        if valid:
            view["valid_shape"] = [10, 64]
        return compile_kernel(kernel(
            [{"set_vec_tile_shapes": [16, 128]},
             {"op": "exp", "inputs": ["x"], "out": "e"},
             {"op": "view", "inputs": ["e"], "out": "s", **view},
             {"op": "mul", "inputs": ["s"], "scalar": 2.0, "out": "m"}, store("m")],
            {"x": t([16, 128]), "y": t([16, 64], role="output")}), HW)
    full, part = program(False), program(True)
    def mul_bytes(p):
        k = p.work.vector.kinds.index("muls")
        return p.work.vector.bytes[p.work.vector.kind == k].sum()
    assert full.leaf_tasks == part.leaf_tasks == 1 and part.workspace_bytes == 0
    assert mul_bytes(full) == 16 * 64 * 4 and mul_bytes(part) == 10 * 64 * 4


def _reshaped(tile_p, shape, tile_c, scopes=(None, None), back=True):
    """e = exp(x) [64, 128] under tile_p, reshaped and multiplied under tile_c; with back,
    reshaped again to [64, 128] and added to x under tile_p."""
    sp, sc = ([{"sg_set_scope": s}] if s is not None else [] for s in scopes)
    tail = [{"set_vec_tile_shapes": tile_p},
            {"op": "reshape", "inputs": ["m"], "out": "back", "shape": [64, 128]},
            {"op": "add", "inputs": ["back", "x"], "out": "z"},
            store("z")] if back else [store("m", [0] * len(shape))]
    return kernel(sp + [{"set_vec_tile_shapes": tile_p},
                        {"op": "exp", "inputs": ["x"], "out": "e"}] + sc +
                  [{"set_vec_tile_shapes": tile_c},
                   {"op": "reshape", "inputs": ["e"], "out": "r", "shape": shape,
                    "inplace": False},
                   {"op": "mul", "inputs": ["r"], "scalar": 2.0, "out": "m"}] + tail,
                  {"x": t([64, 128]),
                   "y": t([64, 128] if back else list(shape), role="output")})


def test_an_on_chip_reshape_whose_tiles_are_whole_rows_stays_on_chip():
    # [64, 128] -> [2, 32, 128]: the mul's tile [1, 16, 128] is exp's tile [16, 128], and
    # reshaped back the add's tile [16, 128] is the mul's
    program = compile_kernel(_reshaped([16, 128], [2, 32, 128], [1, 16, 128]), HW)
    assert program.leaf_tasks == 4 and program.workspace_bytes == 0
    assert all(ops == ("exp", "mul", "add") for ops in leaf_ops(program))
    assert program.work.mte2_bytes.sum() == 64 * 128 * 4       # x, once per leaf task
    # flattened to [8192] and read 2048 elements (16 rows) at a time: the same
    flat = compile_kernel(_reshaped([16, 128], [8192], [2048]), HW)
    assert flat.leaf_tasks == 4 and flat.workspace_bytes == 0
    assert all(ops == ("exp", "mul", "add") for ops in leaf_ops(flat))


def test_an_on_chip_reshape_read_elsewhere_reads_the_rows_of_its_tile():
    # in another scope the mul reads its tile's 16 rows of e's workspace and waits for the
    # exp tile that wrote them; the add, reshaped back in the mul's scope, joins the mul
    program = compile_kernel(_reshaped([16, 128], [8192], [2048], scopes=(1, 2)), HW)
    assert program.leaf_tasks == 4 + 4 and program.workspace_bytes == 64 * 128 * 4
    assert program.work.mte2_bytes.sum() == 3 * 64 * 128 * 4   # x, e's workspace, x
    assert program.edge_src.size == 4
    # a mul tile of 4096 elements is 32 rows: two exp tiles under each
    wide = compile_kernel(_reshaped([16, 128], [8192], [4096], (1, 2), back=False), HW)
    assert wide.leaf_tasks == 4 + 2 and wide.edge_src.size == 2 * 2
    assert wide.work.mte2_bytes.sum() == 2 * 64 * 128 * 4


def test_an_on_chip_reshape_read_by_tiles_that_are_no_contiguous_run_goes_through_gm():
    # [64, 128] -> [128, 64] read 48 columns at a time: a tile's rows are not one run of
    # exp's rows, so exp's result goes out to its workspace and each mul tile reads its
    # (16, 48) box back in the reshaped geometry, waiting for the exp tiles that wrote it
    program = compile_kernel(_reshaped([16, 128], [128, 64], [16, 48], back=False), HW)
    exp_bytes = 64 * 128 * 4
    assert program.workspace_bytes == exp_bytes
    leaves = leaf_ops(program)
    assert leaves.count(("exp",)) == 4 and leaves.count(("mul",)) == 8 * 2
    # x once, and each mul tile's box of the workspace (16 x 48 and 16 x 16 at the edge)
    assert program.work.mte2_bytes.sum() == exp_bytes + exp_bytes
    # a box of 16 rows of 64 in [128, 64] lies in 8 rows of exp's [64, 128]: 2 exp tiles
    # hold them only when it crosses a 16-row boundary, so each mul waits on one or two
    assert program.edge_src.size >= 16
    # a view stands between: the result cannot be reinterpreted in the reshaped geometry,
    # but each tile row is still a run of exp's rows; the mul reads the runs' bounding box
    # of exp's result, here from its workspace (exp runs in other leaf tasks), after exp
    through_view = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 128]}, {"op": "exp", "inputs": ["x"], "out": "e"},
         {"op": "view", "inputs": ["e"], "out": "v", "shape": [32, 128], "offsets": [0, 0]},
         {"set_vec_tile_shapes": [16, 48]},
         {"op": "reshape", "inputs": ["v"], "out": "r", "shape": [64, 64]},
         {"op": "mul", "inputs": ["r"], "scalar": 2.0, "out": "m"},
         {"op": "assemble", "inputs": ["m"], "out": "y", "offsets": [0, 0]}],
        {"x": t([64, 128]), "y": t([64, 64], role="output")}), HW)
    assert leaf_ops(through_view).count(("mul",)) == 8
    assert through_view.work.mte2_bytes.sum() >= exp_bytes + 64 * 64 * 4
    assert through_view.edge_src.size >= 8


def test_an_on_chip_transpose_costs_what_a_gm_transpose_costs():
    # transpose(exp(x)) and transpose(x) move the same bytes through the vector transpose
    def program(src):
        ops = [{"op": "exp", "inputs": ["x"], "out": "e"}] if src == "e" else []
        return compile_kernel(kernel(
            [{"set_vec_tile_shapes": [64, 64]}] + ops +
            [{"op": "transpose", "inputs": [src], "out": "tt", "perm": [1, 0]},
             {"op": "assemble", "inputs": ["tt"], "out": "y", "offsets": [0, 0]}],
            {"x": t([64, 128]), "y": t([128, 64], role="output")}), HW)
    on_chip, gm = program("e"), program("x")
    def transpose_bytes(p):
        k = p.work.vector.kinds.index("transpose")
        return p.work.vector.bytes[p.work.vector.kind == k].sum()
    assert transpose_bytes(on_chip) == transpose_bytes(gm) == 64 * 128 * 4
    # exp's tile [64, 64] at columns 64j is the transpose's input tile j: on chip
    assert on_chip.workspace_bytes == 0 and on_chip.leaf_tasks == gm.leaf_tasks == 2


# 12. erfc: one tile op made of the instructions of upstream's TErfc -----------------------
def test_erfc_is_priced_as_the_instructions_of_its_tile_body():
    from simcore.compiler.ops import COMPOSITES
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [8, 64]},
         {"op": "erfc", "inputs": ["x"], "out": "z"},
         {"op": "assemble", "inputs": ["z"], "out": "y", "offsets": [0, 0]}],
        {"x": t([8, 64]), "y": t([8, 64], role="output")}), HW)
    parts = COMPOSITES["erfc"]
    assert set(program.work.vector.kinds) == {k for k, _ in parts}
    issue = HW.pipes.vector_issue
    # one [8, 64] fp32 tile: 8 rows of one repeat per instruction; each instruction after
    # the first waits for the one before it
    want = sum(c * (HW.pipes.vector[k].fixed_cycles + 8 * issue.repeat_bytes
                    / HW.pipes.vector[k].bytes_per_cycle + issue.issue_cycles)
               for k, c in parts)
    want += (sum(c for _, c in parts) - 1) * issue.dependency_cycles
    got = static_pipe_us(HW, program)["vector"][0] * HW.cores.clock_mhz
    assert got == pytest.approx(want)
    assert program.work.mte2_bytes.sum() == program.work.mte3_bytes.sum() == 8 * 64 * 4


def test_erfc_needs_fp32_and_its_scratch_in_ub():
    with pytest.raises(ConfigError, match="erfc' works on fp32"):
        compile_kernel(kernel([{"set_vec_tile_shapes": [8, 64]},
                               {"op": "erfc", "inputs": ["x"], "out": "z"}, store("z")],
                              {"x": t([8, 64], "fp16"), "y": t([8, 64], "fp16", "output")}),
                       HW)
    # a tile whose in + out fits UB but not with erfc's four fp32 scratch tiles
    rows = HW.buffers.ub // (2 * 64 * 4) // 8 * 8
    io = {"x": t([rows, 64]), "y": t([rows, 64], role="output")}
    ok = kernel([{"set_vec_tile_shapes": [rows, 64]},
                 {"op": "exp", "inputs": ["x"], "out": "z"}, store("z")], io)
    compile_kernel(ok, HW)
    from simcore.spec.errors import OoOError
    with pytest.raises(OoOError):
        compile_kernel(kernel([{"set_vec_tile_shapes": [rows, 64]},
                               {"op": "erfc", "inputs": ["x"], "out": "z"}, store("z")],
                              io), HW)


# expand (pypto.expand_clone) -------------------------------------------------------------
def _expand(src_shape, shape, tile):
    return kernel([{"set_vec_tile_shapes": tile},
                   {"op": "expand", "inputs": ["x"], "out": "e", "shape": shape},
                   {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0] * len(shape)}],
                  {"x": t(src_shape), "y": t(shape, role="output")})


def test_expand_reads_the_source_once_per_tile_and_writes_the_whole_result():
    """A [64, 1] column stretched to [64, 256]: each [16, 256] tile reads its 16 values and
    writes 16 KB, a row expand (a scalar read and a dup per row); a [1, 256] row stretched
    down the rows is a Vector copy of the row instead, and reads one row per tile."""
    column = compile_kernel(_expand([64, 1], [64, 256], [16, 256]), HW)
    row = compile_kernel(_expand([1, 256], [64, 256], [16, 256]), HW)
    for program, read in ((column, 16 * 4), (row, 256 * 4)):
        assert program.leaf_tasks == 4
        assert np.allclose(program.work.mte2_bytes, read)
        assert np.allclose(program.work.mte3_bytes, 16 * 256 * 4)
    kinds = lambda p: {p.work.vector.kinds[k] for k in p.work.vector.kind}
    assert kinds(column) == {"rowexpand"} and kinds(row) == {"copy"}
    # the row expand pays a scalar read per row on top of the copy's per-row instruction
    assert static_pipe_us(HW, column)["vector"].sum() > static_pipe_us(HW, row)["vector"].sum()


def test_expand_only_stretches_dims_of_one():
    with pytest.raises(ConfigError, match=r"expand of shape \[64, 2\] to \[64, 256\]: only "
                                          r"dims of 1 stretch"):
        compile_kernel(_expand([64, 2], [64, 256], [16, 256]), HW)


# comparisons, logical_not, where ----------------------------------------------------------
def test_a_comparison_gives_one_byte_bools_that_where_selects_by():
    """ge writes a bool (1 byte an element, upstream's DT_BOOL) tile, where reads that mask
    and its two operands and writes the operands' dtype: the mask is a quarter of an fp32
    tile in UB and in GM, and each op is its own vector instruction kind."""
    k = kernel([{"set_vec_tile_shapes": [16, 256]},
                {"op": "ge", "inputs": ["m"], "out": "mask", "scalar": 0.0},
                {"op": "logical_not", "inputs": ["mask"], "out": "off"},
                {"op": "assemble", "inputs": ["off"], "out": "flags", "offsets": [0, 0]},
                {"op": "where", "inputs": ["mask", "x", "y"], "out": "w"},
                {"op": "assemble", "inputs": ["w"], "out": "z", "offsets": [0, 0]}],
               {"m": t([64, 256]), "x": t([64, 256]), "y": t([64, 256]),
                "flags": t([64, 256], "bool", "output"), "z": t([64, 256], role="output")})
    program = compile_kernel(k, HW)
    assert program.leaf_tasks == 4
    # per task: m, x, y read (3 x 16 KB); the bool flags (4 KB) and z (16 KB) written
    assert np.allclose(program.work.mte2_bytes, 3 * 16 * 256 * 4)
    assert np.allclose(program.work.mte3_bytes, 16 * 256 * (1 + 4))
    v = program.work.vector
    assert {v.kinds[i] for i in v.kind} == {"compares", "not", "select"}


def test_where_operands_must_broadcast():
    k = kernel([{"set_vec_tile_shapes": [16, 256]},
                {"op": "gt", "inputs": ["x", "y"], "out": "mask"},
                {"op": "where", "inputs": ["mask", "x", "bad"], "out": "w"},
                {"op": "assemble", "inputs": ["w"], "out": "z", "offsets": [0, 0]}],
               {"x": t([64, 256]), "y": t([64, 256]), "bad": t([64, 128]),
                "z": t([64, 256], role="output")})
    with pytest.raises(ConfigError, match="must match or broadcast"):
        compile_kernel(k, HW)


def test_ub_counts_each_operand_in_its_own_dtype():
    """A bf16 -> fp32 cast of a [2, 16384] tile holds 64 KiB of input and 128 KiB of result:
    exactly the 192 KiB UB (upstream's deepseek_v4 hc_pre test runs that tiling); the same
    tile of an fp32 add (two fp32 inputs and the result, 384 KiB) does not fit."""
    cast = kernel([{"set_vec_tile_shapes": [2, 16384]},
                   {"op": "cast", "inputs": ["x"], "out": "c", "dtype": "fp32"},
                   {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}],
                  {"x": t([2, 16384], "bf16"), "y": t([2, 16384], role="output")})
    assert compile_kernel(cast, HW).leaf_tasks == 1
    add = kernel([{"set_vec_tile_shapes": [2, 16384]},
                  {"op": "add", "inputs": ["a", "b"], "out": "c"},
                  {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}],
                 {"a": t([2, 16384]), "b": t([2, 16384]), "y": t([2, 16384], role="output")})
    with pytest.raises(ConfigError, match=r"UB"):
        compile_kernel(add, HW)


def test_a_result_with_a_valid_tail_writes_only_its_valid_rows():
    """A matmul over a view with a valid_shape (the last block of rows is short) holds data
    in those rows only, and its assemble writes them, so a 34-row output takes a tail block
    of 32 rows of which 2 are valid (upstream's glm_gate at batch 1026 tiles this way)."""
    k = kernel([{"set_cube_tile_shapes": {"m": [32, 32], "k": [64, 64], "n": [64, 64]}},
                {"loop": {"name": "rows", "idx": "i", "trip": 2},
                 "body": [{"op": "view", "inputs": ["x"], "out": "xi", "shape": [32, 64],
                           "offsets": ["i*32", 0], "valid_shape": ["min(34 - i*32, 32)", 64]},
                          {"op": "matmul", "inputs": ["xi", "w"], "out": "r", "dtype": "fp32"},
                          {"op": "assemble", "inputs": ["r"], "out": "y",
                           "offsets": ["i*32", 0]}]}],
               {"x": t([34, 64], "fp16"), "w": t([64, 64], "fp16"),
                "y": t([34, 64], role="output")})
    program = compile_kernel(k, HW)
    assert program.leaf_tasks == 2
    # 34 rows of 64 fp32 results written in all, not two whole 32-row tiles
    written = program.regions.bytes[program.regions.write].sum()
    assert written == 34 * 64 * 4


def _tail_block(steps, last, out_shape, offsets):
    """x [34, 64] in two 32-row blocks, the second holding 2 valid rows (a view with a
    valid_shape), exp of each block, then ``steps`` ending in ``last``, assembled into y."""
    return kernel([{"set_vec_tile_shapes": [64, 64]},
                   {"loop": {"name": "blocks", "idx": "i", "trip": 2},
                    "body": [{"op": "view", "inputs": ["x"], "out": "xi", "shape": [32, 64],
                              "offsets": ["i*32", 0],
                              "valid_shape": ["min(34 - i*32, 32)", 64]},
                             {"op": "exp", "inputs": ["xi"], "out": "e"}, *steps,
                             {"op": "assemble", "inputs": [last], "out": "y",
                              "offsets": offsets}]}],
                  {"x": t([34, 64]), "y": t(out_shape, role="output")})


def _written(program) -> int:
    return int(program.regions.bytes[program.regions.write].sum())


def test_a_transpose_turns_its_inputs_valid_region_round():
    """exp keeps the tail block's 2 valid rows, its transpose holds 2 valid columns, and the
    assemble into the transposed output writes 64 x 34 values in all (a region left
    unturned would write 2 x 64 at the wrong place)."""
    k = _tail_block([{"op": "transpose", "inputs": ["e"], "out": "et", "perm": [1, 0]}],
                    "et", [64, 34], [0, "i*32"])
    assert _written(compile_kernel(k, HW)) == 64 * 34 * 4


def test_a_reshape_names_the_leading_rows_that_stay_valid():
    """The tail block reshaped on chip from [32, 64] to [64, 32] with valid_shape [4, 32]
    (upstream's reshape valid_shape: the row-major prefix its 2 rows fill), then negated
    and assembled: 68 x 32 values written in all.  Without a valid_shape the reshape keeps
    that prefix as its leading rows all the same; a valid_shape cut off the last dim is not
    modeled."""
    for valid in ({"valid_shape": ["min(34 - i*32, 32) * 2", 32]}, {}):
        k = _tail_block([{"op": "reshape", "inputs": ["e"], "out": "r", "shape": [64, 32],
                          **valid},
                         {"op": "neg", "inputs": ["r"], "out": "n"}],
                        "n", [68, 32], ["i*64", 0])
        assert _written(compile_kernel(k, HW)) == 68 * 32 * 4
    bad = kernel([{"set_vec_tile_shapes": [32, 64]},
                  {"op": "exp", "inputs": ["x"], "out": "e"},
                  {"op": "reshape", "inputs": ["e"], "out": "r", "shape": [64, 32],
                   "valid_shape": [64, 16]},
                  {"op": "assemble", "inputs": ["r"], "out": "y", "offsets": [0, 0]}],
                 {"x": t([32, 64]), "y": t([64, 32], role="output")})
    with pytest.raises(ConfigError, match=r"only a number of leading rows is modeled"):
        compile_kernel(bad, HW)


def test_a_move_loads_gm_data_whole_and_writes_it_with_no_vector_instruction():
    """An assemble of a GM view into another GM tensor (the front end's `move`) is one copy
    in and one copy out of the whole view, as upstream's legacy passes leave it: UB holds
    the [128, 512] bf16 piece once (128 KiB, where a Vector copy's input and output tiles
    would need 256), no TileShape is needed and no Vector instruction is priced."""
    k = kernel([{"loop": {"name": "blocks", "idx": "i", "trip": 2},
                 "body": [{"op": "view", "inputs": ["kv"], "out": "piece", "shape": [128, 512],
                           "offsets": ["(3 - i) * 128", 0]},
                          {"op": "move", "inputs": ["piece"], "out": "m"},
                          {"op": "assemble", "inputs": ["m"], "out": "ws",
                           "offsets": ["i * 128", 0]}]}],
               {"kv": t([512, 512], "bf16"), "ws": t([256, 512], "bf16", "temporary")})
    program = compile_kernel(k, HW)
    assert program.leaf_tasks == 2
    piece = 128 * 512 * 2
    assert program.work.mte2_bytes.tolist() == [piece, piece]
    assert program.work.mte3_bytes.tolist() == [piece, piece]
    assert program.work.vector.task.size == 0
    assert static_pipe_us(HW, program)["vector"].sum() == 0
    on_chip = kernel([{"set_vec_tile_shapes": [32, 512]},
                      {"op": "exp", "inputs": ["kv"], "out": "e"},
                      {"op": "move", "inputs": ["e"], "out": "m"},
                      {"op": "assemble", "inputs": ["m"], "out": "ws", "offsets": [0, 0]}],
                     {"kv": t([32, 512]), "ws": t([32, 512], role="temporary")})
    with pytest.raises(ConfigError, match=r"move takes GM data"):
        compile_kernel(on_chip, HW)


def test_a_stretched_column_with_a_valid_shape_leaves_the_result_valid_throughout():
    """A [8, 1] view whose valid_shape is its whole shape, multiplied into [8, 256] rows, is
    valid along the stretched axis too: the product reshapes on chip like any full value
    (upstream's quantised prolog scales its query rows so before a 3-D reshape)."""
    k = kernel([{"set_vec_tile_shapes": [8, 256]},
                {"op": "view", "inputs": ["s"], "out": "col", "shape": [8, 1], "offsets": [0, 0],
                 "valid_shape": [8, 1]},
                {"op": "exp", "inputs": ["x"], "out": "e"},
                {"op": "mul", "inputs": ["e", "col"], "out": "p"},
                {"op": "reshape", "inputs": ["p"], "out": "r", "shape": [8, 2, 128]},
                {"set_vec_tile_shapes": [8, 2, 128]},
                {"op": "neg", "inputs": ["r"], "out": "n"},
                {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0, 0]}],
               {"x": t([8, 256]), "s": t([8, 1]), "y": t([8, 2, 128], role="output")})
    assert _written(compile_kernel(k, HW)) == 8 * 256 * 4


@pytest.mark.usefixtures("consecutive_regions")
def test_a_row_of_a_reshaped_result_is_assembled_where_its_offsets_say():
    """exp of [4, 128] reshaped on chip to [4, 1, 1, 128]; each row i (a view) is assembled
    at row 3 i of y: four 512-byte rows written, lines 0, 3, 6 and 9 of y's first region."""
    body = [{"set_vec_tile_shapes": [4, 128]},
            {"op": "exp", "inputs": ["x"], "out": "e"},
            {"op": "reshape", "inputs": ["e"], "out": "r", "shape": [4, 1, 1, 128]}]
    for i in range(4):
        body += [{"op": "view", "inputs": ["r"], "out": f"row{i}", "shape": [1, 1, 1, 128],
                  "offsets": [i, 0, 0, 0]},
                 {"op": "assemble", "inputs": [f"row{i}"], "out": "y",
                  "offsets": [3 * i, 0, 0, 0]}]
    program = compile_kernel(kernel(body, {"x": t([4, 128]),
                                           "y": t([16, 1, 1, 128], role="output")}), HW)
    regions = program.regions
    assert program.leaf_tasks == 1
    assert regions.bytes[regions.write].sum() == 4 * 512
    lines = np.bitwise_or.reduce(regions.lines[regions.write])
    assert int(lines) == sum(1 << (3 * i) for i in range(4))


@pytest.mark.usefixtures("consecutive_regions")
def test_a_reshaped_result_whose_tiles_are_no_rows_of_it_is_written_in_its_own_geometry():
    """exp of [8, 12, 128] tiled (4, 12, 32), reshaped on chip to [8, 1536] and assembled
    at row 8 of y [16, 1536]: a tile is 48 runs of 32 values of y, no box of it, so each
    tile is written into y seen as [16, 12, 128] (the same bytes).  Rows 8-15 of y are
    bytes 49152-98303: the second half of region 1 and all of region 2.  With the reshape's
    valid_shape [3, 1536] only three rows are written."""
    def program(valid):
        return compile_kernel(kernel(
            [{"set_vec_tile_shapes": [4, 12, 32]},
             {"op": "exp", "inputs": ["x"], "out": "e"},
             {"op": "reshape", "inputs": ["e"], "out": "r", "shape": [8, 1536], **valid},
             {"op": "assemble", "inputs": ["r"], "out": "y", "offsets": [8, 0]}],
            {"x": t([8, 12, 128]), "y": t([16, 1536], role="output")}), HW)
    full = program({})
    assert full.leaf_tasks == 8
    assert _written(full) == 8 * 1536 * 4
    regions = full.regions
    lines = {}
    for region, bits in zip(regions.region[regions.write], regions.lines[regions.write]):
        lines[int(region) & ((1 << 40) - 1)] = lines.get(int(region) & ((1 << 40) - 1), 0) | \
            int(bits)
    assert lines == {1: ((1 << 32) - 1) << 32, 2: (1 << 64) - 1}
    assert _written(program({"valid_shape": [3, 1536]})) == 3 * 1536 * 4


def test_a_copying_reshape_into_another_rank_takes_upstreams_default_copy_tile():
    """A reshape with inplace=False copies its input, tiled in the input's geometry: by the
    TileShape in force when it has the input's rank, else by upstream's default tile of a
    copy it inserts (the last dim rounded up to a power of two, at least 32, then the dims
    before it within 16384 elements).  A [128, 128] matrix reshaped to [1, 128, 128] under
    the 3-D tile (1, 32, 128) is one [128, 128] copy, not 512 copies of (1, 32)."""
    from simcore.compiler.ops import default_copy_tile
    assert default_copy_tile((128, 128)) == (128, 128)
    assert default_copy_tile((5120, 1)) == (512, 1)        # a last dim of 1 counts as 32
    assert default_copy_tile((2, 100000)) == (1, 16384)

    def copies(tile):
        program = compile_kernel(kernel(
            [{"set_vec_tile_shapes": tile},
             {"op": "reshape", "inputs": ["h"], "out": "h3", "shape": [1, 128, 128],
              "inplace": False},
             {"set_vec_tile_shapes": [1, 32, 128]},
             {"op": "exp", "inputs": ["h3"], "out": "e"},
             {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0, 0, 0]}],
            {"h": t([128, 128], "bf16"), "y": t([1, 128, 128], "bf16", "output")}), HW)
        return sum("reshape" in ops for ops in leaf_ops(program))
    assert copies([1, 32, 128]) == 1
    assert copies([32, 128]) == 4       # the input's rank: its own tile


def test_a_copying_reshape_of_a_view_keeps_the_valid_rows_it_names():
    """A [16, 1, 32] view holding 3 valid rows, copied by a reshape to [16, 32] with
    valid_shape [3, 32] (upstream's GDR kernel does this per chunk): the neg over it and the
    assemble work on those 3 rows."""
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 1, 32]},
         {"op": "view", "inputs": ["x"], "out": "v", "shape": [16, 1, 32], "offsets": [0, 2, 0],
          "valid_shape": [3, 1, 32]},
         {"op": "reshape", "inputs": ["v"], "out": "r", "shape": [16, 32], "inplace": False,
          "valid_shape": [3, 32]},
         {"set_vec_tile_shapes": [16, 32]},
         {"op": "neg", "inputs": ["r"], "out": "n"},
         {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0]}],
        {"x": t([16, 4, 32]), "y": t([3, 32], role="output")}), HW)
    assert _written(program) == 3 * 32 * 4


def test_arange_is_a_chain_of_one_block_and_one_repeat_adds_after_a_scalar_block():
    """upstream's TRange fills a tile's first 32-byte block from the scalar unit, then each
    further block of the first repeat (up to 7) and each further 256-byte repeat with a
    TADDS of the one before, behind a barrier: 128 int32 values are 8 stores, 7 block adds
    and 1 repeat add; 8 values are the stores alone."""
    def program(n, tile):
        return compile_kernel(kernel([{"set_vec_tile_shapes": [tile]},
                                      {"op": "arange", "out": "i", "shape": [n],
                                       "dtype": "int32"},
                                      {"op": "assemble", "inputs": ["i"], "out": "y",
                                       "offsets": [0]}],
                                     {"y": t([n], "int32", "output")}), HW)
    long = program(128, 128)
    assert long.leaf_tasks == 1
    assert long.work.scalar_stores.tolist() == [8]             # a fill: stores, no loads
    assert long.work.scalar_elements.tolist() == [0]
    vector = long.work.vector
    adds = vector.kinds.index("adds")
    assert vector.tiles[vector.kind == adds].sum() == 8        # 7 block adds + 1 repeat add
    short = program(8, 8)
    assert short.work.scalar_stores.tolist() == [8] and short.work.vector.task.size == 0
    tiled = program(256, 64)
    assert tiled.leaf_tasks == 4


def test_a_reduction_keeps_the_valid_rows_of_its_input_and_a_squeeze_keeps_any_box():
    """A row sum over a [16, 64] view holding 3 valid rows holds data in 3 rows (assembled
    into a [3, 1] output), and a reshape that only adds a dim of 1 carries a valid region
    cut in the last dim ([16, 20] of [16, 64] -> [16, 1, 20] of [16, 1, 64])."""
    summed = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 64]},
         {"op": "view", "inputs": ["x"], "out": "v", "shape": [16, 64], "offsets": [0, 0],
          "valid_shape": [3, 64]},
         {"op": "sum", "inputs": ["v"], "out": "s", "axis": -1, "keepdim": True},
         {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}],
        {"x": t([16, 64]), "y": t([3, 1], role="output")}), HW)
    assert _written(summed) == 3 * 4
    squeezed = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 64]},
         {"op": "view", "inputs": ["x"], "out": "v", "shape": [16, 64], "offsets": [0, 0],
          "valid_shape": [16, 20]},
         {"op": "exp", "inputs": ["v"], "out": "e"},
         {"op": "reshape", "inputs": ["e"], "out": "r", "shape": [16, 1, 64]},
         {"set_vec_tile_shapes": [16, 1, 64]},
         {"op": "neg", "inputs": ["r"], "out": "n"},
         {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0, 0]}],
        {"x": t([16, 64]), "y": t([16, 1, 20], role="output")}), HW)
    assert _written(squeezed) == 16 * 20 * 4


# topk ------------------------------------------------------------------------------------
def _topk(shape, tile, k, parts=("indices",), largest=True, dtype="fp32"):
    order = {} if largest else {"largest": False}
    body = [{"set_vec_tile_shapes": tile},
            {"op": "topk", "inputs": ["x"], "out": "p", "k": k, **order}]
    tensors = {"x": t(shape, dtype)}
    for part in parts:
        body += [{"op": "topk_extract", "inputs": ["p"], "out": part, "k": k, "part": part,
                  **order},
                 {"op": "assemble", "inputs": [part], "out": f"y_{part}",
                  "offsets": [0] * len(shape)}]
        tensors[f"y_{part}"] = t([*shape[:-1], k], "int32" if part == "indices" else "fp32",
                                 "output")
    return compile_kernel(kernel(body, tensors), HW)


def test_topk_sorts_each_tile_then_merges_the_tiles_lists_four_at_a_time():
    """The lightning indexer's topk (2048 of rows of 65536, TileShape [1, 8192]): each row
    is 8 sort tiles, each an index list filled by the scalar unit, 256 vbitsort repeats and
    4 vmrgsort4 passes (runs of 32 -> 128 -> 512 -> 2048 -> 8192); the 8 lists of 2048
    pairs then merge 4 at a time, 2 merges and 1, and one extraction takes the indices."""
    program = _topk([4, 65536], [1, 8192], 2048)
    ops = leaf_ops(program)
    assert sum(o == ("topk",) for o in ops) == 4 * (8 + 2)      # sorts and first merges
    assert sum("topk_extract" in o for o in ops) == 4           # the last merge's task
    assert program.leaf_tasks == 4 * 11
    work = program.work
    assert work.scalar_stores.sum() == 32 * 8192                # one index list a sort tile
    vector = work.vector
    merge = vector.kinds.index("mrgsort")
    sorted_bytes = 32 * 8192 * 8                                # pairs: 8 bytes an element
    merged_bytes = 4 * (8 + 2) * 2048 * 8                       # 8 then 2 lists a row read
    assert vector.bytes[vector.kind == merge].sum() == 4 * sorted_bytes + merged_bytes
    # the fill prices at a store and the loop's three integer ops an element
    pipes = static_pipe_us(HW, program)
    sort_task = next(i for i, o in enumerate(ops) if o == ("topk",))
    fill = 8192 * HW.pipes.scalar.store_cycles_per_element / HW.cores.clock_mhz
    assert pipes["scalar"][sort_task] > fill


def test_topk_widens_a_short_tile_of_a_long_row_and_checks_k_and_dtype():
    """A row more than twice the TileShape's last dim is cut in tiles of up to 8192
    elements (upstream's TiledTopK), whatever the TileShape says; k may not pass the
    TileShape's last dim, and MERGE_SORT sorts fp32 only."""
    narrow = _topk([1, 65536], [1, 1024], 512)
    assert narrow.work.scalar_stores.sum() == 65536
    assert sum(o == ("topk",) for o in leaf_ops(narrow)) == 8 + 2
    whole = _topk([2, 1000], [2, 256], 8)           # 2000 elements: the whole row, padded
    assert whole.leaf_tasks == 1
    assert whole.work.scalar_stores.sum() == 1000
    with pytest.raises(ConfigError, match=r"k=300 .*TileShape's last dim \(256\)"):
        _topk([2, 1000], [2, 256], 300)
    with pytest.raises(ConfigError, match="topk sorts fp32"):
        _topk([2, 1000], [2, 256], 8, dtype="fp16")


def test_topk_smallest_first_flips_the_keys_and_both_halves_cost_an_extraction():
    """largest=False adds a TADDS of the keys before the sort (and of the values after);
    each half read costs one vreducev2 over the pairs."""
    largest = static_pipe_us(HW, _topk([8, 160], [8, 160], 8))["vector"].sum()
    smallest = static_pipe_us(HW, _topk([8, 160], [8, 160], 8, largest=False))["vector"].sum()
    assert smallest > largest
    both = _topk([8, 160], [8, 160], 8, parts=("values", "indices"))
    vector = both.work.vector
    assert vector.tiles[vector.kind == vector.kinds.index("gathermask")].sum() == 2
    assert both.leaf_tasks == 1


@pytest.mark.parametrize("source", [
    {"op": "full", "out": "f", "shape": [16, 64], "value": 1.0, "dtype": "fp32",
     "valid_shape": [3, 64]},
    {"op": "expand", "inputs": ["x"], "out": "f", "shape": [16, 64], "valid_shape": [3, 64]}])
def test_a_full_or_expand_with_a_valid_shape_holds_data_in_that_region_only(source):
    """pypto.full / expand_clone(..., valid_shape=...) as a view's valid region: a row sum
    of a [16, 64] value holding 3 valid rows writes 3 values."""
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 64]}, source,
         {"op": "sum", "inputs": ["f"], "out": "s", "axis": -1, "keepdim": True},
         {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}],
        {"x": t([16, 1]), "y": t([3, 1], role="output")}), HW)
    assert _written(program) == 3 * 4


def test_topk_tiles_past_a_views_valid_length_sort_nothing():
    """A topk of a [1, 65536] view holding 20000 valid elements (the lightning indexer's
    scores of one token): of its 8 sort tiles of 8192, the 3 that hold data fill their
    index lists (the third 3616 elements), the other 5 are empty tasks."""
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [1, 8192]},
         {"op": "view", "inputs": ["x"], "out": "v", "shape": [1, 65536], "offsets": [0, 0],
          "valid_shape": [1, 20000]},
         {"op": "topk", "inputs": ["v"], "out": "p", "k": 2048},
         {"op": "topk_extract", "inputs": ["p"], "out": "i", "k": 2048, "part": "indices"},
         {"op": "assemble", "inputs": ["i"], "out": "y", "offsets": [0, 0]}],
        {"x": t([1, 65536]), "y": t([1, 2048], "int32", "output")}), HW)
    stores = program.work.scalar_stores
    assert sorted(stores[stores > 0].tolist()) == [3616, 8192, 8192]


# an op's result in an input's UB buffer (upstream's SrcDstBufferMerge) ---------------------
def test_a_result_takes_the_buffer_of_an_input_nothing_else_reads():
    """x * w on [20, 1024] fp32 tiles (80 KiB each): three tiles do not fit the 192 KiB UB,
    but the product takes x's buffer (nothing else reads x), so it runs; the exp after it
    takes the product's, so both ops share one leaf task per tile.  A broadcast operand's
    expanded tile ([4, 5120] fp32 rows times a [4, 1] column, glm_ffn's shape) is read by
    its op only, so the result takes it: two 80 KiB tiles, not three."""
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [20, 1024]},
         {"op": "mul", "inputs": ["x", "w"], "out": "p"},
         {"op": "exp", "inputs": ["p"], "out": "e"},
         {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": [0, 0]}],
        {"x": t([40, 1024]), "w": t([40, 1024]), "y": t([40, 1024], role="output")}), HW)
    assert leaf_ops(program) == [("mul", "exp")] * 2
    broadcast = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [4, 5120]},
         {"op": "mul", "inputs": ["x", "s"], "out": "p"},
         {"op": "assemble", "inputs": ["p"], "out": "y", "offsets": [0, 0]}],
        {"x": t([8, 5120]), "s": t([8, 1]), "y": t([8, 5120], role="output")}), HW)
    assert broadcast.leaf_tasks == 2
    with pytest.raises(OoOError, match="mul"):      # 104 KiB tiles: two do not fit either
        compile_kernel(kernel(
            [{"set_vec_tile_shapes": [26, 1024]},
             {"op": "mul", "inputs": ["x", "w"], "out": "p"},
             {"op": "assemble", "inputs": ["p"], "out": "y", "offsets": [0, 0]}],
            {"x": t([52, 1024]), "w": t([52, 1024]), "y": t([52, 1024], role="output")}), HW)


def test_a_result_read_elsewhere_keeps_its_buffer():
    """A value also assembled to GM is copied out: it has a second consumer, so the next
    op's result cannot take its buffer, and an op that fits UB only by taking it goes to a
    leaf function of its own (where the value is copied back in, read by it alone)."""
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [24, 1024]},
         {"op": "exp", "inputs": ["x"], "out": "a"},
         {"op": "assemble", "inputs": ["a"], "out": "z", "offsets": [0, 0]},
         {"op": "mul", "inputs": ["a", "w"], "out": "p"},
         {"op": "assemble", "inputs": ["p"], "out": "y", "offsets": [0, 0]}],
        {"x": t([24, 1024]), "w": t([1, 1024]), "z": t([24, 1024], role="output"),
         "y": t([24, 1024], role="output")}), HW)
    assert sorted(leaf_ops(program)) == [("exp",), ("mul",)]


def test_a_view_of_an_on_chip_reshape_of_a_view_is_read_in_place():
    """Upstream's GDR inverse reads row.reshape([8, 16]).view([8, i]) of a row of an on-chip
    [16, 128] value (gated_delta_rule_impl.py): each row of that view is a run of the
    value's row, read where it lies in UB, in the producer's leaf task, no GM round trip."""
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 128]},
         {"op": "add", "inputs": ["x"], "out": "a", "scalar": 0.0},
         {"op": "view", "inputs": ["a"], "out": "row", "shape": [1, 128], "offsets": [3, 0]},
         {"op": "reshape", "inputs": ["row"], "out": "r", "shape": [8, 16]},
         {"op": "view", "inputs": ["r"], "out": "v", "shape": [8, 2], "offsets": [0, 0]},
         {"op": "transpose", "inputs": ["v"], "out": "tr", "perm": [1, 0]},
         {"op": "assemble", "inputs": ["tr"], "out": "y", "offsets": [0, 0]}],
        {"x": t([16, 128]), "y": t([2, 8], role="output")}), HW)
    assert leaf_ops(program) == [("add", "transpose")]
    assert program.work.round_trips.tolist() == [0]


def test_fillpad_fills_past_the_valid_region_and_its_result_holds_data_everywhere():
    """pypto.fillpad of a [16, 64] view holding 3 valid rows: a copy of the tile and a dup
    of the padding (pto-isa's TFillPad); a row sum after it writes all 16 rows."""
    program = compile_kernel(kernel(
        [{"set_vec_tile_shapes": [16, 64]},
         {"op": "view", "inputs": ["x"], "out": "v", "shape": [16, 64], "offsets": [0, 0],
          "valid_shape": [3, 64]},
         {"op": "fillpad", "inputs": ["v"], "out": "f", "value": 0.0},
         {"op": "sum", "inputs": ["f"], "out": "s", "axis": -1, "keepdim": True},
         {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}],
        {"x": t([16, 64]), "y": t([16, 1], role="output")}), HW)
    assert _written(program) == 16 * 4
    vector = program.work.vector
    assert {vector.kinds[k] for k in vector.kind} >= {"copy", "dup"}
    assert program.work.mte2_bytes.sum() == 3 * 64 * 4        # only the valid rows load


# pypto.experimental.gather_in_ub ------------------------------------------------------
def _gather_in_ub(k, tile=(16, 128), values=None, kv_shape=(256, 128), **changes):
    """k rows of a [256, 128] fp16 KV cache in blocks of 16 tokens, through a 16-entry table."""
    op = {"op": "gather_in_ub", "inputs": ["kv", "idx", "bt"], "out": "g", "block_size": 16,
          "axis": -2, **changes.pop("op", {})}
    tensors = {"kv": t(list(kv_shape), "fp16"), "idx": t([1, k], "int32"),
               "bt": t([1, 16], "int32"), "y": t([k, 128], "fp16", role="output")}
    for name, dtype in changes.items():
        tensors[name]["dtype"] = dtype
    return kernel([{"set_vec_tile_shapes": list(tile)}, op, store("g")], tensors,
                  **({"values": values} if values else {}))


def _kv_rows(program) -> list[int]:
    """The KV-cache rows the (single) root call's tasks read, one per read box."""
    operands = program.root_functions[0].operands
    kv = [i for i, tensor in enumerate(operands.tensors) if tensor[0] == "kv"]
    rows = np.isin(operands.tensor, kv) & ~operands.write
    assert (operands.hi[rows, 0] - operands.lo[rows, 0] == 1).all()    # a row a box
    return sorted(int(r) for r in operands.lo[rows, 0])


@pytest.mark.parametrize("k", [16, 48])
def test_gather_in_ub_reads_k_rows_each_its_own_burst_and_copy(k):
    program = compile_kernel(_gather_in_ub(k), HW)
    tasks = k // 16
    assert program.leaf_tasks == tasks                     # the TileShape cuts k by 16
    # stand-in data: token j, blocks in table order, so rows 0 .. k-1
    assert _kv_rows(program) == list(range(k))
    w = program.work
    # per task: 16 rows of 256 bytes, each its own burst and copy, plus the scalar unit's
    # reads of 16 indices and one table entry (a burst each, no copy)
    assert (w.mte2_loads == 16).all() and (w.mte2_bursts == 16 + 2).all()
    assert (w.mte2_bytes == 16 * 128 * 2 + 16 * 4 + 4).all()
    assert w.vector.task.size == 0                         # no Vector instruction
    assert w.scalar_elements.sum() == 2 * k                # an index and an entry a row


def test_gather_in_ub_reads_the_rows_the_data_names():
    # token 2j in a table that reverses the blocks: row (15 - 2j // 16) * 16 + 2j % 16
    values = {"idx": [list(range(0, 64, 2))], "bt": [list(range(15, -1, -1))]}
    program = compile_kernel(_gather_in_ub(32, values=values), HW)
    assert _kv_rows(program) == sorted((15 - 2 * j // 16) * 16 + 2 * j % 16 for j in range(32))
    bad = {"idx": [[300] * 32], "bt": [list(range(16))]}
    with pytest.raises(ConfigError, match="block-table entry 18"):
        compile_kernel(_gather_in_ub(32, values=bad), HW)
    # the same token with the table left to its stand-in: the row still has 16 entries
    with pytest.raises(ConfigError, match="block-table entry 18.*16 entries"):
        compile_kernel(_gather_in_ub(32, values={"idx": [[300] * 32]}), HW)


def test_gather_in_ub_time_grows_with_k():
    from simcore.machine.engine import Machine
    from simcore.spec.options import RuntimeOptions

    def kernel_us(k):
        program = compile_kernel(_gather_in_ub(k, tile=(k, 128)), HW)
        return Machine(HW, program, RuntimeOptions()).run().kernel_us
    times = [kernel_us(k) for k in (16, 64, 256)]
    assert times[0] < times[1] < times[2]


def test_gather_in_ub_refuses_bad_inputs_naming_the_field():
    with pytest.raises(Exception, match="'axis' must be -2"):
        _gather_in_ub(16, op={"axis": 0})
    with pytest.raises(ConfigError, match=r"body\[1\].*indices is int64.*int32"):
        compile_kernel(_gather_in_ub(16, idx="int64"), HW)
    with pytest.raises(ConfigError, match=r"body\[1\].*block_table is fp32.*int32"):
        compile_kernel(_gather_in_ub(16, bt="fp32"), HW)
    with pytest.raises(ConfigError, match=r"param has shape \[32768\].*2-D"):
        compile_kernel(_gather_in_ub(16, kv_shape=[256 * 128]), HW)
    with pytest.raises(OoOError, match="UB"):
        compile_kernel(_gather_in_ub(4096, tile=(4096, 128)), HW)
