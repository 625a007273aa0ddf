"""Batched (4, 64, 512) x (4, 128, 512)^T FP32 matmul, the batches as a Python for."""
import pypto

BT, M, K, N = 4, 64, 512, 128


@pypto.frontend.jit
def tiling_bmm(a: pypto.Tensor([BT * M, K], pypto.DT_FP32),
               b: pypto.Tensor([BT * N, K], pypto.DT_FP32),
               c: pypto.Tensor([BT * M, N], pypto.DT_FP32)):
    pypto.set_cube_tile_shapes([32, 32], [32, 32], [32, 32])
    pypto.set_semantic_label("bmm")
    for i in range(BT):
        ai = pypto.view(a, [M, K], [i * M, 0])
        bi = pypto.view(b, [N, K], [i * N, 0])
        ci = pypto.matmul(ai, bi, pypto.DT_FP32, b_trans=True)
        pypto.assemble(ci, [i * M, 0], c)
