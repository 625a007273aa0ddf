"""``program.json``: the functions of a compiled kernel (hicann/pypto
framework/src/interface/function/function.cpp ``Function::DumpJson`` and
framework/src/interface/operation/operation.cpp; read by
tools/profiling/draw_swim_lane.py ``load_dyn_topo`` and
tools/profiling/function_json_convert.py).

``{"functions": [...]}``; each function has ``hash`` (a decimal string, as
upstream's FunctionHash is a string), ``func_magicname``, ``graphtype``
(``GraphType`` of framework/src/interface/function/function.h), ``tensors``
(``magic``, ``shape``, ``rawtensor``), ``rawtensors`` (``rawmagic``,
``rawshape``) and ``operations``.  The hierarchy:

- a root function (EXECUTE_GRAPH) per root function of the kernel, listed first
  so that its position in ``functions`` is the rootIndex of dyn_topo.txt; its
  operations are CALL ops, one per callee a root call runs at an op index:
  ``opmagic`` (dyn_topo's opmagic column), ``calleehash`` (the leaf function's
  hash), ``semantic_label.label`` and, for merged leaf functions, the hashOrder
  attributes in ``op_attr``;
- a leaf function (BLOCK_GRAPH) per leaf function, whose operations are the tile
  ops merged into it: ``opcode``, ``semantic_label``, ``op_attr.axis`` (a
  reduction's axis) and ``ioperands`` (the first input's tile, viewed on its
  full tensor).

The merger resolves the operands of EXECUTE_GRAPH functions only: a CALL op's
``ioperands``/``ooperands`` name tensors of its root function (``magic``, ``rawtensor``,
``shape``, ``offset``, ``mem_type``), each a GM box its leaf task reads or writes in the
root function's first call, over ``rawtensors`` (``rawmagic``, ``datatype`` as upstream's
DataType number, ``rawshape``); they become each task's ioperand-hint / ooperand-hint in
merged_swimlane.json.  A CALL op needs a ``calleehash`` that some function's ``hash``
equals.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Iterable, Iterator


class GraphType(IntEnum):
    TENSOR_GRAPH = 0
    TILE_GRAPH = 1
    EXECUTE_GRAPH = 2
    BLOCK_GRAPH = 3
    LEAF_VF_GRAPH = 4
    INVALID = 5


OPMAGIC_BASE = 10000     # upstream op magics start here; any stable numbering works
# upstream's DataType numbers (framework/include/tilefwk/data_type.h) of our dtypes, and the
# MemoryType of a GM tensor (MEM_DEVICE_DDR)
DATA_TYPES = {"int8": 1, "int32": 3, "int64": 4, "fp16": 6, "fp32": 7, "bf16": 8, "bool": 15}
MEM_DEVICE_DDR = 15
CALL = "CALL"
# hashOrder-hint line kinds -> the op_attr key prefix upstream stores them under
MERGE_KINDS = {"l1ReuseInfo": "l1_reuse", "cubeMergeInfo": "cube_merge",
               "vecMergeInfo": "vec_merge"}


def function(hash_: int | str, name: str, graph: GraphType, operations: list[dict],
             tensors: list[dict] | None = None, rawtensors: list[dict] | None = None,
             **extra) -> dict:
    return {"hash": str(hash_), "func_magicname": name, "graphtype": int(graph), **extra,
            "tensors": tensors or [], "rawtensors": rawtensors or [], "operations": operations}


def label_field(label: str) -> dict:
    return {"semantic_label": {"label": label}} if label else {}


def location_fields(src: str) -> dict:
    """An op's source location as upstream dumps it (Operation::DumpLocationJson in
    framework/src/interface/operation/operation.cpp: "file" and "line")."""
    file, _, line = src.rpartition(":")
    return {"file": file, "line": int(line)} if file and line.isdigit() else {}


def op_location(op: dict) -> str | None:
    file, line = op.get("file"), op.get("line")
    return f"{file}:{line}" if isinstance(file, str) and isinstance(line, int) else None


def call_op(opmagic: int, callee_hash: int | str, label: str, merge_info: Iterable[str],
            ioperands: list[int] = (), ooperands: list[int] = ()) -> dict:
    attrs = merge_attrs(merge_info)
    return {"opmagic": int(opmagic), "opcode": CALL, "calleehash": str(callee_hash),
            "ioperands": list(ioperands), "ooperands": list(ooperands), **label_field(label),
            **({"op_attr": attrs} if attrs else {})}


def operand_hint(magics: Iterable[int], tensors: list[dict], rawtensors: list[dict]) -> str:
    """A task's ioperand-hint / ooperand-hint as upstream's merger writes it: the Python
    text of a list of ``{magic: {'shape', 'dtype', 'rawmagic'}}``, each tensor once."""
    seen, out = set(), []
    for m in magics:
        if m not in seen:
            seen.add(m)
            t = tensors[m]
            out.append({m: {"shape": t["shape"], "dtype": rawtensors[t["rawtensor"]]["datatype"],
                            "rawmagic": t["rawtensor"]}})
    return str(out)


def hash_order_line(kind: str, order: str, count: int) -> str:
    """One line of a task's hashOrder-hint,
    e.g. ``l1ReuseInfo hashOrder: func8_0, subGraphCount: 24``."""
    return f"{kind} hashOrder: {order}, subGraphCount: {count}"


def merge_attrs(lines: Iterable[str]) -> dict:
    """hashOrder-hint lines -> op_attr keys ``<kind>_hashOrder`` / ``<kind>_subgraphCount``."""
    attrs: dict = {}
    for line in lines:
        kind, rest = line.split(" hashOrder: ")
        order, count = rest.split(", subGraphCount: ")
        attrs[f"{MERGE_KINDS[kind]}_hashOrder"] = order
        attrs[f"{MERGE_KINDS[kind]}_subgraphCount"] = int(count)
    return attrs


def op_label(op: dict) -> str:
    """An op's semantic label: ``{"label": ...}`` today, a list of labels in older dumps."""
    value = op.get("semantic_label")
    if isinstance(value, dict):
        return str(value.get("label", ""))
    if isinstance(value, list):
        return next((str(v) for v in value if v), "")
    return ""


def tile_ops(data: dict) -> Iterator[tuple[dict, dict]]:
    """(function, op) of every operation that is not a call: the ops tiles run."""
    for func in data.get("functions", []):
        for op in func.get("operations", []):
            if op.get("opcode") != CALL:
                yield func, op


def leaf_functions(data: dict) -> list[dict]:
    """The functions a leaf task runs (BLOCK_GRAPH)."""
    return [f for f in data.get("functions", []) if f.get("graphtype") == GraphType.BLOCK_GRAPH]
