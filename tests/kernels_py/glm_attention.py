"""GLM attention decode step (flash attention with an online softmax), in PyPTO's Python API.

b=8 batches, nq=12 query heads on one KV head, d=128, s2=16384 keys in tiles of 512, the s2
loop unrolled [8, 4, 2, 1].  The running max, sum and output are pypto.tensor temporaries
made per batch and renamed from one s2 step to the next (``max_update[:] = m_new``), as in
upstream's models/glm_v4_5/glm_attention.py: on chip within a root function's unrolled
steps, in GM between root functions.
The s2 trip count comes from actual_seqs[b] and each s2 tile's first block id from
block_table, so both are values the control flow reads (pass them with
--arg actual_seqs.values=... --arg block_table.values=...); a tile's four blocks are read
as one view from its first block, so the table must keep a tile's blocks consecutive.
"""
import torch  # noqa: F401

import pypto

B, NQ, D = 8, 12, 128
S2, BLK, S2_TILE = 16384, 128, 512
S2_LOOP = S2 // S2_TILE
NBLK = B * S2 // BLK
SCALE = 0.0883883


@pypto.frontend.jit(runtime_options={"stitch_function_max_num": 128},
                    pass_options={"pg_upper_bound": 1536, "cube_l1_reuse_setting": {0: 4}})
def glm_attention(query: pypto.Tensor([B * NQ, D], pypto.DT_BF16),
                  key_cache: pypto.Tensor([NBLK * BLK, D], pypto.DT_BF16),
                  value_cache: pypto.Tensor([NBLK * BLK, D], pypto.DT_BF16),
                  block_table: pypto.Tensor([B, S2 // BLK], pypto.DT_INT32),
                  actual_seqs: pypto.Tensor([B], pypto.DT_INT32),
                  attn_out: pypto.Tensor([B * NQ, D], pypto.DT_BF16)):
    """Paged-KV flash attention decode step (online softmax) with an unrolled s2 loop"""
    pypto.experimental.set_operation_options(combine_axis=True)   # as upstream's kernel
    for b in pypto.loop(B, name="LOOP_b", idx_name="b"):
        max_update = pypto.tensor([NQ, 1], pypto.DT_FP32, "max_update")
        sum_update = pypto.tensor([NQ, 1], pypto.DT_FP32, "sum_update")
        oi_update = pypto.tensor([NQ, D], pypto.DT_FP32, "oi_update")
        s2_loop = (actual_seqs[b] + S2_TILE - 1) // S2_TILE
        for s2 in pypto.loop(s2_loop, name="LOOP_s2", idx_name="s2", unroll_list=[8, 4, 2, 1]):
            rows = [b * NQ, 0]
            q = pypto.view(query, [NQ, D], rows)
            first = block_table[b, s2 * (S2_TILE // BLK)] * BLK
            kj = pypto.view(key_cache, [S2_TILE, D], [first, 0])
            pypto.set_cube_tile_shapes([128, 128], [128, 128], [128, 128])
            pypto.set_semantic_label("MM1")
            s = pypto.matmul(q, kj, pypto.DT_FP32, b_trans=True)

            pypto.set_vec_tile_shapes(128, 512)
            vj = pypto.view(value_cache, [S2_TILE, D], [first, 0])
            if pypto.is_loop_begin(s2):
                pypto.set_semantic_label("softmax")
                ss = s * SCALE
                m_loc = pypto.amax(ss, dim=-1, keepdim=True)
                p32 = pypto.exp(ss - m_loc)
                p = pypto.cast(p32, pypto.DT_BF16)
                sum_update[:] = pypto.sum(p32, dim=-1, keepdim=True)
                max_update[:] = m_loc
                pypto.set_semantic_label("MM2")
                o = pypto.matmul(p, vj, pypto.DT_FP32)
                pypto.set_vec_tile_shapes(128, 128)
                oi_update[:] = o
            else:
                pypto.set_pass_options(sg_set_scope=1)
                pypto.set_semantic_label("softmax")
                ss = s * SCALE
                m_loc = pypto.amax(ss, dim=-1, keepdim=True)
                m_new = pypto.maximum(max_update, m_loc)
                p32 = pypto.exp(ss - m_new)
                p = pypto.cast(p32, pypto.DT_BF16)
                l_loc = pypto.sum(p32, dim=-1, keepdim=True)
                pypto.set_pass_options(sg_set_scope=-1)

                pypto.set_pass_options(sg_set_scope=2)
                pypto.set_semantic_label("rescale")
                dm = max_update - m_new
                max_update[:] = m_new
                corr = pypto.exp(dm)
                sum_update[:] = sum_update * corr + l_loc
                pypto.set_pass_options(sg_set_scope=-1)

                pypto.set_semantic_label("MM2")
                o = pypto.matmul(p, vj, pypto.DT_FP32)
                pypto.set_vec_tile_shapes(128, 128)
                pypto.set_semantic_label("update")
                oi_update[:] = oi_update * corr + o
            if pypto.is_loop_end(s2):
                pypto.set_semantic_label("finalize")
                o_bf = pypto.cast(oi_update / sum_update, pypto.DT_BF16)
                pypto.assemble(o_bf, rows, attn_out)
