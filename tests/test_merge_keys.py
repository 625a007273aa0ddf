"""A breadth-merge key that names no label or function of the kernel is reported."""
from pathlib import Path

import pytest

from pipeline.merge_keys import unmatched_merge_keys
from pipeline.runner import resolve_kernel
from simcore.compiler import compile_kernel
from simcore.compiler.program import CoreType
from simcore.spec.hardware import load_hardware

GLM = Path(__file__).resolve().parents[1] / "configs" / "kernels" / "glm_attention.yaml"


@pytest.fixture(scope="module")
def hw():
    return load_hardware("dav_2201")


def notes(hw, sets):
    kernel = resolve_kernel(GLM, sets)
    return unmatched_merge_keys(kernel, compile_kernel(kernel, hw))


def test_a_mistyped_label_is_noted_and_a_real_one_is_not(hw):
    """glm_attention labels its second matmul MM2 (an AIC op) and its softmax (AIV ops)."""
    assert notes(hw, {"pass_options.cube_nbuffer_setting": {"MM2": 2}}) == []
    (note,) = notes(hw, {"pass_options.cube_nbuffer_setting": {"MM_2": 2}})
    assert "'MM_2'" in note and "MM2" in note          # the key, and the labels it could be
    # a cube label in the vector setting merges nothing either
    (note,) = notes(hw, {"pass_options.vec_nbuffer_setting": {"MM2": 2}})
    assert "vec_nbuffer_setting" in note and "AIV" in note
    # the defaults select every function; a hashOrder selects one, if there is one
    assert notes(hw, {"pass_options.vec_nbuffer_setting": {"-1": 2}}) == []
    assert notes(hw, {"pass_options.vec_nbuffer_setting": {"DEFAULT": 2}}) == []
    kernel = resolve_kernel(GLM, {})
    orders = {f.order for f in compile_kernel(kernel, hw).leaf_functions
              if f.core_type == CoreType.AIV}
    assert notes(hw, {"pass_options.vec_nbuffer_setting": {str(min(orders)): 2}}) == []
    (note,) = notes(hw, {"pass_options.vec_nbuffer_setting": {str(max(orders) + 1): 2}})
    assert f"'{max(orders) + 1}'" in note
