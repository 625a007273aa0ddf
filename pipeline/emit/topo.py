"""``dyn_topo.txt`` and ``program.json``: the task graph in upstream's layout.

dyn_topo.txt (reference/upstream-formats.md §3.1): a header, then one row per
leaf task ``seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,
psgId,wrapId,staticSuccCount,successors...`` where the successors inside the same
root call come first (their count is staticSuccCount), then the stitch
successors in other root calls.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simcore.compiler import Program

from .atomic import write_json, write_text

HEADER = ("seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash,coreType,psgId,"
          "wrapId,staticSuccCount,successors")
OPMAGIC_BASE = 10000   # CALL op magics in a root function; any stable numbering works


def dyn_topo_text(program: Program) -> str:
    p = program
    seq, task_id = p.task_dev_task, p.task_id
    ptr = np.concatenate([[0], np.cumsum(np.bincount(p.edge_src, minlength=p.leaf_tasks))])
    root_index = p.call_root[p.task_call]
    root_hash = [f.hash for f in p.root_functions]
    leaf_hash = [f.hash for f in p.leaf_functions]
    lines = [HEADER]
    for t in range(p.leaf_tasks):
        succ = p.edge_dst[ptr[t]:ptr[t + 1]]
        same_call = p.task_call[succ] == p.task_call[t]
        ordered = np.concatenate([succ[same_call], succ[~same_call]])
        leaf = int(p.task_leaf[t])
        row = [int(seq[t]), int(task_id[t]), int(root_index[t]), root_hash[root_index[t]],
               OPMAGIC_BASE + int(p.task_op[t]), leaf, leaf_hash[leaf], int(p.task_core[t]),
               int(p.task_op[t]), -1, int(same_call.sum())]
        row += [int(task_id[s]) for s in ordered]
        lines.append(",".join(map(str, row)))
    return "\n".join(lines) + "\n"


def program_json(program: Program) -> dict:
    """The fields of program.json that upstream's swimlane merger reads (§3.2)."""
    functions = []
    for root in program.root_functions:
        functions.append({"hash": root.hash, "func_magicname": root.name, "graphtype": 1,
                          "tensors": [], "rawtensors": [], "operations": []})
    for leaf in program.leaf_functions:
        tensors, raws, ops = [], [], []
        for i, op in enumerate(leaf.ops):
            axis, tile, full = leaf.op_shapes[i] if i < len(leaf.op_shapes) else (None,) * 3
            entry = {"opmagic": i, "opcode": op.upper(), "ioperands": [], "ooperands": [],
                     **({"semantic_label": {"label": leaf.label}} if leaf.label else {})}
            if tile is not None:   # the first input's tile, viewed on its full tensor
                entry["ioperands"] = [len(tensors)]
                tensors.append({"magic": len(tensors), "shape": list(tile),
                                "rawtensor": len(raws)})
                raws.append({"rawmagic": len(raws), "rawshape": list(full)})
            if axis is not None:
                entry["op_attr"] = {"axis": int(axis)}
            ops.append(entry)
        if ops and leaf.merge_info:
            ops[0]["op_attr"] = {**ops[0].get("op_attr", {}), **merge_attrs(leaf)}
        functions.append({"hash": leaf.hash, "func_magicname": leaf.name, "graphtype": 2,
                          "coreType": leaf.core_type, "tensors": tensors, "rawtensors": raws,
                          "operations": ops})
    return {"kernel": program.kernel, "functions": functions}


_ATTR = {"l1ReuseInfo": "l1_reuse", "cubeMergeInfo": "cube_merge", "vecMergeInfo": "vec_merge"}


def merge_attrs(leaf) -> dict:
    """op_attr keys the swimlane merger reads: <kind>_hashOrder and <kind>_subgraphCount."""
    attrs = {}
    for line in leaf.merge_info:
        kind, rest = line.split(" hashOrder: ")
        order, count = rest.split(", subGraphCount: ")
        attrs[f"{_ATTR[kind]}_hashOrder"] = order
        attrs[f"{_ATTR[kind]}_subgraphCount"] = int(count)
    return attrs


def write_compile_files(program: Program, out: Path) -> dict:
    counts = program.counts()
    write_json(out / "program.json", program_json(program), indent=1)
    write_text(out / "dyn_topo.txt", dyn_topo_text(program))
    write_json(out / "compile.json", {"kernel": program.kernel, **counts,
                                      "edges": int(program.edge_src.size),
                                      "workspace_bytes": program.workspace_bytes})
    return counts
