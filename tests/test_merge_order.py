"""Breadth merge never puts tasks that wait on each other into one task
(simcore/compiler/mergeorder.py).

A power-series inverse, A^(k+1) = (A^k @ A) + 0, alternates a matmul and a small vector op:
every step's vector task belongs to one leaf function, so vec_nbuffer_setting sees them
as isomorphic.  Merged, one task would hold steps that wait for matmuls that wait for it.
Last, the counts upstream computes itself under its multi-input/output switch (-2), and
its automatic merge when no vec_nbuffer_setting is given.
"""
from collections import Counter

import numpy as np
import pytest

from pipeline.merge_keys import merges_held_apart
from pipeline.runner import resolve_kernel
from simcore.compiler import compile_kernel
from simcore.machine import simulate
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import load_hardware

HW = load_hardware("dav_2201")

POWERS = """
name: powers
params: {L: 64}
tensors:
  a: {shape: [L, L], dtype: fp32, role: input}
  x: {shape: [8, L], dtype: fp32, role: input}
  z: {shape: [L, L], dtype: fp32, role: output}
  w: {shape: [8, L], dtype: fp32, role: output}
tiles:
  vec: [L, L]
  cube: {m: [L, L], k: [L, L], n: [L, L]}
body:
  - set_vec_tile_shapes: vec
  - set_cube_tile_shapes: cube
  - loop: {name: one, idx: i, trip: 1, style: pypto}
    body:
      - {op: matmul, inputs: [a, a], out: m2, dtype: fp32}
      - {op: add, inputs: [m2], out: p2, scalar: 0.0}
      - {op: matmul, inputs: [p2, a], out: m3, dtype: fp32}
      - {op: add, inputs: [m3], out: p3, scalar: 0.0}
      - {op: matmul, inputs: [p3, a], out: m4, dtype: fp32}
      - {op: add, inputs: [m4], out: p4, scalar: 0.0}
      - {op: matmul, inputs: [p4, a], out: m5, dtype: fp32}
      - {op: add, inputs: [m5], out: p5, scalar: 0.0}
      - {op: assemble, inputs: [p5], out: z, offsets: [0, 0]}
      - set_vec_tile_shapes: [1, L]
      - {op: exp, inputs: [x], out: e}
      - {op: assemble, inputs: [e], out: w, offsets: [0, 0]}
"""


def _compile(tmp_path, merge: int):
    path = tmp_path / "powers.yaml"
    path.write_text(POWERS)
    kernel = resolve_kernel(path, {"pass_options.vec_nbuffer_setting": {"DEFAULT": merge}})
    program = compile_kernel(kernel, HW)
    return program, simulate(HW, program, kernel.options.runtime_options)


def _ops(program, task):
    return program.leaf_functions[program.task_leaf[task]].ops


def test_chained_isomorphic_steps_stay_apart_and_run_one_after_another(tmp_path):
    merged, tl = _compile(tmp_path, 4)
    plain, plain_tl = _compile(tmp_path, 1)
    adds = [t for t in range(merged.leaf_tasks) if _ops(merged, t) == ("add",)]
    assert len(adds) == 4                       # each step its own task, as without merging
    mms = [t for t in range(merged.leaf_tasks) if _ops(merged, t) == ("matmul",)]
    # the chain alternates: every matmul after the add before it, every add after its matmul
    chain = sorted(adds + mms, key=lambda t: tl.task_start[t])
    assert [_ops(merged, t) for t in chain] == [("matmul",), ("add",)] * 4
    assert np.all(np.diff(tl.task_start[chain]) > 0)
    assert np.all(tl.task_start[chain[1:]] >= tl.task_end[chain[:-1]] - 1e-9)
    # the independent exp tiles still merge, four to a task
    exps = [t for t in range(merged.leaf_tasks) if "exp" in _ops(merged, t)]
    plain_exps = [t for t in range(plain.leaf_tasks) if "exp" in _ops(plain, t)]
    assert len(plain_exps) == 8 and len(exps) == 2
    # nothing the merge kept apart runs sooner than the chain allows
    assert tl.kernel_us >= 0.95 * plain_tl.kernel_us
    # and the user is told: four adds asked to be one task, they are four
    ((function, core, extra, automatic),) = merged.info["merges_held_apart"]
    assert core == "AIV" and extra == 3 and not automatic
    (note,) = merges_held_apart(merged)
    assert "vec_nbuffer_setting" in note and function in note and " 3 " in note
    assert merges_held_apart(plain) == []


CROSSED = """
name: crossed
params: {R: 8, C: 256}
tensors:
  x: {shape: [R, C], dtype: fp32, role: input}
  y: {shape: [R, C], dtype: fp32, role: input}
  z1: {shape: [R, C], dtype: fp32, role: output}
  z2: {shape: [R, C], dtype: fp32, role: output}
body:
  - set_vec_tile_shapes: [R, C]
  - loop: {name: one, idx: i, trip: 1, style: pypto}
    body:
      - sg_set_scope: 1
      - {op: sqrt, inputs: [y], out: s1}
      - sg_set_scope: 2
      - {op: exp, inputs: [x], out: e1}
      - sg_set_scope: 3
      - {op: exp, inputs: [s1], out: e2}
      - sg_set_scope: 4
      - {op: sqrt, inputs: [e1], out: s2}
      - sg_set_scope: -1
      - {op: assemble, inputs: [e2], out: z1, offsets: [0, 0]}
      - {op: assemble, inputs: [s2], out: z2, offsets: [0, 0]}
"""


def test_merged_tasks_that_would_wait_on_each_other_run_unmerged(tmp_path):
    # the two sqrts and the two exps are each isomorphic and no member waits on its own
    # twin, but the first sqrt feeds the second exp and the first exp the second sqrt:
    # merged in pairs, each merged task would wait on the other.  Upstream's merge stops
    # with an error there; ptolab runs the four tasks unmerged, their edges intact
    path = tmp_path / "crossed.yaml"
    path.write_text(CROSSED)
    programs = [compile_kernel(resolve_kernel(path, {"pass_options.vec_nbuffer_setting":
                                                     {"DEFAULT": n}}), HW) for n in (1, 2)]
    for p in programs:
        assert p.leaf_tasks == 4
        ops = [p.leaf_functions[leaf].ops[0] for leaf in p.task_leaf]
        edges = {(ops[s], ops[d]) for s, d in zip(p.edge_src.tolist(), p.edge_dst.tolist())}
        assert edges == {("sqrt", "exp"), ("exp", "sqrt")}
        assert p.edge_src.size == 2


MANY = """
name: many
params: {R: 96, C: 256}
tensors:
  x: {shape: [R, C], dtype: fp32, role: input}
  y: {shape: [R, C], dtype: fp32, role: input}
  z: {shape: [R, C], dtype: fp32, role: output}
  w: {shape: [R, C], dtype: fp32, role: output}
body:
  - set_vec_tile_shapes: [1, C]
  - loop: {name: one, idx: i, trip: 1, style: pypto}
    body:
      - {op: exp, inputs: [x], out: e, label: first}
      - {op: assemble, inputs: [e], out: z, offsets: [0, 0]}
      - {op: sqrt, inputs: [y], out: s, label: second}
      - {op: assemble, inputs: [s], out: w, offsets: [0, 0]}
"""


def test_the_multi_in_out_switch_gives_unnamed_functions_the_automatic_count(tmp_path):
    # upstream's {-2: 0}: every isomorphic group gets an automatic count, as many tasks a
    # merged task as keeps the group on mg_vec_parallel_lb (48) cores: 96 -> 48 tasks of 2;
    # {-2: 1} beside a count for one function: the others get the automatic count too.
    # Without the switch and without DEFAULT or func keys (labels alone, int keys) upstream
    # merges only tasks that share a producer or consumer: these rows share none
    path = tmp_path / "many.yaml"
    path.write_text(MANY)

    def tasks(setting, **sets):
        sets["pass_options.vec_nbuffer_setting"] = setting
        p = compile_kernel(resolve_kernel(path, sets), HW)
        return Counter(p.leaf_functions[leaf].ops[0] for leaf in p.task_leaf)
    assert tasks({"-2": 0}) == {"exp": 48, "sqrt": 48}
    assert tasks({"-2": 0}, **{"pass_options.mg_vec_parallel_lb": 24}) == {"exp": 24,
                                                                          "sqrt": 24}
    assert tasks({"-2": 0}, **{"pass_options.mg_vec_parallel_lb": 96}) == {"exp": 96,
                                                                          "sqrt": 96}
    assert tasks({"-2": 1, "first": 8}) == {"exp": 12, "sqrt": 48}
    assert tasks({"first": 8}) == {"exp": 96, "sqrt": 96}
    assert tasks({"-1": 8}) == {"exp": 96, "sqrt": 96}
    # DEFAULT merges over the whole function in task order: 1 for the function no label
    # names, the label's 8 for the other
    assert tasks({"DEFAULT": 1, "first": 8}) == {"exp": 12, "sqrt": 96}
    assert tasks({"DEFAULT": 8}) == {"exp": 12, "sqrt": 12}


def test_the_multi_in_out_switch_takes_only_upstreams_two_forms(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(MANY)
    for bad in ({"-2": 2}, {"-2": 0, "first": 8}):
        with pytest.raises(ConfigError, match="multi-input/output"):
            resolve_kernel(path, {"pass_options.vec_nbuffer_setting": bad})


# -- upstream's automatic merge, with no vec_nbuffer_setting ---------------------------------
TRANSPOSE_ADD = "configs/kernels/transpose_add.yaml"


def _fan(program):
    """(tasks per op, how many merged Add tasks each Transpose task feeds, how many Transpose
    tasks each Add task waits on)."""
    ops = [program.leaf_functions[leaf].ops[0] for leaf in program.task_leaf]
    out, into = Counter(), Counter()
    for s, d in zip(program.edge_src.tolist(), program.edge_dst.tolist()):
        out[s] += 1
        into[d] += 1
    return Counter(ops), set(out.values()), set(into.values())


def test_with_no_setting_siblings_of_a_large_group_merge_as_upstream_does():
    """A Transpose tiled (64, 128) writes (128, 64) tiles; an Add tiled (64, 128) reads two
    of them.  With 256 tiles an op (R 1024, C 2048) and no vec_nbuffer_setting, upstream's
    automatic merge gives each group of 256 a count of 5 (as many as keeps 48 cores busy)
    but merges only tasks keyed alike: an Add by the first Transpose it reads (pairs), a
    Transpose, which reads only the kernel's input, by the first Add it feeds (pairs).  The
    many-to-many becomes one merged Transpose to one merged Add.  {DEFAULT: 1}, upstream's
    'no merge', keeps 256 of each, every Transpose feeding two Adds."""
    from conftest import REPO
    big = {"params.R": 1024, "params.C": 2048, "tiles.add": [64, 128]}
    auto = compile_kernel(resolve_kernel(REPO / TRANSPOSE_ADD, big), HW)
    ops, fan_out, fan_in = _fan(auto)
    assert ops == {"transpose": 128, "add": 128}
    assert fan_out == {1} and fan_in == {1}
    off = compile_kernel(resolve_kernel(REPO / TRANSPOSE_ADD, {
        **big, "pass_options.vec_nbuffer_setting": {"DEFAULT": 1}}), HW)
    ops, fan_out, fan_in = _fan(off)
    assert ops == {"transpose": 256, "add": 256}
    assert fan_out == {2} and fan_in == {2}
    # at 64 tiles an op (the shipped size) the group is too small to merge
    small = compile_kernel(resolve_kernel(REPO / TRANSPOSE_ADD, {"tiles.add": [64, 128]}), HW)
    assert _fan(small)[0] == {"transpose": 64, "add": 64}


def test_with_no_setting_tasks_that_share_no_producer_or_consumer_stay_apart(tmp_path):
    """96 exps of kernel input rows written straight out: no two read or feed the same task,
    so upstream's automatic merge groups each alone and merges nothing, however many."""
    path = tmp_path / "many.yaml"
    path.write_text(MANY)
    for rows in (96, 480):
        p = compile_kernel(resolve_kernel(path, {"params.R": rows}), HW)
        assert Counter(p.leaf_functions[leaf].ops[0] for leaf in p.task_leaf) == \
            {"exp": rows, "sqrt": rows}


def test_mg_vec_parallel_lb_sizes_the_automatic_merge():
    """A column sum over 4096 rows in [16, 256] tiles: 256 partial tasks, 16 feeding each
    combining task.  With no setting, upstream merges the partials that feed one combiner
    as many at a time as keeps the 256 on mg_vec_parallel_lb cores: 5 at the default 48
    (4 tasks a combiner), 11 at 24 (2), none at 256 or more."""
    from simcore.spec.kernel import Kernel

    def tasks(lb):
        k = Kernel.model_validate({
            "name": "colsum",
            "tensors": {"x": {"shape": [4096, 256], "role": "input"},
                        "y": {"shape": [1, 256], "role": "output"}},
            "body": [{"set_vec_tile_shapes": [16, 256]},
                     {"op": "sum", "inputs": ["x"], "axis": 0, "out": "s"},
                     {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}],
            "options": {"pass_options": {"mg_vec_parallel_lb": lb}}})
        return compile_kernel(k, HW).leaf_tasks
    assert [tasks(lb) for lb in (24, 48, 256)] == [16 * 2 + 17, 16 * 4 + 17, 256 + 17]


def test_the_note_says_whether_a_setting_or_the_automatic_count_asked_for_the_merge():
    """Merges held apart are told apart by what asked for them: a setting the user wrote
    (merge fewer, or other tasks), or the automatic count upstream's passes compute with
    no setting (L1Reuse's, the automatic vecNBuffer's), where nothing needs changing."""
    from types import SimpleNamespace
    program = SimpleNamespace(info={"merges_held_apart": [("func0_1", "AIC", 69, True),
                                                          ("func0_2", "AIV", 3, False)]})
    automatic, asked = merges_held_apart(program)
    assert "func0_1" in automatic and automatic.startswith("69 ") and "automatic" in automatic
    assert "setting asks for" not in automatic
    assert asked.startswith("pass_options.vec_nbuffer_setting") and "setting asks for" in asked
