"""GLM attention decode step (flash attention with an online softmax), in PyPTO's Python API.

b=8 batches, nq=12 query heads on one KV head, d=128, s2=16384 keys in tiles of 512, the s2
loop unrolled [8, 4, 2, 1].  The running max, sum and output live in GM between s2 steps.
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
    row_max = pypto.tensor([B * NQ, 1], pypto.DT_FP32, "row_max")
    row_sum = pypto.tensor([B * NQ, 1], pypto.DT_FP32, "row_sum")
    acc_out = pypto.tensor([B * NQ, D], pypto.DT_FP32, "acc_out")
    for b in pypto.loop(B, name="LOOP_b", idx_name="b"):
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
            pypto.set_pass_options(sg_set_scope=1)
            pypto.set_semantic_label("softmax")
            ss = s * SCALE
            m_loc = pypto.amax(ss, dim=-1, keepdim=True)
            if pypto.is_loop_begin(s2):
                m_new = pypto.maximum(m_loc, m_loc)
            else:
                m_old = pypto.view(row_max, [NQ, 1], rows)
                m_new = pypto.maximum(m_old, m_loc)
            p32 = pypto.exp(ss - m_new)
            p = pypto.cast(p32, pypto.DT_BF16)
            l_loc = pypto.sum(p32, dim=-1, keepdim=True)

            pypto.set_pass_options(sg_set_scope=2)
            pypto.set_semantic_label("rescale")
            if pypto.is_loop_begin(s2):
                l_new = l_loc + 0.0
            else:
                corr = pypto.exp(m_old - m_new)
                l_old = pypto.view(row_sum, [NQ, 1], rows)
                l_new = l_old * corr + l_loc
            if not pypto.is_loop_end(s2):
                row_max[b * NQ:(b + 1) * NQ, :] = m_new
                row_sum[b * NQ:(b + 1) * NQ, :] = l_new
            pypto.set_pass_options(sg_set_scope=-1)

            vj = pypto.view(value_cache, [S2_TILE, D], [first, 0])
            pypto.set_semantic_label("MM2")
            o = pypto.matmul(p, vj, pypto.DT_FP32)
            pypto.set_vec_tile_shapes(128, 128)
            pypto.set_semantic_label("update")
            if pypto.is_loop_begin(s2):
                o_new = o + 0.0
            else:
                o_old = pypto.view(acc_out, [NQ, D], rows)
                o_new = o_old * corr + o
            if pypto.is_loop_end(s2):
                pypto.set_semantic_label("finalize")
                o_bf = pypto.cast(o_new / l_new, pypto.DT_BF16)
                pypto.assemble(o_bf, rows, attn_out)
            else:
                acc_out[b * NQ:(b + 1) * NQ, :] = o_new
