"""Root calls that repeat are tiled once (simcore/compiler/callcache.py), and the Program
is the one tiling every call would build."""
import dataclasses
import hashlib

import numpy as np
import pytest

from pipeline.runner import resolve_kernel
from simcore.compiler import build, compile_kernel, tiling
from simcore.spec.hardware import load_hardware

from conftest import KERNELS

HW = load_hardware("dav_2201")


def _digest(obj, h) -> None:
    """Every array, field and name of a Program, in order."""
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _digest(getattr(obj, f.name), h)
    elif isinstance(obj, (list, tuple)):
        h.update(b"[")
        for item in obj:
            _digest(item, h)
        h.update(b"]")
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(repr(k).encode())
            _digest(obj[k], h)
    else:
        h.update(repr(obj).encode())


def _compile(monkeypatch, path, sets, cached: bool):
    """(Program digest, root calls tiled in full)."""
    runs = []
    run = tiling.RootCallTiler.run

    def counting_run(self):
        runs.append(self.call)
        return run(self)

    with monkeypatch.context() as m:
        m.setattr(tiling.RootCallTiler, "run", counting_run)
        if not cached:
            m.setattr(build, "call_key", lambda call: None)
        program = compile_kernel(resolve_kernel(path, sets), HW)
    h = hashlib.sha256()
    _digest(program, h)
    return h.hexdigest(), len(runs), program



def _both_ways(monkeypatch, tmp_path, text: str):
    """A kernel config compiled with the call cache and by tiling every call: (cached
    digest, calls tiled in full with the cache, Program, full digest, calls tiled without)."""
    path = tmp_path / "kernel.yaml"
    path.write_text(text)
    cached, cached_runs, program = _compile(monkeypatch, path, {}, True)
    full, full_runs, _ = _compile(monkeypatch, path, {}, False)
    return cached, cached_runs, program, full, full_runs


REPEATING = {
    "glm_attention": {},
    "loop_merge": {},
    "loop_static_axis": {},
    "loop_unroll": {},
    "loop_unroll MODE 0 ROWS 1000": {"params.MODE": 0, "params.ROWS": 1000},
    "loop_unroll MODE 2 ROWS 8200": {"params.MODE": 2, "params.ROWS": 8200},
    "multi_stitch_add": {},
    "softmax": {},
    "bench_1m": {"params.CALLS": 20},
}


@pytest.mark.parametrize("case", sorted(REPEATING))
def test_repeated_calls_compile_to_the_program_of_tiling_every_call(monkeypatch, case):
    path = KERNELS / f"{case.split()[0]}.yaml"
    cached, cached_runs, program = _compile(monkeypatch, path, REPEATING[case], True)
    full, full_runs, _ = _compile(monkeypatch, path, REPEATING[case], False)
    assert cached == full
    assert full_runs == program.root_calls
    assert cached_runs < full_runs       # some call took another's tasks


def test_glm_tiles_each_call_shape_once_whatever_the_sequence_length(monkeypatch):
    # per batch the s2 loop makes chunks of 8 bodies: the first (s2 == 0 has no running
    # state), the middle ones and the last (s2 == S2_LOOP - 1 finalizes) differ, and the
    # kernel's very first call traced its matmul before any vector tile was set; the batch
    # index and the KV blocks move only GM boxes
    path = KERNELS / "glm_attention.yaml"
    _, short_runs, short = _compile(monkeypatch, path, {}, True)
    _, long_runs, long = _compile(monkeypatch, path, {"params.S2": 32768, "params.S2_LOOP": 64,
                                                      "params.NBLK": 2048}, True)
    _, longer_runs, longer = _compile(monkeypatch, path, {
        "params.S2": 49152, "params.S2_LOOP": 96, "params.NBLK": 3072}, True)
    assert long.root_calls == 2 * short.root_calls
    assert longer.root_calls == 3 * short.root_calls
    # every added call is a middle one, with the same leaf tasks
    assert longer.leaf_tasks - long.leaf_tasks == long.leaf_tasks - short.leaf_tasks > 0
    assert short_runs == long_runs == longer_runs == 4


MEET_ONCE = """
name: meet_once
params: {R: 16, C: 256}
tensors:
  x: {shape: [R, C], dtype: fp32, role: input}
  z: {shape: [R, C], dtype: fp32, role: output}
tiles:
  vec: [4, C]
body:
  - set_vec_tile_shapes: vec
  - loop: {name: L, idx: i, trip: 4, style: pypto}
    body:
      - {op: view, inputs: [x], out: a, shape: [4, C], offsets: [0, 0]}
      - {op: view, inputs: [x], out: b, shape: [4, C], offsets: ["i*4", 0]}
      - {op: exp, inputs: [a], out: ea}
      - {op: add, inputs: [ea, b], out: s}
      - {op: assemble, inputs: [s], out: z, offsets: ["i*4", 0]}
"""


def test_a_call_whose_views_meet_differently_is_tiled_in_full(monkeypatch, tmp_path):
    # in the first iteration both views are the same rows, so the leaf task loads them
    # once; later ones read two blocks.  Moving the first call's boxes would give every
    # call one load
    cached, cached_runs, program, full, full_runs = _both_ways(monkeypatch, tmp_path, MEET_ONCE)
    assert np.bincount(program.task_call).tolist() == [1, 1, 1, 1]
    assert program.work.mte2_bytes.tolist() == [4 * 256 * 4, 8 * 256 * 4, 8 * 256 * 4,
                                                8 * 256 * 4]
    assert cached == full
    assert full_runs == 4 and cached_runs == 2    # the first, then one for the rest


def test_a_moved_view_is_still_checked_against_its_tensor(tmp_path):
    path = tmp_path / "outside.yaml"
    path.write_text(MEET_ONCE.replace("trip: 4", "trip: 5"))
    with pytest.raises(Exception, match="leaves the tensor"):
        compile_kernel(resolve_kernel(path, {}), HW)


TAIL_ROWS = """
name: tail_rows
params: {R: 16, C: 256}
tensors:
  x: {shape: [R, C], dtype: fp32, role: input}
  z: {shape: [R, C], dtype: fp32, role: output}
tiles:
  vec: [8, C]
body:
  - set_vec_tile_shapes: vec
  - loop: {name: L, idx: i, trip: 4, style: pypto}
    body:
      - {op: view, inputs: [x], out: a, shape: [8, C], offsets: ["i*4", 0], valid_shape: [4, C]}
      - {op: exp, inputs: [a], out: ea}
      - {op: assemble, inputs: [ea], out: z, offsets: ["i*4", 0]}
"""


def test_a_moved_assemble_is_checked_on_its_valid_rows(monkeypatch, tmp_path):
    # each call holds data in 4 of its 8 rows (upstream's valid_shape), so the last one may
    # write at row 12 of 16: a call that takes the first call's tasks checks its assemble on
    # those 4 rows, as tiling it would, not on the 8 of the tile
    cached, cached_runs, program, full, full_runs = _both_ways(monkeypatch, tmp_path, TAIL_ROWS)
    assert cached == full
    assert full_runs == 4 and cached_runs < full_runs
    assert program.work.mte2_bytes.tolist() == [4 * 256 * 4] * 4
    past = tmp_path / "past.yaml"
    past.write_text(TAIL_ROWS.replace("trip: 4", "trip: 5"))
    with pytest.raises(Exception, match="leaves the tensor"):
        compile_kernel(resolve_kernel(past, {}), HW)


FRESH_TEMP = """
name: fresh_temp
params: {R: 8, C: 256}
tensors:
  x: {shape: ["4*R", C], dtype: fp32, role: input}
  z: {shape: ["4*R", C], dtype: fp32, role: output}
  t: {shape: [R, C], dtype: fp32, role: temporary, fresh_per: L}
tiles:
  vec: [R, C]
body:
  - set_vec_tile_shapes: vec
  - loop: {name: L, idx: i, trip: 4, style: pypto}
    body:
      - {op: view, inputs: [x], out: a, shape: [R, C], offsets: ["i*R", 0]}
      - {op: exp, inputs: [a], out: e}
      - {op: assemble, inputs: [e], out: t, offsets: [0, 0]}
      - {op: view, inputs: [t], out: tv, shape: [R, C], offsets: [0, 0]}
      - {op: sqrt, inputs: [tv], out: s}
      - {op: assemble, inputs: [s], out: z, offsets: ["i*R", 0]}
"""


def test_a_temporary_made_per_iteration_carries_nothing_between_iterations(monkeypatch,
                                                                            tmp_path):
    # upstream allocates a pypto.tensor made in a loop body anew each iteration: the four
    # iterations' writes of t are four buffers, so no iteration waits for another; one t
    # for all (no fresh_per) chains each iteration's write after the one before.  The calls
    # of later iterations still take the first call's tasks, instance for instance
    cached, cached_runs, program, full, full_runs = _both_ways(monkeypatch, tmp_path, FRESH_TEMP)
    assert cached == full
    assert full_runs == 4 and cached_runs < full_runs

    def across_calls(p):
        return int(np.sum(p.task_call[p.edge_src] != p.task_call[p.edge_dst]))
    assert across_calls(program) == 0
    shared = tmp_path / "shared.yaml"
    shared.write_text(FRESH_TEMP.replace(", fresh_per: L", ""))
    assert across_calls(compile_kernel(resolve_kernel(shared, {}), HW)) > 0


ON_CHIP_VIEWS = """
name: on_chip_views
params: {R: 8, C: 256}
tensors:
  x: {shape: ["4*R", C], dtype: fp32, role: input}
  z: {shape: ["4*R", C], dtype: fp32, role: output}
  t: {shape: [R, C], dtype: fp32, role: temporary, fresh_per: L}
tiles:
  vec: [R, C]
body:
  - set_vec_tile_shapes: vec
  - loop: {name: L, idx: i, trip: 4, style: pypto}
    body:
      - {op: view, inputs: [x], out: a, shape: [R, C], offsets: ["i*R", 0]}
      - {op: reshape, inputs: [a], out: ac, shape: ["2*R", 128], inplace: false}
      - {op: exp, inputs: [ac], out: e}
      - {op: reshape, inputs: [e], out: er, shape: [R, C]}
      - {op: assemble, inputs: [er], out: t, offsets: [0, 0]}
      - {op: reshape, inputs: [t], out: tr, shape: ["2*R", 128], inplace: true}
      - {op: view, inputs: [tr], out: tv, shape: [R, 128], offsets: [R, 0]}
      - {op: sqrt, inputs: [tv], out: s}
      - {op: view, inputs: [e], out: ev, shape: [R, 128], offsets: [0, 0]}
      - {op: add, inputs: [s, ev], out: u}
      - {op: assemble, inputs: [u], out: z, offsets: ["i*R", 0]}
"""


def test_calls_that_view_their_own_results_take_the_first_calls_tasks(monkeypatch, tmp_path):
    # a copying reshape of a GM view (a Vector copy of its own), a view inside an op's
    # result and a reshape of the iteration's own temporary: the first call is tiled, the
    # other three take its tasks with the GM boxes moved and the workspace and temporary
    # names (and the windows named after them) renamed, giving the Program of tiling each
    cached, cached_runs, program, full, full_runs = _both_ways(monkeypatch, tmp_path,
                                                               ON_CHIP_VIEWS)
    assert cached == full
    assert full_runs == 4 and cached_runs == 1
    assert np.bincount(program.task_call).tolist() == [4, 4, 4, 4]
    moved = tmp_path / "moved.yaml"   # the on-chip view's place is part of the call's shape
    moved.write_text(ON_CHIP_VIEWS.replace('offsets: [0, 0]}\n      - {op: add',
                                           'offsets: ["(i % 2) * R", 0]}\n      - {op: add'))
    cached, cached_runs, _, full, _ = _both_ways(monkeypatch, tmp_path, moved.read_text())
    assert cached == full
    assert cached_runs == 2


MEET_BOXES = """
name: meet_boxes
params: {R: 16, C: 256}
tensors:
  x: {shape: [R, C], dtype: fp32, role: input}
  y: {shape: [R, C], dtype: fp32, role: output}
tiles:
  vec: [4, C]
body:
  - set_vec_tile_shapes: vec
  - loop: {name: L, idx: i, trip: 4, style: pypto}
    body:
      - {op: view, inputs: [x], out: a, shape: [4, C], offsets: [0, 0]}
      - {op: view, inputs: [x], out: b, shape: [4, C], offsets: ["i*4", 0], valid_shape: [4, C]}
      - {op: add, inputs: [a, b], out: s}
      - {op: assemble, inputs: [s], out: y, offsets: ["i*4", 0]}
"""


def test_a_call_whose_boxes_meet_differently_is_tiled_in_full(monkeypatch, tmp_path):
    # the two views are different values (one names a valid shape) in every call, but in the
    # first their boxes are the same rows: the task loads them once.  Later calls load two
    cached, cached_runs, program, full, _ = _both_ways(monkeypatch, tmp_path, MEET_BOXES)
    loads = np.bincount(program.task_call, weights=program.work.mte2_loads)
    assert loads.tolist() == [1, 2, 2, 2]
    assert cached == full
    assert cached_runs == 2


RESHAPED = """
name: reshaped
params: {N: 4, M: 128, K: 256}
tensors:
  a: {shape: ["N*M", K], dtype: fp16, role: input}
  w: {shape: ["2*K", 128], dtype: fp16, role: input}
  c: {shape: ["N*M // 2", 128], dtype: fp16, role: output}
tiles:
  cube: {m: [64, 64], k: [128, 128], n: [64, 64]}
body:
  - set_cube_tile_shapes: cube
  - loop: {name: L, idx: i, trip: N}
    body:
      - {op: reshape, inputs: [a], shape: ["N*M // 2", "2*K"], out: a2, inplace: true}
      - {op: view, inputs: [a2], out: ai, shape: ["M // 2", "2*K"], offsets: ["i*M // 2", 0]}
      - {op: matmul, inputs: [ai, w], dtype: fp16, out: ci, label: mm}
      - {op: assemble, inputs: [ci], out: c, offsets: ["i*M // 2", 0]}
"""


def test_calls_through_an_inplace_reshape_and_l1_reuse_compile_alike(monkeypatch, tmp_path):
    # views of another geometry of a's bytes, Cube tasks merged by the block of w they share
    cached, cached_runs, program, full, full_runs = _both_ways(monkeypatch, tmp_path, RESHAPED)
    assert program.root_calls == 4 and full_runs == 4
    assert cached == full
    assert cached_runs == 1


def test_a_root_call_of_only_views_has_no_leaf_task(tmp_path):
    path = tmp_path / "views_first.yaml"
    path.write_text(RESHAPED.replace("body:\n  - set_cube_tile_shapes: cube",
                                     "body:\n  - {op: view, inputs: [a], out: first, "
                                     "shape: [1, K], offsets: [0, 0]}\n"
                                     "  - set_cube_tile_shapes: cube", 1))
    program = compile_kernel(resolve_kernel(path, {}), HW)
    assert program.root_calls == 5
    assert np.bincount(program.task_call, minlength=5)[0] == 0


ON_CHIP_VIEW = """
name: on_chip_view
params: {R: 16, C: 256}
tensors:
  x: {shape: [R, C], dtype: fp32, role: input}
  y: {shape: [4, 64], dtype: fp32, role: output}
tiles:
  vec: [4, 64]
body:
  - set_vec_tile_shapes: vec
  - loop: {name: L, idx: i, trip: 4, style: pypto}
    body:
      - {op: view, inputs: [x], out: a, shape: [4, C], offsets: ["i*4", 0]}
      - {op: exp, inputs: [a], out: ea}
      - {op: view, inputs: [ea], out: part, shape: [4, 64], offsets: [0, "i*64"]}
      - {op: sqrt, inputs: [part], out: s}
      - {op: assemble, inputs: [s], out: y, offsets: [0, 0]}
"""


def test_a_call_that_views_an_op_result_is_tiled_in_full(monkeypatch, tmp_path):
    # the on-chip view's offsets are positions in exp's result, not in GM: each call reads
    # another column block of it, which moving GM boxes cannot reproduce
    cached, cached_runs, program, full, full_runs = _both_ways(monkeypatch, tmp_path, ON_CHIP_VIEW)
    assert cached == full
    assert cached_runs == full_runs == program.root_calls == 4


# --- groups that repeat inside a root call (simcore/compiler/groupcache.py) ---------------

GROUPED = {
    "producer_consumer R 256": {"params.R": 256},
    "glm_attention": {},
    "quant_indexer_prolog": {},
    "blockdiag_matmul": {},
    "scope_chain": {},
    "loop_static_axis": {},
    "rmsnorm": {},
    "softmax": {},
    "skinny_matmul_rewrite": {},
}


def _compile_groups(monkeypatch, path, sets, grouped: bool):
    """(Program digest, groups whose tasks were moved from another's)."""
    from simcore.compiler import groupcache
    hits = []
    expand = groupcache.GroupCache.expand

    def counting(self, tiler, group):
        batch = expand(self, tiler, group) if grouped else tiler._expand(group)
        hits.append(self.hits)
        return batch

    with monkeypatch.context() as m:
        m.setattr(groupcache.GroupCache, "expand", counting)
        program = compile_kernel(resolve_kernel(path, sets), HW)
    h = hashlib.sha256()
    _digest(program, h)
    return h.hexdigest(), max(hits, default=0)


@pytest.mark.parametrize("case", sorted(GROUPED))
def test_repeated_groups_compile_to_the_program_of_expanding_every_group(monkeypatch, case):
    """Moving a repeated group's GM boxes and renaming its workspaces gives, byte for byte,
    the Program that expanding every group builds."""
    path = KERNELS / f"{case.split()[0]}.yaml"
    grouped, hits = _compile_groups(monkeypatch, path, GROUPED[case], True)
    full, _ = _compile_groups(monkeypatch, path, GROUPED[case], False)
    assert grouped == full
    if case.startswith("producer_consumer"):
        # 64 blocks, each a producer and a consumer group: one of each is expanded
        assert hits == 2 * 64 - 2


def test_a_group_assembled_into_a_gathered_target_keeps_its_boxes(monkeypatch, tmp_path):
    """A box assembled into a target of several pieces lands in whichever piece its rows
    fall in, so a group of that shape is only reused at the same assemble offsets."""
    path = tmp_path / "gathered.yaml"
    path.write_text(GATHERED)
    grouped, _ = _compile_groups(monkeypatch, path, {}, True)
    full, _ = _compile_groups(monkeypatch, path, {}, False)
    assert grouped == full


GATHERED = """
name: gathered
params: {B: 8, R: 4, C: 64}
tensors:
  x: {shape: ["B*R", C], dtype: fp32, role: input}
  cache: {shape: ["4*B*R", C], dtype: fp32, role: output}
tiles:
  vec: [R, C]
body:
  - set_vec_tile_shapes: vec
  - {op: gather, inputs: [cache], out: paged, block_rows: R, count: B, first_block: 0, permute: 3}
  - loop: {name: blocks, idx: i, trip: B, style: for}
    body:
      - {op: view, inputs: [x], out: xi, shape: [R, C], offsets: ["i*R", 0]}
      - {op: exp, inputs: [xi], out: yi}
      - {op: assemble, inputs: [yi], out: paged, offsets: ["i*R", 0]}
"""
