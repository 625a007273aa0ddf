"""How a matmul's operands come into L1: a kL1 block per copy with
``enable_multi_data_load`` (the guides' 减少重复载入, "large-packet" loads), else a piece
per kL0 step; each copy pays its fixed time and each of its rows a burst setup."""
import pytest

from simcore.compiler import compile_kernel
from simcore.machine import simulate
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

HW = load_hardware("dav_2201")


def matmul(k, multi=False, M=1024, K=2048, N=2048, b_trans=False):
    """[M, K] x [K, N] fp16 (B stored [N, K] with b_trans) with the first recommended tile
    m[128,128] n[256,256] and cube tile k ``k``: its Program and kernel time."""
    b_shape = [N, K] if b_trans else [K, N]
    kernel = Kernel.model_validate({
        "name": "mm",
        "tensors": {"a": {"shape": [M, K], "dtype": "fp16", "role": "input"},
                    "b": {"shape": b_shape, "dtype": "fp16", "role": "input"},
                    "c": {"shape": [M, N], "role": "output"}},
        "body": [{"set_cube_tile_shapes": {"m": [128, 128], "k": list(k), "n": [256, 256],
                                           "enable_multi_data_load": multi}},
                 {"op": "matmul", "inputs": ["a", "b"], "b_trans": b_trans, "out": "o"},
                 {"op": "assemble", "inputs": ["o"], "out": "c", "offsets": [0, 0]}]})
    program = compile_kernel(kernel, HW)
    return program, simulate(HW, program, kernel.options.runtime_options).kernel_us


def test_large_packets_copy_a_kl1_block_at_a_time_and_run_faster():
    """k [64, 256] on K = 2048: 32 pieces of each operand per task in small packets, 8
    blocks in large ones; A's rows (K is its contiguous axis) are cut at each piece, so a
    small packet moves 128-byte runs.  Bytes stay the same; the copies and runs cost."""
    small, small_us = matmul((64, 256))
    large, large_us = matmul((64, 256), multi=True)
    tasks = small.leaf_tasks
    assert large.leaf_tasks == tasks
    assert small.work.mte2_loads.sum() == tasks * 2 * 2048 // 64
    assert large.work.mte2_loads.sum() == tasks * 2 * 2048 // 256
    assert small.work.mte2_bytes.sum() == large.work.mte2_bytes.sum()
    # A: 128 rows cut into 32 or 8 runs; B ([K, N], K outer): one run per row either way
    assert small.work.mte2_bursts.sum() == tasks * (128 * 32 + 2048)
    assert large.work.mte2_bursts.sum() == tasks * (128 * 8 + 2048)
    assert large_us < small_us


def test_with_equal_l0_and_l1_k_the_switch_changes_nothing():
    (p0, t0), (p1, t1) = matmul((128, 128)), matmul((128, 128), multi=True)
    assert p0.work.mte2_loads.sum() == p1.work.mte2_loads.sum()
    assert t0 == t1


def test_kbl1_sets_b_apart_from_a():
    """k [64, 256, 512] (kL0, kAL1, kBL1) with large packets: B comes in blocks of 512,
    half as many copies as A's; without large packets kBL1 does not matter (every kL0 step
    copies its piece), as upstream's tiling reads it only on that path."""
    apart, _ = matmul((64, 256, 512), multi=True)
    alike, _ = matmul((64, 256), multi=True)
    tasks = apart.leaf_tasks
    assert apart.work.mte2_loads.sum() == tasks * (2048 // 256 + 2048 // 512)
    assert alike.work.mte2_loads.sum() == tasks * 2 * (2048 // 256)
    assert matmul((64, 256, 512))[0].work.mte2_loads.sum() == \
        matmul((64, 256))[0].work.mte2_loads.sum()


def test_a_transposed_b_has_its_runs_cut_too():
    """B stored [N, K]: K is its contiguous axis, so its rows split with the pieces."""
    p, _ = matmul((64, 256), b_trans=True)
    tasks = p.leaf_tasks
    assert p.work.mte2_bursts.sum() == tasks * (128 * 32 + 256 * 32)


@pytest.mark.parametrize("extra, multi, split", [
    ("", True, False),                              # 883e7dfb: large packets always on
    (", True", True, True),                         # its fourth positional: split-K
    (", enable_split_k=True", True, True),
    (", enable_multi_data_load=False", False, False),   # a file of the guides' time
])
def test_the_importer_takes_upstreams_argument_order(tmp_path, extra, multi, split):
    """upstream at 883e7dfb: set_cube_tile_shapes(m, k, n, enable_split_k=False), large
    packets always on; the guides' time had the switch, off by default, which a file may
    still name."""
    import yaml
    from pipeline.frontend import kernel_text, trace_file
    path = tmp_path / "mm.py"
    path.write_text(f"""\
import pypto


@pypto.jit
def mm(a: pypto.Tensor((256, 512), pypto.DT_FP16), b: pypto.Tensor((512, 256), pypto.DT_FP16),
       c: pypto.Tensor((256, 256), pypto.DT_FP32)):
    pypto.set_cube_tile_shapes([128, 128], [64, 256], [256, 256]{extra})
    c[:] = pypto.matmul(a, b, pypto.DT_FP32)
""")
    data = yaml.safe_load(kernel_text(trace_file(path, None, None, None), "test"))
    tile = next(iter(v for v in data["tiles"].values() if isinstance(v, dict)))
    assert tile.get("enable_multi_data_load", False) is multi
    assert tile.get("enable_split_k", False) is split


def test_an_operand_the_cube_reads_from_a_workspace_comes_in_pieces_too():
    """A = exp(a) reaches the matmul through its GM workspace: read into L1 the same way
    as a kernel input, a kL0 piece per copy in small packets, its rows cut at each."""
    def program(multi):
        kernel = Kernel.model_validate({
            "name": "mm",
            "tensors": {"a": {"shape": [256, 2048], "dtype": "fp16", "role": "input"},
                        "b": {"shape": [2048, 256], "dtype": "fp16", "role": "input"},
                        "c": {"shape": [256, 256], "role": "output"}},
            "body": [{"set_vec_tile_shapes": [16, 2048]},
                     {"op": "exp", "inputs": ["a"], "out": "e"},
                     {"set_cube_tile_shapes": {"m": [128, 128], "k": [64, 256],
                                               "n": [256, 256], "enable_multi_data_load": multi}},
                     {"op": "matmul", "inputs": ["e", "b"], "out": "o"},
                     {"op": "assemble", "inputs": ["o"], "out": "c", "offsets": [0, 0]}]})
        return compile_kernel(kernel, HW)
    small, large = program(False), program(True)
    assert small.work.mte2_loads.sum() - large.work.mte2_loads.sum() == \
        2 * 2 * (2048 // 64 - 2048 // 256)        # 2 cube tasks x (A, B)
    assert small.work.mte2_bursts.sum() > large.work.mte2_bursts.sum()
