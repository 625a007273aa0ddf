"""``dyn_topo.txt`` and ``program.json``: the task graph in upstream's layout
(formats: pipeline/formats/topo.py and pipeline/formats/program.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from simcore.compiler import Program

from ..formats import program as pj
from ..formats import topo as fmt
from .atomic import open_bytes, write_json
from . import rowtext as rt
from .jsontext import chunks
from .tasks import TaskView, dev_task_successors


def call_ops(view: TaskView) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    """The CALL ops of each root function and the opmagic of the op each task runs.

    A root function gets one CALL op per (op index, callee) its calls run: op index
    ``o`` has opmagic ``OPMAGIC_BASE + o``; when calls of one root function run
    different leaf functions at the same op index, each further callee gets a magic
    of its own after the root function's last op index.  Returns the per-task
    opmagic and, per root function, its ops as (opmagic, leaf index).
    """
    n_roots = len(view.root_hash)
    n_leaves = max(len(view.leaf_hash), 1)
    n_ops = int(view.op.max()) + 1 if view.op.size else 1
    code = (view.root.astype(np.int64) * n_ops + view.op) * n_leaves + view.leaf
    uniq, inverse = np.unique(code, return_inverse=True)
    root_u, rest = np.divmod(uniq, n_ops * n_leaves)
    op_u, leaf_u = np.divmod(rest, n_leaves)
    magic = np.empty(uniq.size, dtype=np.int64)
    ops: list[list[tuple[int, int]]] = [[] for _ in range(n_roots)]
    for r in range(n_roots):
        mine = np.flatnonzero(root_u == r)
        first = np.ones(mine.size, bool)
        first[1:] = op_u[mine][1:] != op_u[mine][:-1]        # sorted by op, then leaf
        span = int(op_u[mine].max()) + 1 if mine.size else 0
        magic[mine] = np.where(first, pj.OPMAGIC_BASE + op_u[mine],
                               pj.OPMAGIC_BASE + span + np.cumsum(~first) - 1)
        ops[r] = [(int(m), int(l), int(o))
                  for m, l, o in zip(magic[mine], leaf_u[mine], op_u[mine])]
    return magic[inverse.reshape(-1)], ops


def root_operands(root) -> tuple[list[dict], list[dict], dict[int, tuple[list, list]]]:
    """A root function's tensors, rawtensors and, per op index, the tensor magics its CALL
    op reads and writes (each distinct GM box of its first call one tensor)."""
    o = root.operands
    if o is None:
        return [], [], {}
    rawtensors = [{"rawmagic": i, "datatype": pj.DATA_TYPES.get(dtype, 0),
                   "rawshape": list(shape)} for i, (_, shape, dtype) in enumerate(o.tensors)]
    tensors: list[dict] = []
    magic_of: dict[tuple, int] = {}
    per_op: dict[int, tuple[list, list]] = {}
    for op, t, write, lo, hi in zip(o.op.tolist(), o.tensor.tolist(), o.write.tolist(),
                                    o.lo.tolist(), o.hi.tolist()):
        rank = len(o.tensors[t][1])
        key = (t, tuple(lo[:rank]), tuple(hi[:rank]))
        if key not in magic_of:
            magic_of[key] = len(tensors)
            tensors.append({"magic": len(tensors), "rawtensor": t,
                            "shape": [b - a for a, b in zip(key[1], key[2])],
                            "offset": list(key[1]), "mem_type": {"tobe": pj.MEM_DEVICE_DDR}})
        per_op.setdefault(op, ([], []))[1 if write else 0].append(magic_of[key])
    return tensors, rawtensors, per_op


def _dyn_topo_pieces(program: Program) -> Iterator[bytes | memoryview]:
    """``dyn_topo.txt`` a slice of task lines at a time."""
    v = TaskView.of(program)
    opmagic, _ = call_ops(v)
    src, dst, same_call = dev_task_successors(v)
    succ_ids = v.task_id[dst]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=v.size))])
    static = np.bincount(src[same_call], minlength=v.size)
    root_hash, leaf_hash = v.hash_texts()
    wrap = rt.texts([str(fmt.NO_WRAP)])
    # each line starts with the newline that ends the one before, so that a task's
    # successors go at the end of its text
    yield fmt.HEADER.encode()
    for lo, hi in chunks(v.size):
        root, leaf = v.root[lo:hi], v.leaf[lo:hi]
        fields = dict(seq=rt.decimal(v.seq[lo:hi]), tid=rt.decimal(v.task_id[lo:hi]),
                      root=rt.decimal(root), root_hash=rt.pick(root_hash, root),
                      magic=rt.decimal(opmagic[lo:hi]), leaf=rt.decimal(leaf),
                      leaf_hash=rt.pick(leaf_hash, leaf), core=rt.decimal(v.core_type[lo:hi]),
                      op=rt.decimal(v.op[lo:hi]), wrap=wrap, static=rt.decimal(static[lo:hi]))
        if ptr[hi] == ptr[lo]:
            yield _TOPO_LINE.render(hi - lo, **fields)
        else:
            yield _with_successors(*_TOPO_LINE.render_rows(hi - lo, **fields),
                                   succ_ids[ptr[lo]:ptr[hi]], ptr[lo:hi + 1] - ptr[lo])
    yield b"\n"


# a task's line of dyn_topo.txt (fmt.row) after the newline ending the line before, without
# its successors
_TOPO_LINE = rt.Layout("\n%(seq)s,%(tid)s,%(root)s,%(root_hash)s,%(magic)s,%(leaf)s,"
                       "%(leaf_hash)s,%(core)s,%(op)s,%(wrap)s,%(static)s")
_SUCCESSOR = rt.Layout(",%(id)s")


def _with_successors(lines: memoryview, line_ends: np.ndarray, succ_ids: np.ndarray,
                     ptr: np.ndarray) -> bytes:
    """``lines`` with each task's successors (``succ_ids[ptr[t]:ptr[t + 1]]``) after its
    fixed fields, as one piece (a piece per task would cost a hand-over to the writer
    thread each)."""
    succ, succ_ends = _SUCCESSOR.render_rows(succ_ids.size, id=rt.decimal(succ_ids))
    succ_at = np.concatenate([[0], succ_ends])[ptr].tolist()
    ends = line_ends.tolist()
    parts, at = [], 0
    for t in np.flatnonzero(np.diff(ptr)).tolist():
        parts += (lines[at:ends[t]], succ[succ_at[t]:succ_at[t + 1]])
        at = ends[t]
    parts.append(lines[at:])
    return b"".join(parts)


def _leaf_ops(leaf) -> tuple[list[dict], list[dict], list[dict]]:
    """A leaf function's tile ops, each with its first input's tile on its full tensor."""
    tensors, raws, ops = [], [], []
    for i, op in enumerate(leaf.ops):
        axis, tile, full = leaf.op_shapes[i] if i < len(leaf.op_shapes) else (None,) * 3
        entry = {"opmagic": i, "opcode": op.upper(), "ioperands": [], "ooperands": [],
                 **pj.label_field(leaf.label)}
        if tile is not None:
            entry["ioperands"] = [len(tensors)]
            tensors.append({"magic": len(tensors), "shape": list(tile), "rawtensor": len(raws)})
            raws.append({"rawmagic": len(raws), "rawshape": list(full)})
        if axis is not None:
            entry["op_attr"] = {"axis": int(axis)}
        src = leaf.srcs[i] if i < len(leaf.srcs) else None
        if src:
            entry.update(pj.location_fields(src))
        ops.append(entry)
    if ops and leaf.merge_info:
        ops[0]["op_attr"] = {**ops[0].get("op_attr", {}), **pj.merge_attrs(leaf.merge_info)}
    return ops, tensors, raws


def program_json(program: Program) -> dict:
    """Root functions (EXECUTE_GRAPH, calls to leaf functions) first, then the leaf
    functions (BLOCK_GRAPH, their tile ops)."""
    v = TaskView.of(program)
    _, ops_of_root = call_ops(v)
    leaves = program.leaf_functions
    functions = []
    for root, ops in zip(program.root_functions, ops_of_root):
        tensors, raws, per_op = root_operands(root)
        calls = [pj.call_op(magic, leaves[leaf].hash, leaves[leaf].label, leaves[leaf].merge_info,
                            *per_op.get(op, ((), ())))
                 for magic, leaf, op in ops]
        functions.append(pj.function(root.hash, root.name, pj.GraphType.EXECUTE_GRAPH, calls,
                                     tensors, raws))
    for leaf in leaves:
        ops, tensors, raws = _leaf_ops(leaf)
        functions.append(pj.function(leaf.hash, leaf.name, pj.GraphType.BLOCK_GRAPH, ops,
                                     tensors, raws, coreType=int(leaf.core_type)))
    return {"kernel": program.kernel, "functions": functions}


def write_compile_files(program: Program, out: Path) -> dict:
    counts = program.counts()
    write_json(out / "program.json", program_json(program), indent=1)
    with open_bytes(out / "dyn_topo.txt") as handle:
        handle.writelines(_dyn_topo_pieces(program))
    write_json(out / "compile.json", {"kernel": program.kernel, **counts,
                                      "edges": int(program.edge_src.size),
                                      "workspace_bytes": program.workspace_bytes})
    return counts
