"""Row softmax over a [bs, seqlen, head, dim] FP32 tensor, one pypto.loop iteration per batch
row."""
import pypto

BS, S, H, D = 32, 32, 1, 256


@pypto.frontend.jit
def softmax(x: pypto.Tensor([BS, S, H, D], pypto.DT_FP32),
            y: pypto.Tensor([BS, S, H, D], pypto.DT_FP32)):
    """Row softmax (amax, sub, exp, sum, div), one root call per batch row"""
    pypto.set_vec_tile_shapes(1, 4, 1, 64)
    pypto.set_semantic_label("softmax")
    for b in pypto.loop(BS, name="LOOP_bs"):
        xb = x[b:b + 1, :, :, :]
        mx = pypto.amax(xb, dim=-1, keepdim=True)
        e = pypto.exp(xb - mx)
        s = e.sum(-1, keepdim=True)
        y[b:b + 1, 0:, 0:, 0:] = e / s
