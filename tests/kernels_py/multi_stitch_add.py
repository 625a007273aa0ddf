"""y = x + 1.0 over 128 chunks of 64 FP32 elements, one pypto.loop iteration per chunk."""
import torch  # noqa: F401  (kernel files import torch for their tests)

import pypto

N, W = 128, 64


@pypto.frontend.jit(runtime_options={"stitch_function_max_num": 64})
def multi_stitch_add(x: pypto.Tensor([N * W], pypto.DT_FP32),
                     y: pypto.Tensor([N * W], pypto.DT_FP32)):
    """Elementwise x + 1.0 over 128 chunks of 64 FP32 under pypto.loop"""
    pypto.set_vec_tile_shapes(64)
    for i in pypto.loop(N, name="add_loop", idx_name="i"):
        xi = pypto.view(x, [W], [i * W])
        pypto.set_semantic_label("add_one")
        yi = xi + 1.0
        y[i * W:(i + 1) * W] = yi
