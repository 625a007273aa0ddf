"""The compiler: loops become root calls, tiles become leaf tasks, stitch makes dev tasks."""

import numpy as np
import pytest

from simcore.compiler import compile_kernel
from simcore.spec.errors import OoOError
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

from pipeline.runner import resolve_kernel

HW = load_hardware("dav_2201")


def compiled(msa_path, **sets):
    return compile_kernel(resolve_kernel(msa_path, sets), HW)


@pytest.mark.parametrize("stitch, dev_tasks", [(1, 128), (2, 64), (64, 2), (100, 2), (128, 1),
                                               (1024, 1)])
def test_dev_tasks_are_root_calls_over_stitch(msa_path, stitch, dev_tasks):
    p = compiled(msa_path, **{"runtime_options.stitch_function_max_num": stitch})
    assert p.root_calls == 128
    assert p.dev_tasks == dev_tasks
    # every dev task holds at most `stitch` root calls, in order
    assert np.bincount(p.call_dev_task).max() <= stitch
    assert np.all(np.diff(p.call_dev_task) >= 0)


def test_tile_shape_sets_leaf_task_count(msa_path):
    assert compiled(msa_path).leaf_tasks == 128
    smaller = compiled(msa_path, **{"tiles.vec": [16]})
    assert smaller.leaf_tasks == 128 * 4 and smaller.root_calls == 128
    tail = compiled(msa_path, **{"tiles.vec": [48]})   # 64 = 48 + a 16-element tail
    assert tail.leaf_tasks == 256 and len(tail.leaf_functions) == 2


def test_independent_iterations_have_no_edges(msa_path):
    assert compiled(msa_path).edge_src.size == 0


def _kernel(body, tiles=None, params=None, shape=(64, 64)):
    return Kernel.model_validate({
        "name": "k", "params": params or {"N": 4},
        "tensors": {"x": {"shape": list(shape), "role": "input"},
                    "y": {"shape": list(shape), "role": "output"}},
        "tiles": tiles or {"a": [32, 64], "b": [64, 32]},
        "body": body})


def test_python_for_unrolls_inside_one_root_call():
    body = lambda style: [
        {"set_vec_tile_shapes": "a"},
        {"loop": {"name": "l", "idx": "i", "trip": "N", "style": style}, "body": [
            {"op": "view", "inputs": ["x"], "out": "v", "shape": [16, 64], "offsets": ["i*16", 0]},
            {"op": "exp", "inputs": ["v"], "out": "e"},
            {"op": "assemble", "inputs": ["e"], "out": "y", "offsets": ["i*16", 0]}]}]
    as_loop = compile_kernel(_kernel(body("pypto")), HW)
    as_for = compile_kernel(_kernel(body("for")), HW)
    assert as_loop.root_calls == 4 and as_for.root_calls == 1
    assert as_loop.leaf_tasks == as_for.leaf_tasks == 4


def test_aligned_chain_merges_and_misaligned_tiles_link_many_to_many():
    def chain(second_tile):
        return _kernel([
            {"set_vec_tile_shapes": "a"},
            {"op": "sqrt", "inputs": ["x"], "out": "s"},
            {"set_vec_tile_shapes": second_tile},
            {"op": "cast", "inputs": ["s"], "out": "c", "dtype": "fp16"},
            {"op": "assemble", "inputs": ["c"], "out": "y", "offsets": [0, 0]}])
    aligned = compile_kernel(chain("a"), HW)
    assert aligned.leaf_tasks == 2 and aligned.edge_src.size == 0   # depth-merged
    misaligned = compile_kernel(chain("b"), HW)
    # 2 sqrt tiles (32 rows) feed 2 cast tiles (32 cols) through GM: every pair overlaps
    assert misaligned.leaf_tasks == 4
    assert misaligned.edge_src.size == 4
    assert misaligned.workspace_bytes == 64 * 64 * 4


def test_tile_beyond_ub_fails_like_pypto():
    """x + y on [64, 512] fp32 tiles: the sum may take x's buffer (upstream's src/dst
    buffer merge), and x's and y's tiles still need 256 KiB of the 192."""
    k = _kernel([{"set_vec_tile_shapes": "a"}, {"op": "add", "inputs": ["x", "y"], "out": "s"},
                 {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}],
                tiles={"a": [64, 512]}, shape=(64, 512))
    with pytest.raises(OoOError) as err:
        compile_kernel(k, HW)
    e = err.value
    assert e.buffer == "UB" and e.tile == [64, 512] and e.need == 2 * 64 * 512 * 4
    assert e.capacity == HW.buffers.ub and "add" in e.op
