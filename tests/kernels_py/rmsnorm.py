"""RMSNorm over a (56, 1024) FP32 tensor: x / sqrt(mean(x * x) + eps) * gamma."""
import torch  # noqa: F401

import pypto

M, N = 56, 1024
EPS = 1e-6


@pypto.jit
def rmsnorm(x: pypto.Tensor([M, N], pypto.DT_FP32), gamma: pypto.Tensor([1, N], pypto.DT_FP32),
            y: pypto.Tensor([M, N], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(8, 512)
    pypto.set_semantic_label("rmsnorm")
    sq = pypto.mul(x, x)
    ss = pypto.sum(sq, -1, keepdim=True)
    rms = pypto.sqrt(ss * (1.0 / N) + EPS)
    y[:] = x / rms * gamma
