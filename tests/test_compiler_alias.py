"""An inplace reshape is another geometry of its base tensor's bytes: dependencies and
L2 must meet accesses made through any geometry of one storage."""
import numpy as np
import pytest

from simcore.compiler import compile_kernel
from simcore.compiler.deps import flat_runs
from simcore.machine.engine import simulate
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import load_hardware

from pipeline.runner import resolve_kernel

HW = load_hardware("dav_2201")

# exp(x) assembled into a GM tensor tmp [64, 512] in one scope and loop; sqrt of its
# inplace reshape [128, 256] in another.  Producer tile i writes rows 16i..16i+16, the
# bytes consumer tile i reads as rows 32i..32i+32 of the reshape.
MINIMAL = """
name: alias
params: {}
tensors:
  x: {shape: [64, 512], dtype: fp32, role: input}
  tmp: {shape: [64, 512], dtype: fp32}
  z: {shape: [128, 256], dtype: fp32, role: output}
body:
  - set_vec_tile_shapes: [16, 512]
  - loop: {name: prod, idx: i, trip: 1}
    body:
      - sg_set_scope: 1
      - {op: exp, inputs: [x], out: e, label: producer}
      - {op: assemble, inputs: [e], out: tmp, offsets: [0, 0]}
      - sg_set_scope: -1
  - set_vec_tile_shapes: CONSUMER_TILE
  - loop: {name: cons, idx: j, trip: 1}
    body:
      - {op: reshape, inputs: [tmp], shape: [128, 256], out: t2, inplace: true}
      - CONSUMER_VIEW
      - sg_set_scope: 2
      - {op: sqrt, inputs: [SRC], out: s, label: consumer}
      - sg_set_scope: -1
      - {op: assemble, inputs: [s], out: z, offsets: [0, 0]}
"""


def program(tmp_path, text, **subs):
    for k, v in subs.items():
        text = text.replace(k, v)
    path = tmp_path / "k.yaml"
    path.write_text(text)
    kernel = resolve_kernel(path, {})
    return kernel, compile_kernel(kernel, HW)


def minimal(tmp_path, tile="[32, 256]", view=None):
    view_op = view or "{op: view, inputs: [t2], out: v, shape: [128, 256], offsets: [0, 0]}"
    return program(tmp_path, MINIMAL, CONSUMER_TILE=tile, CONSUMER_VIEW=view_op,
                   SRC="t2" if view is None else "v")


def labels(p):
    return np.asarray([p.leaf_functions[i].label for i in p.task_leaf])


def edges(p):
    return sorted(zip(p.edge_src.tolist(), p.edge_dst.tolist()))


def test_a_reshape_consumer_waits_for_its_producer_and_hits_l2(tmp_path):
    kernel, p = minimal(tmp_path)
    lab = labels(p)
    prod, cons = np.flatnonzero(lab == "producer"), np.flatnonzero(lab == "consumer")
    assert prod.size == cons.size == 4
    # tile i of the reshape holds exactly the bytes producer tile i wrote
    assert edges(p) == list(zip(prod.tolist(), cons.tolist()))
    tl = simulate(HW, p, kernel.options.runtime_options)
    # each consumer starts once its own producer has ended
    assert np.all(tl.task_start[cons] >= tl.task_end[prod] - 1e-9)
    assert np.all(tl.task_l2_bytes[cons] > 0)
    # the bytes the producers wrote are all the consumers read, so nothing comes from HBM
    assert tl.task_hbm_bytes[cons].sum() == 0


def test_a_view_of_a_reshape_depends_only_on_the_bytes_it_covers(tmp_path):
    # rows 64..128 of the [128, 256] reshape are rows 32..64 of tmp: producers 2 and 3
    view = "{op: view, inputs: [t2], out: v, shape: [64, 256], offsets: [64, 0]}"
    _, p = minimal(tmp_path, view=view)
    lab = labels(p)
    prod, cons = np.flatnonzero(lab == "producer"), np.flatnonzero(lab == "consumer")
    assert cons.size == 2
    assert edges(p) == [(int(prod[2]), int(cons[0])), (int(prod[3]), int(cons[1]))]


def test_boxes_that_are_not_whole_rows_meet_on_their_exact_byte_runs(tmp_path):
    # the consumer reads one [1, 256] row of the reshape: half a row of tmp, so each row
    # of tmp feeds two consumers; a [16, 128] consumer tile is 16 runs of 512 bytes that
    # fall in the first half of 8 rows of tmp, all written by producer 0
    _, p = minimal(tmp_path, tile="[1, 256]")
    lab = labels(p)
    prod, cons = np.flatnonzero(lab == "producer"), np.flatnonzero(lab == "consumer")
    assert cons.size == 128
    assert edges(p) == [(int(prod[c // 32]), int(cons[c])) for c in range(128)]
    _, p = minimal(tmp_path, tile="[16, 128]")
    lab = labels(p)
    prod, cons = np.flatnonzero(lab == "producer"), np.flatnonzero(lab == "consumer")
    # consumer tile (r, c) covers reshape rows 16r..16r+16, i.e. tmp rows 8r..8r+8
    want = sorted((int(prod[(8 * (k // 2)) // 16]), int(cons[k])) for k in range(cons.size))
    assert edges(p) == want


def test_writes_through_a_reshape_reach_readers_of_the_base(tmp_path):
    text = """
name: alias_back
params: {}
tensors:
  x: {shape: [128, 256], dtype: fp32, role: input}
  tmp: {shape: [64, 512], dtype: fp32}
  z: {shape: [64, 512], dtype: fp32, role: output}
body:
  - set_vec_tile_shapes: [32, 256]
  - loop: {name: prod, idx: i, trip: 1}
    body:
      - {op: reshape, inputs: [tmp], shape: [128, 256], out: t2, inplace: true}
      - sg_set_scope: 1
      - {op: exp, inputs: [x], out: e, label: producer}
      - {op: assemble, inputs: [e], out: t2, offsets: [0, 0]}
      - sg_set_scope: -1
  - set_vec_tile_shapes: [16, 512]
  - loop: {name: cons, idx: j, trip: 1}
    body:
      - {op: reshape, inputs: [tmp], shape: [64, 512], out: back, inplace: true}
      - {op: reshape, inputs: [back], shape: [32768], out: flat, inplace: true}
      - {op: reshape, inputs: [flat], shape: [64, 512], out: again, inplace: true}
      - sg_set_scope: 2
      - {op: sqrt, inputs: [again], out: s, label: consumer}
      - sg_set_scope: -1
      - {op: assemble, inputs: [s], out: z, offsets: [0, 0]}
"""
    kernel, p = program(tmp_path, text)
    lab = labels(p)
    prod, cons = np.flatnonzero(lab == "producer"), np.flatnonzero(lab == "consumer")
    assert edges(p) == list(zip(prod.tolist(), cons.tolist()))
    tl = simulate(HW, p, kernel.options.runtime_options)
    assert np.all(tl.task_l2_bytes[cons] > 0)


def test_a_plain_view_still_meets_its_producer(tmp_path):
    text = MINIMAL.replace("[128, 256], out: t2", "[64, 512], out: t2").replace(
        "z: {shape: [128, 256]", "z: {shape: [64, 512]")
    _, p = program(tmp_path, text, CONSUMER_TILE="[16, 512]",
                   CONSUMER_VIEW="{op: view, inputs: [tmp], out: v, shape: [32, 512], "
                                 "offsets: [32, 0]}", SRC="v")
    lab = labels(p)
    prod, cons = np.flatnonzero(lab == "producer"), np.flatnonzero(lab == "consumer")
    assert edges(p) == [(int(prod[2]), int(cons[0])), (int(prod[3]), int(cons[1]))]


def test_reshape_of_a_partial_view_or_a_gather_is_refused(tmp_path):
    partial = MINIMAL.replace(
        "{op: reshape, inputs: [tmp], shape: [128, 256], out: t2, inplace: true}",
        "{op: view, inputs: [tmp], out: h, shape: [32, 512], offsets: [0, 0]}\n"
        "      - {op: reshape, inputs: [h], shape: [64, 256], out: t2, inplace: true}")
    with pytest.raises(ConfigError, match="partial view or a gather"):
        program(tmp_path, partial, CONSUMER_TILE="[32, 256]", CONSUMER_VIEW="{op: exp, "
                "inputs: [x], out: unused}", SRC="t2")
    gathered = MINIMAL.replace(
        "{op: reshape, inputs: [tmp], shape: [128, 256], out: t2, inplace: true}",
        "{op: gather, inputs: [tmp], out: g, block_rows: 16, count: 4, first_block: 0, "
        "permute: 3}\n      - {op: reshape, inputs: [g], shape: [128, 256], out: t2, "
        "inplace: true}")
    with pytest.raises(ConfigError, match="partial view or a gather"):
        program(tmp_path, gathered, CONSUMER_TILE="[32, 256]", CONSUMER_VIEW="{op: exp, "
                "inputs: [x], out: unused}", SRC="t2")


def test_flat_runs_are_exact_for_rows_and_a_hull_past_the_cap():
    lo, hi = np.array([[2, 0], [0, 4], [1, 2]]), np.array([[4, 8], [3, 8], [2, 6]])
    box, first, end = flat_runs(lo, hi, (4, 8), elem=2)
    runs = sorted(zip(box.tolist(), first.tolist(), end.tolist()))
    # whole rows: one run; a column block: one run per row; one partial row: one run
    assert runs == [(0, 32, 64), (1, 8, 16), (1, 24, 32), (1, 40, 48), (2, 20, 28)]
    box, first, end = flat_runs(lo[1:2], hi[1:2], (4, 8), elem=2, max_runs=2)
    assert box.tolist() == [0] and (first[0], end[0]) == (8, 48)   # the hull covers the gaps


def test_a_gather_of_a_reshape_waits_for_the_producers_of_its_blocks(tmp_path):
    # blocks of 32 rows of the [128, 256] reshape, in the order 0, 3, 2, 1 (permute 3):
    # block b holds the bytes producer b wrote
    view = ("{op: gather, inputs: [t2], out: v, block_rows: 32, count: 4, first_block: 0, "
            "permute: 3}")
    _, p = minimal(tmp_path, view=view)
    lab = labels(p)
    prod, cons = np.flatnonzero(lab == "producer"), np.flatnonzero(lab == "consumer")
    order = [0, 3, 2, 1]
    assert edges(p) == sorted((int(prod[order[c]]), int(cons[c])) for c in range(4))


TWO_STORAGES = """
name: two_storages
params: {}
tensors:
  x: {shape: [64, 512], dtype: fp32, role: input}
  ta: {shape: [64, 512], dtype: fp32}
  tb: {shape: [64, 512], dtype: fp32}
  za: {shape: [128, 256], dtype: fp32, role: output}
  zb: {shape: [128, 256], dtype: fp32, role: output}
body:
  - set_vec_tile_shapes: [16, 512]
  - loop: {name: prod, idx: i, trip: 1}
    body:
      - {op: exp, inputs: [x], out: e, label: producer_a}
      - {op: assemble, inputs: [e], out: ta, offsets: [0, 0]}
      - {op: sqrt, inputs: [x], out: r, label: producer_b}
      - {op: assemble, inputs: [r], out: tb, offsets: [0, 0]}
  - set_vec_tile_shapes: [32, 256]
  - loop: {name: cons, idx: j, trip: 1}
    body:
      - {op: reshape, inputs: [ta], shape: [128, 256], out: ra, inplace: true}
      - {op: reshape, inputs: [tb], shape: [128, 256], out: rb, inplace: true}
      - {op: abs, inputs: [ra], out: a, label: consumer_a}
      - {op: assemble, inputs: [a], out: za, offsets: [0, 0]}
      - {op: mul, inputs: [rb], out: b, scalar: 2.0, label: consumer_b}
      - {op: assemble, inputs: [b], out: zb, offsets: [0, 0]}
"""


def test_storages_seen_through_reshapes_meet_only_their_own_writers(tmp_path):
    # two temporaries written and read back through reshapes at the same byte offsets:
    # the dependency query matches every such storage at once, so each consumer tile must
    # still wait for the producer tile of its own storage and no other
    _, p = program(tmp_path, TWO_STORAGES)
    lab = labels(p)
    want = []
    for side in "ab":
        prod = np.flatnonzero(lab == f"producer_{side}")
        cons = np.flatnonzero(lab == f"consumer_{side}")
        assert prod.size == cons.size == 4
        want += list(zip(prod.tolist(), cons.tolist()))
    assert edges(p) == sorted(want)
