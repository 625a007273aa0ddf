"""The device encoder's rewrites of a root call's task graph (simcore/compiler/encode.py):
an edge already implied by a longer path is dropped, producers sharing one successor set
reach it through a hub once that saves more than ten edges, and a call with three or more
tasks nothing in it waits for gets an end hub they each resolve.  Edges between root calls
are the runtime's stitching and are never touched."""
from __future__ import annotations

import numpy as np

from pipeline.runner import resolve_kernel
from simcore.compiler import compile_kernel
from simcore.compiler.encode import (END_HUB_MIN_TASKS, HUB_MIN_SAVED_EDGES,
                                     encode_call_edges, end_hubs)
from simcore.spec.hardware import load_hardware

from conftest import KERNELS

HW = load_hardware("dav_2201")


def encode(edges, calls):
    src, dst = (np.array(x, np.int64) for x in zip(*sorted(edges)))
    s, d, hub = encode_call_edges(src, dst, np.array(calls, np.int64))
    return list(zip(s.tolist(), d.tolist())), hub.tolist()


def test_an_edge_a_longer_path_implies_is_dropped_inside_a_call_only():
    # 0 -> 1 -> 2 and 0 -> 2: the direct edge orders nothing the path does not
    kept, hubs = encode([(0, 1), (1, 2), (0, 2)], [0, 0, 0])
    assert kept == [(0, 1), (1, 2)]
    assert hubs == [-1, -1]
    # the same graph across two calls (2 in the next one): the runtime stitches 1 -> 2 and
    # 0 -> 2, and the encoder sees only the edge inside call 0
    kept, _ = encode([(0, 1), (1, 2), (0, 2)], [0, 0, 1])
    assert kept == [(0, 1), (0, 2), (1, 2)]


def test_a_running_state_chain_keeps_every_edge_no_path_implies():
    # a step's reader (1) and the next step's writer (2) of one state: 0 -> 1, 0 -> 2,
    # 1 -> 2 drops 0 -> 2; 2 -> 3 has no alternative and stays
    kept, _ = encode([(0, 1), (0, 2), (1, 2), (2, 3)], [0] * 4)
    assert kept == [(0, 1), (1, 2), (2, 3)]


def _all_to_all(p, s):
    return [(i, p + j) for i in range(p) for j in range(s)]


def test_producers_sharing_their_consumers_go_through_a_hub_past_ten_saved_edges():
    # P x S edges become P + S through a hub: 4 x 5 saves 11, more than the encoder's 10
    assert 4 * 5 - 4 - 5 > HUB_MIN_SAVED_EDGES
    kept, hubs = encode(_all_to_all(4, 5), [0] * 9)
    assert len(kept) == 20                 # the order they enforce is kept, as edges
    assert hubs == [0] * 20                # all resolved through hub 0
    # 4 x 4 saves 8: direct edges
    kept, hubs = encode(_all_to_all(4, 4), [0] * 8)
    assert hubs == [-1] * 16


def test_a_producer_with_another_successor_set_is_not_in_the_hub():
    # producers 0-3 feed 4-8; producer 9 feeds 4-8 and 10 too: its successor set differs
    edges = _all_to_all(4, 5) + [(9, c) for c in (4, 5, 6, 7, 8, 10)]
    calls = [0] * 11
    # task order must be topological: renumber producer 9 before the consumers
    order = [0, 1, 2, 3, 9, 4, 5, 6, 7, 8, 10]
    new = {t: i for i, t in enumerate(order)}
    kept, hubs = encode([(new[s], new[d]) for s, d in edges], calls)
    via = {e for e, h in zip(kept, hubs) if h >= 0}
    assert via == {(new[s], new[d]) for s, d in _all_to_all(4, 5)}
    assert set(hubs) == {-1, 0}


def test_hubs_are_numbered_across_the_calls_of_a_program():
    calls = [0] * 9 + [1] * 9
    edges = _all_to_all(4, 5) + [(9 + s, 9 + d) for s, d in _all_to_all(4, 5)]
    kept, hubs = encode(edges, calls)
    assert sorted(set(hubs)) == [0, 1]
    assert all(h == (0 if s < 9 else 1) for (s, _), h in zip(kept, hubs))


def test_the_prolog_query_projection_reaches_its_dequantisation_through_hubs():
    """QuantIndexerProlog: each half of the heads is one dequantisation subgraph per token,
    and it reads every column tile of the query projection in that half; those producers
    share one successor set, so the all-to-all edges go through one hub per half.  L1Reuse
    merges the producers four to one, which shrinks the hubs' fan-in, not an all-to-all."""
    path = KERNELS / "quant_indexer_prolog.yaml"
    unmerged = compile_kernel(resolve_kernel(
        path, {"pass_options.cube_l1_reuse_setting": {"DEFAULT": 1}}), HW)
    merged = compile_kernel(resolve_kernel(path, {}), HW)
    for program, producers in ((unmerged, 64), (merged, 16)):
        labels = np.array([program.leaf_functions[i].label for i in program.task_leaf])
        via = program.edge_hub >= 0
        assert int(program.edge_hub.max()) + 1 == 2
        assert set(labels[program.edge_src[via]]) == {"Query-Linear"}
        assert set(labels[program.edge_dst[via]]) == {"Query-Dequant"}
        assert np.unique(program.edge_src[via]).size == producers
        # the runtime resolves P + S edges per hub, not P x S
        resolved = sum(np.unique(program.edge_src[via & (program.edge_hub == h)]).size
                       + np.unique(program.edge_dst[via & (program.edge_hub == h)]).size
                       for h in range(2))
        assert resolved < via.sum()


def tails(edges, calls, first_hub=0):
    src, dst = (np.array(x, np.int64) for x in zip(*sorted(edges))) if edges else \
        (np.zeros(0, np.int64), np.zeros(0, np.int64))
    task, hub = end_hubs(src, dst, np.array(calls, np.int64), first_hub)
    return dict(zip(task.tolist(), hub.tolist()))


def test_three_tasks_nothing_in_their_call_waits_for_share_an_end_hub():
    assert END_HUB_MIN_TASKS == 3
    # 0 -> 1; 1, 2 and 3 end the call: one end hub for them, none for 0
    assert tails([(0, 1)], [0, 0, 0, 0]) == {1: 0, 2: 0, 3: 0}
    # two per call are too few: no hub anywhere
    assert tails([(0, 1), (3, 4)], [0, 0, 0, 1, 1, 1]) == {}
    # an edge into the next call is stitching: inside its own call task 0 ends the call
    assert tails([(0, 3)], [0, 0, 0, 1]) == {0: 0, 1: 0, 2: 0}
    # numbered after the successor hubs, in call order
    assert tails([], [0, 0, 0, 1, 1, 2, 2, 2], first_hub=5) == \
        {0: 5, 1: 5, 2: 5, 5: 6, 6: 6, 7: 6}


def test_a_matmul_of_independent_tiles_gets_an_end_hub_and_a_softmax_chain_none():
    """A call whose tasks are all independent (the skinny matmul's output tiles) resolves
    one edge per task into its end hub; each glm_attention call ends in one task (the last
    step's state), so no call of it has an end hub."""
    skinny = compile_kernel(resolve_kernel(KERNELS / "skinny_matmul.yaml", {}), HW)
    assert skinny.edge_src.size == 0
    assert sorted(skinny.tail_task.tolist()) == list(range(skinny.leaf_tasks))
    assert skinny.hubs == skinny.root_calls
    glm = compile_kernel(resolve_kernel(KERNELS / "glm_attention.yaml", {}), HW)
    assert glm.tail_task.size == 0 and glm.hubs == 0
