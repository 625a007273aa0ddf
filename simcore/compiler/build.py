"""Kernel + options + hardware -> Program: trace, tile, merge, link, stitch."""
from __future__ import annotations

import hashlib

import numpy as np

from ..spec.hardware import Hardware
from ..spec.kernel import DTYPE_BYTES, Kernel
from .deps import region_edges
from .program import AIV, LeafFunction, Program, RootFunction
from .stitch import stitch
from .tiling import RootCallTiler
from .trace import trace


def stable_hash(*parts) -> int:
    """A deterministic 63-bit hash (Python's hash() is salted per process)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def compile_kernel(kernel: Kernel, hw: Hardware) -> Program:
    traced = trace(kernel)
    roots: dict[str, RootFunction] = {}
    leaves: dict[tuple, LeafFunction] = {}
    call_root, call_tasks = [], []
    task_call, task_leaf, task_op, task_r, task_w = [], [], [], [], []
    reads, writes = [], []
    workspace = []

    for c, call in enumerate(traced.calls):
        root = roots.setdefault(call.root_key, RootFunction(
            index=len(roots), hash=stable_hash(kernel.name, call.root_key), name=call.root_key))
        tiler = RootCallTiler(kernel, hw, call, c)
        tasks = tiler.run()
        workspace.append(tiler.workspace_bytes())
        call_root.append(root.index)
        call_tasks.append(len(tasks))
        for op_idx, t in enumerate(tasks):
            leaf = leaves.get(t.signature)
            if leaf is None:
                leaf = LeafFunction(
                    index=len(leaves), hash=stable_hash(kernel.name, t.signature),
                    name=f"{kernel.name}_leaf{len(leaves)}", core_type=AIV, label=t.label,
                    work=t.work, ub_bytes=t.ub_bytes, flops=t.flops)
                leaves[t.signature] = leaf
            task_call.append(c)
            task_leaf.append(leaf.index)
            task_op.append(op_idx)
            task_r.append(sum(w.bytes for w in t.work if w.pipe == "mte2"))
            task_w.append(sum(w.bytes for w in t.work if w.pipe == "mte3"))
            reads.append(t.reads)
            writes.append(t.writes)

    leaf_core = np.asarray([leaf.core_type for leaf in leaves.values()], dtype=np.int64)
    edge_src, edge_dst = region_edges(reads, writes)
    call_leaf_tasks = np.asarray(call_tasks, dtype=np.int64)
    call_dev, call_pos = stitch(call_leaf_tasks, kernel.options.runtime_options.stitch_function_max_num)
    ws_per_dev = np.bincount(call_dev, weights=np.asarray(workspace, dtype=float)) \
        if call_dev.size else np.zeros(0)
    return Program(
        kernel=kernel.name,
        root_functions=list(roots.values()),
        leaf_functions=list(leaves.values()),
        call_root=np.asarray(call_root, dtype=np.int64),
        call_dev_task=call_dev,
        call_in_dev_task=call_pos,
        task_call=np.asarray(task_call, dtype=np.int64),
        task_leaf=np.asarray(task_leaf, dtype=np.int64),
        task_op=np.asarray(task_op, dtype=np.int64),
        task_core=leaf_core[np.asarray(task_leaf, dtype=np.int64)],
        task_read_bytes=np.asarray(task_r, dtype=np.int64),
        task_write_bytes=np.asarray(task_w, dtype=np.int64),
        edge_src=edge_src, edge_dst=edge_dst,
        loop_bodies=traced.loop_bodies,
        workspace_bytes=int(ws_per_dev.max()) if ws_per_dev.size else 0,
        info={"tensor_bytes": {n: DTYPE_BYTES[t.dtype] for n, t in kernel.tensors.items()}},
    )
