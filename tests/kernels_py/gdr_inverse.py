"""The row-by-row inverse of the GDR case (docs/cases.md G1), in PyPTO's Python API.

chunk_gated_delta_rule inverts a [128, 128] unit lower-triangular chunk matrix by first
inverting its eight 16 x 16 diagonal blocks.  The case's final form lays the eight blocks
side by side as one [16, 128] tile and runs forward substitution one row at a time in a
Python for (static, so the steps are unrolled inside one root function): step i turns row
i of the blocks into a column of coefficients (reshape to [8, 16], keep the first i
columns, transpose, reshape to [8 i, 1]), multiplies it into the [8 i, 16] view of the
rows done so far, sums over those rows and appends the new row.  The partial inverse is
meant to stay in UB from one step to the next (``+ 0.0`` makes it a computed value the
step reads on chip); the case measured the whole inverse at 49 us as one leaf task.
"""
import torch  # noqa: F401

import pypto

R = 16          # rows of one diagonal block
C = 128         # eight blocks side by side
NB = C // R     # blocks


@pypto.frontend.jit()
def gdr_inverse(blocks: pypto.Tensor([R, C], pypto.DT_FP32),
                eye: pypto.Tensor([R, C], pypto.DT_FP32),
                inv: pypto.Tensor([R, C], pypto.DT_FP32)):
    """Forward substitution over eight 16x16 unit lower-triangular blocks, one row per step"""
    pypto.set_vec_tile_shapes(128, 128)
    done = blocks[:2, :]
    for i in range(2, R):
        cur = done + 0.0
        row = pypto.view(blocks, [1, C], [i, 0])
        coeff = row.reshape([NB, R]).view([NB, i], [0, 0]).transpose(1, 0).reshape([NB * i, 1])
        terms = (coeff * cur.reshape([NB * i, R])).reshape([i, C])
        update = row + terms.sum(0, keepdim=True)
        done = pypto.concat([cur, update], dim=0)
    inv[:] = done + eye
