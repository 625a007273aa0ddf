"""The UB a leaf function holds, op by op (simcore/compiler/ubprofile.py).

The depth merge extends a subgraph's profile one op at a time and asks what the peak
would be with one more op.  These tests hold the incremental profile to the definition
computed afresh at every prefix of a long chain, and its work to the chain's length.
"""
from pathlib import Path

import numpy as np
import pytest

from pipeline.runner import resolve_kernel
from simcore.compiler import compile_kernel, ubprofile
from simcore.compiler.limits import Limits
from simcore.compiler.tiling import RootCallTiler
from simcore.compiler.trace import trace
from simcore.compiler.values import LocalValue
from simcore.spec.hardware import load_hardware

from conftest import KERNELS

HW = load_hardware("dav_2201")


def _definition(tiler, members: list[int]) -> list[int]:
    """Per position, the bytes of every tile live there, from the definition: a value is
    live from the op that makes or first reads it to the last op reading it; an op whose
    result takes the buffer of an input it alone reads, of the same size and width (and
    that nothing outside reads), holds one buffer for both."""
    sizes = ubprofile.TileBytes(lambda lo, hi, dt: tiler._tile_bytes._measure(lo, hi, dt))
    inside = set(members)
    spans, reads, keys = {}, {}, []
    for k, n in enumerate(members):
        node = tiler.nodes[n]
        spans[("node", n)] = [k, k, sizes.out(node)]
        mine = {}
        for v, b in zip(node.inputs, sizes.inputs(node)):
            key = ("node", v.node) if isinstance(v, LocalValue) and v.node in inside else v
            spans.setdefault(key, [k, k, b])[1] = k
            if key not in mine:
                mine[key] = v
                reads[key] = reads.get(key, 0) + 1
        keys.append(mine)
    profile = [sum(b for first, last, b in spans.values() if first <= k <= last)
               for k in range(len(members))]
    for k, n in enumerate(members):
        node = tiler.nodes[n]
        out = sizes.out(node)
        if node.kind != "vector" or not ubprofile.ops.reuses_buffer(node.op):
            continue
        width = ubprofile.DTYPE_BYTES[node.out_dtype]
        if any(spans[key][1] == k and reads[key] == 1 and spans[key][2] == out
               and ubprofile.DTYPE_BYTES[v.dtype] == width
               and not (isinstance(key, tuple) and
                        tiler.nodes[key[1]].extra.get("readers", 2) != 1)
               for key, v in keys[k].items()):
            profile[k] -= out
    return profile


def _gdr_chain():
    kernel = resolve_kernel(KERNELS / "gdr_inverse.yaml", {})
    tiler = RootCallTiler(kernel, Limits.of(HW), trace(kernel).calls[0], 0)
    tiler.run()
    longest = max(tiler.groups, key=lambda g: len(g.nodes))
    return tiler, longest.nodes


def test_the_profile_grown_op_by_op_is_the_definition_at_every_prefix():
    # the GDR case's row-by-row inverse: one leaf function of some 100 nodes, whose
    # inputs gain readers step after step (so buffers an earlier result took come back)
    tiler, members = _gdr_chain()
    assert len(members) > 90
    profile = ubprofile.UbProfile(tiler.nodes, tiler._tile_bytes)
    for k, n in enumerate(members):
        before = profile.values().copy()
        asked = profile.peak_with(n)
        assert np.array_equal(profile.values(), before)     # asking changes nothing
        profile.extend(n)
        expected = _definition(tiler, members[:k + 1])
        assert profile.values().tolist() == expected
        assert asked == max(expected)


def test_a_later_reader_gives_back_the_buffer_an_earlier_result_took():
    # y = exp(x) may take x's buffer while nothing else reads x; once a later op of the
    # function reads x too, exp needs a buffer of its own and the profile there grows
    tiler, members = _gdr_chain()
    grown = 0
    profile = ubprofile.UbProfile(tiler.nodes, tiler._tile_bytes)
    for n in members:
        before = profile.values().copy()
        profile.extend(n)
        after = profile.values()[:before.size]
        assert np.all(after >= before)          # a new op only raises what came before
        grown += int(np.any(after > before))
    assert grown > 0


def _chain_kernel(tmp_path: Path, ops: int) -> Path:
    lines = [f"  - {{op: exp, inputs: [e{k}], out: e{k + 1}}}" for k in range(ops)]
    path = tmp_path / f"chain{ops}.yaml"
    path.write_text(f"""
name: chain
params: {{R: 64, C: 512}}
tensors:
  x: {{shape: [R, C], dtype: fp32, role: input}}
  y: {{shape: [R, C], dtype: fp32, role: output}}
tiles:
  vec: [R, C]
body:
  - set_vec_tile_shapes: vec
  - {{op: view, inputs: [x], out: e0, shape: [R, C], offsets: [0, 0]}}
{chr(10).join(lines)}
  - {{op: assemble, inputs: [e{ops}], out: y, offsets: [0, 0]}}
""")
    return path


@pytest.mark.parametrize("ops", [40])
def test_the_depth_merge_asks_the_profile_once_per_op_of_a_chain(monkeypatch, tmp_path, ops):
    # a chain whose tiles together pass UB (40 x 128 KiB) but live two at a time: each op
    # joins after one question to the profile, which grows by one op; twice the chain is
    # twice the work, not four times
    work = []
    add = ubprofile.UbProfile._add

    def counting_add(self, n, commit):
        work.append(len(self.members))
        return add(self, n, commit)

    monkeypatch.setattr(ubprofile.UbProfile, "_add", counting_add)
    short = compile_kernel(resolve_kernel(_chain_kernel(tmp_path, ops), {}), HW)
    short_work, work[:] = len(work), []
    long = compile_kernel(resolve_kernel(_chain_kernel(tmp_path, 2 * ops), {}), HW)
    assert short.leaf_tasks == long.leaf_tasks == 1
    assert short_work > ops
    assert len(work) <= 2 * short_work + 4
