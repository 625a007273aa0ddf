"""The Cube computes and MTE1 feeds whole L0 tiles: an m tile larger than the valid rows
costs the padded tile, while GM traffic stays the valid rows."""
import numpy as np
import pytest

from simcore.compiler import compile_kernel
from simcore.compiler.ops import padded_rows
from simcore.machine.costs import static_pipe_us
from simcore.machine.engine import simulate
from simcore.spec.hardware import load_hardware

from pipeline.runner import resolve_kernel

HW = load_hardware("dav_2201")

MATMUL = """
name: mm
params: {M: %(M)d, K: %(K)d, N: 1024}
tensors:
  a: {shape: [M, K], dtype: fp16, role: input}
  b: {shape: [K, N], dtype: fp16, role: input}
  c: {shape: [M, N], dtype: fp32, role: output}
tiles:
  cube: {m: [%(m)d, %(m)d], k: %(k)s, n: [128, 128], enable_multi_data_load: true}
body:
  - set_cube_tile_shapes: cube
  - {op: matmul, inputs: [a, b], dtype: fp32, out: o}
  - {op: assemble, inputs: [o], out: c, offsets: [0, 0]}
"""


def run(tmp_path, m_tile, M, K=1024, k=(64, 256)):
    """An [M, K] x [K, 1024] fp16 matmul with cube tiles m [m_tile, m_tile], k ``k``,
    n [128, 128]: the Program and its simulated timeline."""
    path = tmp_path / f"mm_{m_tile}_{M}_{K}_{k[0]}_{k[1]}.yaml"
    path.write_text(MATMUL % {"M": M, "K": K, "m": m_tile, "k": list(k)})
    kernel = resolve_kernel(path, {})
    p = compile_kernel(kernel, HW)
    return p, simulate(HW, p, kernel.options.runtime_options)


def test_padded_rows_are_whole_l0_blocks():
    assert padded_rows(np.array([16, 100, 128, 129, 256]), 128).tolist() == [128, 128, 128,
                                                                            256, 256]
    assert padded_rows(np.array([12]), 16).tolist() == [16]
    assert padded_rows(np.array([12]), 24).tolist() == [32]   # mL0 itself rounds to a fractal


def test_an_oversized_m_tile_costs_more_for_a_small_m(tmp_path):
    big, tl_big = run(tmp_path, 128, M=16)
    small, tl_small = run(tmp_path, 16, M=16)
    assert big.leaf_tasks == small.leaf_tasks == 8          # N / nL1 tiles, one m tile each
    # 128 padded rows vs 16: 8x the fractals, per task (128/16) x (128/16) x (1024/16)
    assert np.allclose(big.work.cube.fractals, 8 * 8 * 64)
    assert np.allclose(small.work.cube.fractals, 1 * 8 * 64)
    # L0A is fed the padded A tile; L0B the same B either way
    a_side = lambda mt: padded_rows(np.array([16]), mt)[0] * 1024 * 2   # K x fp16, one n block
    b_side = 1024 * 128 * 2
    assert np.allclose(big.work.mte1_bytes, a_side(128) + b_side)
    assert np.allclose(small.work.mte1_bytes, a_side(16) + b_side)
    # GM traffic is the valid rows only
    assert np.allclose(big.work.mte2_bytes, small.work.mte2_bytes)
    assert np.allclose(big.work.fixp_bytes, small.work.fixp_bytes)
    assert np.allclose(big.work.flops, small.work.flops)
    us_big, us_small = static_pipe_us(HW, big), static_pipe_us(HW, small)
    assert np.all(us_big["cube"] > us_small["cube"]) and np.all(us_big["mte1"] > us_small["mte1"])
    assert tl_big.kernel_us > tl_small.kernel_us


@pytest.mark.parametrize("m_tile", [16, 64, 128])
def test_no_padding_when_the_m_tile_divides_m(tmp_path, m_tile):
    M, K, N = 256, 1024, 1024
    p, _ = run(tmp_path, m_tile, M=M)
    # exactly the fractals and L0 feeds of the valid matrix, whatever the m tile
    assert p.work.cube.fractals.sum() == M * N * K / 16 ** 3
    a_bytes = M * K * 2 * (N // 128)                     # A once per n L0 block
    b_bytes = K * N * 2 * (M // m_tile)                  # B once per m L0 block
    assert p.work.mte1_bytes.sum() == a_bytes + b_bytes


def test_an_l0_tile_over_half_the_buffer_loses_mte1_double_buffering(tmp_path):
    """PyPTO's matmul guide: 32 KiB L0A/L0B tiles 'just enable MTE1 double buffer'.  A
    [256, 128] fp16 L0A tile is 64 KiB, the whole L0A: each k step's L1 -> L0 move waits
    for the multiply before it, so MTE1 and the Cube add up.  Halving k to 64 makes it
    32 KiB; the same bytes and fractals then overlap, and the compute-heavy GEMM is faster
    even though it pays twice the k steps' fixed cycles.  (Both take K into L1 in blocks of
    256, so their copy-ins are alike.)"""
    from simcore.machine.costs import busiest_pipe_us
    whole, tl_whole = run(tmp_path, 256, M=256, K=2048, k=(128, 256))
    half, tl_half = run(tmp_path, 256, M=256, K=2048, k=(64, 256))
    assert np.allclose(whole.work.l0_serial_steps, whole.work.mte1_steps)
    assert not half.work.l0_serial_steps.any()
    assert np.allclose(whole.work.cube.fractals, half.work.cube.fractals)
    pipes = static_pipe_us(HW, whole)
    assert np.allclose(busiest_pipe_us(pipes, whole.work), pipes["mte1"] + pipes["cube"])
    pipes = static_pipe_us(HW, half)
    assert np.allclose(busiest_pipe_us(pipes, half.work),
                       np.maximum(pipes["mte1"], pipes["cube"]))
    assert tl_half.kernel_us < tl_whole.kernel_us


def test_the_l0_checks_cut_each_tile_dim_to_the_matrix():
    """An fp32 [16, 512] x [512, 24] matmul under k [512, 512] and n [128, 128] fills L0B
    with 512 x 32 (24 rounded up to a fractal) x 4 bytes, exactly its 64 KiB, as upstream's
    hc_pre runs it; the same tiles over N = 128 need 256 KiB and are refused."""
    from simcore.spec.errors import OoOError
    from simcore.spec.kernel import Kernel

    def matmul(n):
        return Kernel.model_validate({
            "name": "k", "tensors": {"a": {"shape": [16, 512], "dtype": "fp32"},
                                     "b": {"shape": [512, n], "dtype": "fp32"},
                                     "c": {"shape": [16, n], "dtype": "fp32", "role": "output"}},
            "tiles": {"cube": {"m": [16, 16], "k": [512, 512], "n": [128, 128]}},
            "body": [{"set_cube_tile_shapes": "cube"},
                     {"op": "matmul", "inputs": ["a", "b"], "out": "r", "dtype": "fp32"},
                     {"op": "assemble", "inputs": ["r"], "out": "c", "offsets": [0, 0]}]})
    hw = load_hardware("dav_2201")
    assert compile_kernel(matmul(24), hw).leaf_tasks == 1
    with pytest.raises(OoOError, match=r"L0B"):
        compile_kernel(matmul(128), hw)
