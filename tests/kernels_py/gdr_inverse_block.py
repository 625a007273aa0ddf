"""One 16 x 16 block of the GDR case's inverse (docs/cases.md G1), the case's first form.

chunk_gated_delta_rule's out-of-box inverse inverted each of the eight 16 x 16 unit
lower-triangular diagonal blocks of its chunk matrix as a leaf task of its own, by forward
substitution one row per step in a static Python for: step i turns the first i entries of
row i into a column of coefficients (view, transpose), multiplies it into the i rows done
so far, sums over those rows and appends the new row.  The case measured each such leaf
task at 28 us beside the 49 us of the final [16, 128] form (22 us in another comparison);
only the final form's code is public, so this block is that code with one block in place
of eight (tests/kernels_py/gdr_inverse.py): our reading of the first form.
"""
import torch  # noqa: F401

import pypto

R = 16          # rows (and columns) of one diagonal block


@pypto.frontend.jit()
def gdr_inverse_block(block: pypto.Tensor([R, R], pypto.DT_FP32),
                      eye: pypto.Tensor([R, R], pypto.DT_FP32),
                      inv: pypto.Tensor([R, R], pypto.DT_FP32)):
    """Forward substitution over one 16x16 unit lower-triangular block, one row per step"""
    pypto.set_vec_tile_shapes(128, 128)
    done = block[:2, :]
    for i in range(2, R):
        cur = done + 0.0
        row = pypto.view(block, [1, R], [i, 0])
        coeff = row.view([1, i], [0, 0]).transpose(1, 0)
        update = row + (coeff * cur).sum(0, keepdim=True)
        done = pypto.concat([cur, update], dim=0)
    inv[:] = done + eye
